"""The control plane a benchmark runs on: KWOK nodes sized for it, the CRDs installed, the
API server's audit log on writes.

Why a scheduler config: kube-scheduler's client defaults to 50 requests/s (one bind per pod);
that, not the machine, would set the pace of "all pods Running".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import REPO, log
from trainjobs.testing import AUDIT_WRITES, ClusterOptions, ControlPlane, apply_crds


@dataclass
class Cluster:
    """A control plane sized for the benchmark, the CRDs installed, audit logging on writes."""

    plane: ControlPlane
    audit_log: Path | None

    @classmethod
    def start(cls, workdir: Path, *, nodes: int, node_pods: int, audit: bool = True,
              apiserver_args: Sequence[str] = (), scheduler_qps: int = 5000,
              controller_manager_args: Sequence[str] = ()) -> Cluster:
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        # A later --config wins over the harness's scheduler flags.
        sched = workdir / "bench-scheduler.yaml"
        sched.write_text(json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(workdir / "kubeconfig"),
                                 "qps": scheduler_qps, "burst": scheduler_qps},
            "leaderElection": {"leaderElect": False},
            "enableProfiling": False,
        }))
        options = ClusterOptions(
            nodes=nodes, node_pods=str(node_pods), node_cpu="1000", node_memory="4Ti",
            start_timeout=300.0, apiserver_args=tuple(apiserver_args),
            audit_policy=AUDIT_WRITES if audit else None,
            scheduler_args=(f"--config={sched}",),
            controller_manager_args=tuple(controller_manager_args))
        log(f"starting control plane: {nodes} KWOK nodes x {node_pods} pods in {workdir}")
        plane = ControlPlane.start(workdir, options)
        try:
            apply_crds(plane.kubeconfig, REPO / "crds", timeout=120)
        except BaseException:
            plane.stop()
            raise
        log(f"control plane ready in {plane.timings.get('total', 0):.1f}s: {plane.server}")
        return cls(plane, plane.audit_log)

    def stop(self) -> None:
        self.plane.stop()

    def audit_offset(self) -> int:
        return self.plane.audit_offset()

    def audit_since(self, offset: int) -> list[dict[str, Any]]:
        """Audit events (writes) logged after `offset` bytes."""
        return self.plane.audit_events(offset)
