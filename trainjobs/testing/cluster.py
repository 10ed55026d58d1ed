"""Command line for the dev control plane: ``python -m trainjobs.testing.cluster up|down|status``.

``up`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK with fake
nodes (and, with ``--gang-scheduler``, scheduler-plugins' Coscheduling or Volcano) in
``--workdir`` (and, with ``--kueue``, Kueue v0.19.2 with its CRDs and webhooks) and returns
once everything is ready, leaving the daemons running; its last line
on stdout is the admin kubeconfig path, so ``export KUBECONFIG=$(... up ...)`` works.
``down`` stops them (SIGTERM, then SIGKILL, by process group) and leaves no process.
The library behind it is :class:`trainjobs.testing.ControlPlane`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from trainjobs.testing._controlplane import ClusterOptions, ControlPlane
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._gang import GANG_SCHEDULERS
from trainjobs.testing._kueue import KueueOptions, WaitForPodsReady
from trainjobs.testing._state import read_state, stop_control_plane


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainjobs.testing.cluster",
        description="Start or stop a local Kubernetes control plane with KWOK fake nodes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a control plane and wait until it is ready")
    up.add_argument("--workdir", type=Path, required=True, help="state, certificates, logs")
    up.add_argument("--nodes", type=int, default=2, help="number of fake nodes (default 2)")
    up.add_argument("--node-cpu", default="32", help="cpu capacity per node (default 32)")
    up.add_argument("--node-memory", default="256Gi", help="memory per node (default 256Gi)")
    up.add_argument("--node-pods", default="110", help="pod capacity per node (default 110)")
    up.add_argument("--timeout", type=float, default=120.0, help="start-up limit in seconds")
    up.add_argument("--stages", type=Path, help="KWOK stages replacing the packaged ones")
    up.add_argument("--gang-scheduler", action="append", default=[],
                    choices=sorted(GANG_SCHEDULERS), dest="gang_schedulers",
                    help="also run this gang scheduler with its CRDs (repeatable; built once)")
    up.add_argument("--kueue", action="store_true",
                    help="also run Kueue with its CRDs and webhooks (built once)")
    up.add_argument("--kueue-framework", action="append", default=[], dest="kueue_frameworks",
                    metavar="NAME", help="a Kueue integration to enable (repeatable; default "
                    "batch/job); Kueue starts one whose CRD is absent once the CRD appears")
    up.add_argument("--kueue-external-framework", action="append", default=[],
                    dest="kueue_external_frameworks", metavar="KIND.VERSION.GROUP",
                    help="a kind whose Workloads another controller creates (repeatable)")
    up.add_argument("--kueue-pods-ready-timeout", metavar="DURATION",
                    help="Kueue's waitForPodsReady timeout (Go duration; default Kueue's 30m)")
    down = sub.add_parser("down", help="stop the control plane started in --workdir")
    down.add_argument("--workdir", type=Path, required=True)
    status = sub.add_parser("status", help="print the state file of --workdir")
    status.add_argument("--workdir", type=Path, required=True)
    return parser


def _kueue_options(args: argparse.Namespace) -> KueueOptions | None:
    wanted = (args.kueue or args.kueue_frameworks or args.kueue_external_frameworks
              or args.kueue_pods_ready_timeout)
    if not wanted:
        return None
    options = KueueOptions(external_frameworks=tuple(args.kueue_external_frameworks))
    if args.kueue_frameworks:
        options = replace(options, frameworks=tuple(args.kueue_frameworks))
    if args.kueue_pods_ready_timeout:
        options = replace(options, wait_for_pods_ready=WaitForPodsReady(
            timeout=args.kueue_pods_ready_timeout))
    return options


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "up":
            if args.nodes < 0:
                raise ControlPlaneError("--nodes must be 0 or more")
            options = ClusterOptions(
                nodes=args.nodes,
                node_cpu=args.node_cpu,
                node_memory=args.node_memory,
                node_pods=args.node_pods,
                start_timeout=args.timeout,
                stages=args.stages,
                gang_schedulers=tuple(args.gang_schedulers),
                kueue=_kueue_options(args),
            )
            plane = ControlPlane.start(args.workdir, options, detach=True)
            print(
                f"control plane ready in {plane.timings['total']:.1f}s: {plane.server}, "
                f"{len(plane.node_names)} node(s), logs in {plane.logs_dir}",
                file=sys.stderr,
            )
            if plane.kueue is not None:
                print(f"kueue ready in {plane.kueue.timings['ready']:.1f}s (CRDs and webhook "
                      f"configurations installed in {plane.kueue.timings['installed']:.1f}s): "
                      f"webhooks at "
                      f"{plane.kueue.webhook_url}, integrations "
                      f"{', '.join(plane.kueue.options.frameworks)}", file=sys.stderr)
            print(plane.kubeconfig)
        elif args.command == "down":
            stopped = stop_control_plane(args.workdir)
            print(
                f"stopped: {', '.join(stopped)}" if stopped else "nothing was running",
                file=sys.stderr,
            )
        else:
            state = read_state(args.workdir.resolve())
            if state is None:
                print("nothing was started in this workdir", file=sys.stderr)
                return 1
            data = state.to_json()
            data["running"] = {p.name: p.alive() for p in state.processes}
            print(json.dumps(data, indent=2))
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
