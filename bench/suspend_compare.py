"""training-operator v1.9.4 and trainjobs (Kubeflow plugin) side by side on `runPolicy.suspend`:
the same unchanged ``kubeflow.org/v1`` TFJob (a Chief and a Worker that run until stopped,
``cleanPodPolicy: None``) suspended and resumed under each, on one KWOK control plane, and
what each wrote, field by field.

Why a program and not a test: training-operator is built for the benchmarks only (``make
test`` must not build it). Kueue's built-in tfjob integration drives a TFJob through nothing
but ``runPolicy.suspend`` (it patches ``suspend: true`` to evict, ``false`` to admit, and
reads ``replicaStatuses[*].active`` and the conditions back), so this is the contract
docs/migrating.md compares; the figures there come from this program's output.

    python -m bench.suspend_compare [--out suspend-compare.json]

Exits 1 when a phase does not happen (a timeout names it); differences are reported, not
judged.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.api import BENCH_UA, Api
from bench.cluster import Cluster
from bench.jobs import KUBEFLOW_JOB_LABEL, kubeflow_tfjob, tfjob_path
from bench.operator import DEFAULT_OPERATOR_CMD, OperatorProcess
from bench.report import arguments, install_signal_handlers, log
from bench.training_operator import DEFAULT_FLAGS, TRAINING_OPERATOR_VERSION, TrainingOperator
from trainjobs.crdgen import crd_file_name, render_crd_yaml
from trainjobs.plugin.manager import load_plugins
from trainjobs.testing import apply_crds

NAME = "cmp"
PHASES = ("running", "suspended", "resumed")


def _true(status: dict[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in status.get("conditions") or [])


async def _wait(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.3)


async def _observe(api: Api, ns: str) -> dict[str, Any]:
    """The job's status and the names of its pods (those not being deleted) and Services."""
    job = await api.request("GET", tfjob_path(ns, NAME, group="kubeflow.org"))
    selector = f"?labelSelector={KUBEFLOW_JOB_LABEL}%3D{NAME}"
    pods = await api.request("GET", f"/api/v1/namespaces/{ns}/pods{selector}")
    services = await api.request("GET", f"/api/v1/namespaces/{ns}/services{selector}")
    return {"status": job.get("status") or {},
            "pods": sorted(p["metadata"]["name"] for p in pods["items"]
                           if not p["metadata"].get("deletionTimestamp")),
            "services": sorted(s["metadata"]["name"] for s in services["items"])}


async def scenario(api: Api, ns: str, timeout: float) -> dict[str, Any]:
    """Create, wait Running; suspend, wait Suspended with no pod or Service (or 20 s); resume,
    wait Running again. What was seen at the end of each phase."""
    job = kubeflow_tfjob(NAME, ns, workers=1, chief_run=None, worker_run=None)
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}
    await api.ensure_namespace(ns)
    await api.create_ok(tfjob_path(ns, group="kubeflow.org"), job)
    path = tfjob_path(ns, NAME, group="kubeflow.org")
    seen: dict[str, Any] = {}

    async def running() -> dict[str, Any] | None:
        got = await _observe(api, ns)
        return got if _true(got["status"], "Running") and len(got["pods"]) == 2 else None

    seen["running"] = await _wait("Running", running, timeout)
    await asyncio.sleep(1.5)  # whole-second timestamps: let startTime differ on resume
    await api.merge_patch(path, {"spec": {"runPolicy": {"suspend": True}}})

    async def suspended() -> dict[str, Any] | None:
        got = await _observe(api, ns)
        return got if _true(got["status"], "Suspended") else None

    await _wait("Suspended", suspended, timeout)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # what it deletes, once it has deleted it
        got = await _observe(api, ns)
        if not got["pods"] and not got["services"]:
            break
        await asyncio.sleep(0.3)
    await asyncio.sleep(2)  # let the status settle
    seen["suspended"] = await _observe(api, ns)
    await asyncio.sleep(1.5)
    await api.merge_patch(path, {"spec": {"runPolicy": {"suspend": False}}})

    async def resumed() -> dict[str, Any] | None:
        got = await _observe(api, ns)
        return got if (_true(got["status"], "Running") and len(got["pods"]) == 2
                       and not _true(got["status"], "Suspended")) else None

    seen["resumed"] = await _wait("Running after the resume", resumed, timeout)
    return seen


def project(seen: dict[str, Any]) -> dict[str, Any]:
    """What the comparison looks at in one phase: each condition's status, reason and
    message; each replica type's active/succeeded/failed; startTime and completionTime set;
    pods and Services left."""
    status = seen["status"]
    return {
        "conditions": {c["type"]: [c.get("status"), c.get("reason"), c.get("message")]
                       for c in status.get("conditions") or []},
        "replicaStatuses": {t: {k: s.get(k, 0) for k in ("active", "succeeded", "failed")}
                            for t, s in sorted((status.get("replicaStatuses") or {}).items())},
        "startTime": status.get("startTime"),
        "completionTime": status.get("completionTime"),
        "pods": seen["pods"],
        "services": seen["services"],
    }


def differences(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """Field-by-field differences per phase (startTime compared as set / kept / renewed)."""
    out = []
    for phase in PHASES:
        a, b = project(theirs[phase]), project(ours[phase])
        for key in ("replicaStatuses", "completionTime", "pods", "services"):
            if a[key] != b[key]:
                out.append(f"{phase}: {key}: training-operator {a[key]} / trainjobs {b[key]}")
        for ctype in sorted(set(a["conditions"]) | set(b["conditions"])):
            ca, cb = a["conditions"].get(ctype), b["conditions"].get(ctype)
            if ca != cb:
                out.append(f"{phase}: condition {ctype}: training-operator {ca} / "
                           f"trainjobs {cb}")
    for who, seen in (("training-operator", theirs), ("trainjobs", ours)):
        first = seen["running"]["status"].get("startTime")
        kept = seen["suspended"]["status"].get("startTime")
        again = seen["resumed"]["status"].get("startTime")
        out.append(f"{who}: startTime running {first}, suspended {kept}, resumed {again}")
    return out


async def run(workdir: Path, timeout: float) -> dict[str, Any]:
    cluster = Cluster.start(workdir, nodes=1, node_pods=100, audit=False)
    api = Api(cluster.plane, BENCH_UA, pool=4)
    result: dict[str, Any] = {"training_operator_version": TRAINING_OPERATOR_VERSION}
    theirs: TrainingOperator | None = None
    op: OperatorProcess | None = None
    try:
        theirs = TrainingOperator.prepare(cluster.plane, workdir / "training-operator")
        theirs.install()
        op = OperatorProcess(theirs.command(DEFAULT_FLAGS), kubeconfig=cluster.plane.kubeconfig,
                             namespace="theirs", concurrency=1,
                             log_path=workdir / "training-operator.log")
        await op.start(timeout=timeout)
        result["training-operator"] = await scenario(api, "theirs", timeout)
        await op.stop()
        op.kill_now()
        op = None
        theirs.uninstall()
        theirs = None
        crds = workdir / "kubeflow-crds"
        crds.mkdir(exist_ok=True)
        for framework in load_plugins(enable=["kubeflow"]).frameworks.values():
            if framework.group == "kubeflow.org":
                (crds / crd_file_name(framework)).write_text(render_crd_yaml(framework))
        apply_crds(cluster.plane.kubeconfig, crds, timeout=120)
        op = OperatorProcess(DEFAULT_OPERATOR_CMD + " --enable-plugins kubeflow",
                             kubeconfig=cluster.plane.kubeconfig, namespace="ours",
                             concurrency=1, log_path=workdir / "trainjobs.log")
        await op.start(timeout=timeout)
        result["trainjobs"] = await scenario(api, "ours", timeout)
        result["differences"] = differences(result["training-operator"], result["trainjobs"])
        return result
    finally:
        if op is not None:
            await op.stop()
            op.kill_now()
        if theirs is not None:
            theirs.uninstall()
        await api.close()
        cluster.stop()


def main() -> None:
    parser = arguments("suspend_compare", __doc__)
    parser.add_argument("--out", type=Path, default=None, help="write the full result here")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    install_signal_handlers()
    with tempfile.TemporaryDirectory(prefix="suspend-compare-") as tmp:
        try:
            result = asyncio.run(run(Path(tmp), args.timeout))
        except TimeoutError as exc:
            log(f"suspend_compare: {exc}")
            sys.exit(1)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    for line in result["differences"]:
        print(line)


if __name__ == "__main__":
    main()
