"""Gang schedulers beside kube-scheduler in a test control plane: scheduler-plugins'
Coscheduling and Volcano, each with its CRDs (``ClusterOptions(gang_schedulers=...)``,
``python -m trainjobs.testing.cluster up --gang-scheduler ...``).

Why a module of its own: the control plane does not need them, and they are pinned, built and
cached apart (``build-gang-schedulers.sh``, like ``build-control-plane.sh``). Each runs as a
second scheduler that only takes pods naming it in ``schedulerName``; the others stay with
kube-scheduler.

* ``coscheduling``: scheduler-plugins' kube-scheduler (v0.34.7, Kubernetes 1.34.7) with one
  profile, ``scheduler-plugins-scheduler``, whose queue sort, pre-filter, post-filter, permit
  and reserve are Coscheduling's (as the project's own as-a-second-scheduler manifests), and
  its controller, which writes the PodGroups' status.
* ``volcano``: vc-scheduler (v1.10.0) with its default actions and plugins (enqueue, allocate,
  backfill; priority, gang, conformance, overcommit, drf, predicates, proportion, nodeorder);
  it writes PodGroup status itself and creates the ``default`` Queue.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from trainjobs.testing._binaries import cache_root, ensure_built
from trainjobs.testing._crds import apply_crds
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kubeapi import health_ok, ok
from trainjobs.testing._process import free_ports

if TYPE_CHECKING:
    from trainjobs.testing._controlplane import ControlPlane

__all__ = ["GANG_SCHEDULERS", "SCHEDULER_PLUGINS_NAME", "find_gang_scheduler",
           "start_gang_schedulers"]

SCHEDULER_PLUGINS_VERSION = "v0.34.7"
VOLCANO_VERSION = "v1.10.0"
#: name -> (cache dir under $TRAINJOBS_CACHE/schedulers, binaries)
GANG_SCHEDULERS = {
    "coscheduling": (f"scheduler-plugins-{SCHEDULER_PLUGINS_VERSION}",
                     ("kube-scheduler", "controller")),
    "volcano": (f"volcano-{VOLCANO_VERSION}", ("vc-scheduler",)),
}
#: The schedulerName of the Coscheduling profile (the gang plugin's default for coscheduling).
SCHEDULER_PLUGINS_NAME = "scheduler-plugins-scheduler"
SCRIPT_NAME = "build-gang-schedulers.sh"


def find_gang_scheduler(name: str, *, build: bool = True) -> Path:
    """The directory (``bin/``, ``crds/``) of one gang scheduler, built when missing and
    allowed (tens of minutes on a cold Go cache; progress on stderr)."""
    if name not in GANG_SCHEDULERS:
        raise ControlPlaneError(f"unknown gang scheduler {name!r}: one of "
                                f"{', '.join(GANG_SCHEDULERS)}")
    subdir, binaries = GANG_SCHEDULERS[name]
    home = cache_root() / "schedulers" / subdir

    def complete() -> bool:
        return (home / "crds").is_dir() and all(
            os.access(home / "bin" / b, os.X_OK) for b in binaries)

    return ensure_built(name, home, complete, SCRIPT_NAME, name, build=build, env={
        "SCHEDULER_PLUGINS_VERSION": SCHEDULER_PLUGINS_VERSION,
        "VOLCANO_VERSION": VOLCANO_VERSION})


def start_gang_schedulers(plane: ControlPlane, names: Sequence[str], deadline: float) -> None:
    """Install each scheduler's CRDs, start it, and wait until it serves."""
    for name in names:
        home = find_gang_scheduler(name)
        apply_crds(plane.kubeconfig, home / "crds", kubectl=plane.bin_dir / "kubectl",
                   timeout=max(1.0, deadline - time.monotonic()))
        if name == "coscheduling":
            _start_coscheduling(plane, home, deadline)
        else:
            _start_volcano(plane, home, deadline)


def _start_coscheduling(plane: ControlPlane, home: Path, deadline: float) -> None:
    config = plane.workdir / "scheduler-plugins.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(plane.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "enableProfiling": False,
        "profiles": [{
            "schedulerName": SCHEDULER_PLUGINS_NAME,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}],
                              "disabled": [{"name": "*"}]},
            },
        }],
    }))
    (port,) = free_ports(1)
    plane.ports["scheduler-plugins-scheduler"] = port
    plane.launch("scheduler-plugins-scheduler", home / "bin" / "kube-scheduler", [
        f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={plane.workdir / 'pki' / 'scheduler-plugins-generated'}",
        # Pods Coscheduling's PreFilter turned away ("resource gap": the cluster lacks the
        # group's minResources) are retried only when a pod is added or a PodGroup changes
        # (its EventsToRegister), not when capacity frees, else after this period: 5 min by
        # default. 10 s keeps the tests short; docs/scheduling.md tells operators.
        "--pod-max-in-unschedulable-pods-duration=10s"])
    # Metrics and probes off ("0"): no fixed ports, so control planes can run side by side.
    plane.launch("scheduler-plugins-controller", home / "bin" / "controller",
                 ["--metricsAddr=0", "--probeAddr=0"], {"KUBECONFIG": str(plane.kubeconfig)})
    plane.wait_until(lambda: health_ok(port, "/readyz"),
                     "scheduler-plugins-scheduler /readyz", deadline)


def _start_volcano(plane: ControlPlane, home: Path, deadline: float) -> None:
    plane.launch("vc-scheduler", home / "bin" / "vc-scheduler", [
        f"--kubeconfig={plane.kubeconfig}", "--leader-elect=false",
        "--schedule-period=500ms", "-v=3"])
    api = plane.api()
    # vc-scheduler creates the default Queue once its clients are up, before it schedules.
    plane.wait_until(
        lambda: ok(api, "/apis/scheduling.volcano.sh/v1beta1/queues/default"),
        "vc-scheduler to create Queue default", deadline)
