"""Smoke run of the training-operator baseline: a fresh KWOK control plane, training-operator
v1.9.4 installed and started by ``bench.training_operator`` as ``bench.fanout
--training-operator`` starts it, and one ``kubeflow.org/v1`` TFJob (a Chief and Workers that
KWOK ends with exit code 0) reconciled to Succeeded.

Why a program and not a test: training-operator is built for the benchmarks only, and ``make
test`` must not build it. It exits 1, saying why, when the job does not succeed.

    python -m bench.training_operator_smoke [--workers 2] [--run 3s] [--tuned]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.api import BENCH_UA, Api
from bench.cluster import Cluster
from bench.jobs import kubeflow_tfjob, tfjob_path
from bench.operator import OperatorProcess
from bench.report import arguments, install_signal_handlers, log
from bench.training_operator import DEFAULT_FLAGS, TUNED_FLAGS, TrainingOperator

NAMESPACE = "smoke"


async def smoke(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cluster = Cluster.start(workdir, nodes=1, node_pods=100, audit=False)
    op: OperatorProcess | None = None
    api = Api(cluster.plane, BENCH_UA, pool=4)
    theirs: TrainingOperator | None = None
    try:
        theirs = TrainingOperator.prepare(cluster.plane, workdir / "training-operator")
        theirs.install()
        await api.ensure_namespace(NAMESPACE)
        op = OperatorProcess(theirs.command(TUNED_FLAGS if args.tuned else DEFAULT_FLAGS),
                             kubeconfig=cluster.plane.kubeconfig, namespace=NAMESPACE,
                             concurrency=1, log_path=workdir / "training-operator.log")
        ready = await op.start(timeout=args.timeout)
        log(f"training-operator ready in {ready:.1f}s")
        job = kubeflow_tfjob("smoke", NAMESPACE, workers=args.workers, chief_run=args.chief_run,
                             worker_run=args.run)
        t0 = time.monotonic()
        await api.create_ok(tfjob_path(NAMESPACE, group="kubeflow.org"), job)
        path = tfjob_path(NAMESPACE, "smoke", group="kubeflow.org")
        true: list[str] = []
        obj: dict[str, Any] = {}
        while time.monotonic() - t0 < args.timeout:
            obj = await api.request("GET", path)
            true = [c["type"] for c in obj.get("status", {}).get("conditions") or []
                    if c.get("status") == "True"]
            if "Succeeded" in true or "Failed" in true:
                break
            await asyncio.sleep(0.5)
        pods = await api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
        services = await api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/services")
        return {
            "ready_seconds": round(ready, 2),
            "succeeded_seconds": round(time.monotonic() - t0, 2) if "Succeeded" in true else None,
            "conditions_true": true,
            "status": obj.get("status"),
            "pods": {p["metadata"]["name"]: p["status"].get("phase") for p in pods["items"]},
            "services": sorted(s["metadata"]["name"] for s in services["items"]),
            "footprint": op.footprint(),
            "log": str(op.log_path),
        }
    finally:
        if op is not None:
            await op.stop()
            op.kill_now()
        if theirs is not None:
            theirs.uninstall()
        await api.close()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    p = arguments("training_operator_smoke", __doc__)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--run", default="3s", help="how long each Worker runs (KWOK)")
    p.add_argument("--chief-run", default="5s", help="how long the Chief runs (KWOK)")
    p.add_argument("--tuned", action="store_true", help="16 threads, QPS 500, burst 1000")
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    install_signal_handlers()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trainjobs-to-smoke-"))
    result = asyncio.run(smoke(args, workdir))
    print(json.dumps(result, indent=1))
    if result["succeeded_seconds"] is None:
        log(f"FAILED: the TFJob did not succeed (conditions {result['conditions_true']}); "
            f"logs in {workdir}")
        return 1
    log(f"OK: TFJob Succeeded {result['succeeded_seconds']}s after create; logs in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
