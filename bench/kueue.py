"""Kueue release benchmark (issue 25 point 6): queued jobs released at once by raising their
ClusterQueue's quota; how long until every pod of every job runs. The operator (TfJobs, each
admitted through the Workload the operator creates) against Kubernetes' own Job controller
(batch/v1 Jobs with the same pods, admitted by Kueue's built-in batch/job integration: the
controller-manager's Job controller creates their pods), on one control plane with one Kueue
v0.19.2, in one run.

Each repeat starts a control plane (KWOK nodes) and Kueue, one ResourceFlavor, and per phase
(the order alternates between repeats) a namespace, a ClusterQueue with a CPU quota of 0 and a
LocalQueue. A phase creates --jobs jobs (a Chief and --workers Workers, or a Job of as many
pods; every pod requests 100m CPU), waits until the ClusterQueue counts every Workload
pending, then patches its quota to fit them all (t0) and waits until every pod is Running.
Per phase: release -> all pods Running, release -> first pod Running, CPU by component from
creation to pending and from release to all Running (the operator's own, and `others`: work
not of this bench sharing the machine), and the writes of Workloads by component (audit log,
by user agent) over the whole phase.

    python -m bench.kueue                        # 100 jobs x 4 pods, 1 repeat
    python -m bench.kueue --jobs 50 --repeats 3
    python -m bench.kueue --label new --operator-cmd "<cmd>" --label old --operator-cmd "<cmd>"

Results to stdout and docs/benchmarks/kueue.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.api import BENCH_UA, CEILING_UA, Api, gather_bounded
from bench.cluster import Cluster
from bench.cpu import cpu_diff, cpu_snapshot
from bench.jobs import tfjob, tfjob_path
from bench.operator import DEFAULT_OPERATOR_CMD, OperatorProcess
from bench.report import install_signal_handlers, log, machine, stats, write_result
from bench.watcher import Watcher
from trainjobs.kube import ApiError
from trainjobs.testing import Kueue, KueueOptions, agent_of, create_resource_flavor

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
POD_CPU_MILLI = 100
FLAVOR = "default"
BASELINE = "batch-job"
# Kueue's user agent ("kueue/<version> ...") besides the bench's own.
_AGENTS = (("kueue", "kueue"), (CEILING_UA, "ceiling"), (BENCH_UA, "bench"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.kueue", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100, help="jobs per phase (default 100)")
    p.add_argument("--workers", type=int, default=3, help="Workers per TfJob (default 3)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--node-pods", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=16,
                   help="the operator's --concurrency and the bench's creates in flight")
    p.add_argument("--operator-cmd", action="append", default=[],
                   help=f"an operator command per phase (default: {DEFAULT_OPERATOR_CMD!r})")
    p.add_argument("--label", action="append", default=[],
                   help="a name per --operator-cmd (default: ours, other1, ...)")
    p.add_argument("--timeout", type=float, default=900.0, help="per wait")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def _with_cpu(template: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(template)
    for container in out["spec"]["containers"]:
        container["resources"] = {"requests": {"cpu": f"{POD_CPU_MILLI}m"}}
    return out


def queued_tfjob(name: str, ns: str, workers: int) -> dict[str, Any]:
    """The bench's TfJob (bench/jobs.py), labelled for the queue, each pod requesting CPU;
    its pods run until the control plane goes."""
    job = tfjob(name, ns, workers=workers, chief_run=None, worker_run=None)
    job["metadata"]["labels"] = {QUEUE_LABEL: "queue"}
    for spec in job["spec"]["replicaSpecs"].values():
        spec["template"] = _with_cpu(spec["template"])
    return job


def queued_batch_job(name: str, ns: str, pods: int, template: dict[str, Any]) -> dict[str, Any]:
    """A batch/v1 Job of `pods` pods running the TfJob's container (Kueue's webhook
    suspends it at creation, as for any Job labelled for a queue)."""
    pod = _with_cpu(template)
    pod["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: "queue"}},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": pod}}


async def wait_pending(api: Api, ns: str, cq: str, jobs: int, timeout: float) -> float:
    """Until Kueue has a Workload for each of `ns`'s `jobs` jobs and counts every one pending
    in the ClusterQueue `cq` (its status.pendingWorkloads; Kueue writes QuotaReserved False
    only on the Workloads it tried); returns the seconds waited."""
    t0 = time.perf_counter()
    pending = 0
    while True:
        try:
            cq_obj = await api.request("GET", f"{KUEUE_API}/clusterqueues/{cq}")
            pending = int((cq_obj.get("status") or {}).get("pendingWorkloads") or 0)
        except ApiError as exc:  # (429 while the CRD's storage initializes, a 5xx)
            if exc.status not in (0, 429) and exc.status < 500:
                raise
        if pending >= jobs:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{ns}: {pending} of {jobs} Workloads pending after {timeout}s")
        await asyncio.sleep(0.5)


async def set_quota(api: Api, cq: str, milli_cpu: int) -> None:
    await api.merge_patch(f"{KUEUE_API}/clusterqueues/{cq}", {"spec": {"resourceGroups": [{
        "coveredResources": ["cpu"],
        "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu",
                                                     "nominalQuota": f"{milli_cpu}m"}]}]}]}})


async def run_phase(cluster: Cluster, watcher: Watcher, api: Api, label: str,
                    command: str | None, ns: str, args: argparse.Namespace,
                    workdir: Path) -> dict[str, Any]:
    pods = 1 + args.workers
    n_pods = args.jobs * pods
    cq = f"cq-{ns}"
    await api.create(f"{KUEUE_API}/clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": cq}, "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [
                {"name": "cpu", "nominalQuota": "0"}]}]}]}})
    await api.create(f"{KUEUE_API}/namespaces/{ns}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "queue", "namespace": ns}, "spec": {"clusterQueue": cq}})
    op = None
    if command is not None:
        op = OperatorProcess(command, kubeconfig=cluster.plane.kubeconfig, namespace=ns,
                             concurrency=args.concurrency,
                             log_path=workdir / f"operator-{ns}.log")
    res: dict[str, Any] = {"label": label, "jobs": args.jobs, "pods_per_job": pods,
                           "command": " ".join(op.argv) if op else "kube-controller-manager"}
    try:
        if op is not None:
            res["ready_seconds"] = await op.start()
        template = queued_tfjob("x", ns, args.workers)["spec"]["replicaSpecs"]["Chief"][
            "template"]
        if command is None:
            docs = [(f"/apis/batch/v1/namespaces/{ns}/jobs",
                     queued_batch_job(f"bench-{i:05d}", ns, pods, template))
                    for i in range(args.jobs)]
        else:
            docs = [(tfjob_path(ns), queued_tfjob(f"bench-{i:05d}", ns, args.workers))
                    for i in range(args.jobs)]
        audit0 = cluster.audit_offset()
        cpu0 = cpu_snapshot(cluster.plane, op)
        t_create = time.perf_counter()
        await gather_bounded(args.concurrency, (api.create_ok(p, d) for p, d in docs))
        await wait_pending(api, ns, cq, args.jobs, args.timeout)
        res["pending_seconds"] = time.perf_counter() - t_create
        cpu1 = cpu_snapshot(cluster.plane, op)
        c = watcher.counts[ns]
        if c.pods:
            raise RuntimeError(f"{label}: {c.pods} pods exist before the release")
        log(f"{label}: {args.jobs} Workloads pending after {res['pending_seconds']:.1f}s; "
            f"releasing")
        t0 = time.perf_counter()
        await set_quota(api, cq, n_pods * POD_CPU_MILLI)
        await watcher.wait(lambda: c.pods_running >= n_pods, f"{label}: pods running",
                           args.timeout)
        cpu2 = cpu_snapshot(cluster.plane, op)
        mine = [p for k, p in watcher.pods.items() if k[0] == ns]
        running = sorted((p.running or 0.0) - t0 for p in mine)
        by_agent = workload_writes(cluster.audit_since(audit0), ns)
        res.update({
            "pods": n_pods,
            "first_pod_running_seconds": running[0],
            "pods_running_seconds": running[-1],
            "pods_running_p50_seconds": running[len(running) // 2],
            "cpu_until_pending": cpu_diff(cpu1, cpu0),
            "cpu_release_to_running": cpu_diff(cpu2, cpu1),
            "workload_writes": by_agent,
            "workload_writes_total": {who: sum(w.values()) for who, w in by_agent.items()},
        })
        if op is not None:
            res["operator_cpu_per_job_ms"] = round(
                1000 * (cpu2["operator"] - cpu0["operator"]) / args.jobs, 1)
        log(f"{label}: all {n_pods} pods Running {running[-1]:.1f}s after the release "
            f"(first {running[0]:.1f}s); Workload writes {res['workload_writes_total']}")
        return res
    finally:
        if op is not None:
            await op.stop()
            op.kill_now()


def workload_writes(events: list[dict[str, Any]], ns: str) -> dict[str, dict[str, int]]:
    """Writes of `ns`'s Workloads per component (user agent; Kueue told apart from the
    operator), keyed `VERB workloads[/subresource]`."""
    out: dict[str, Counter[str]] = {}
    for ev in events:
        ref = ev.get("objectRef") or {}
        if ref.get("resource") != "workloads" or ref.get("namespace") != ns:
            continue
        what = "workloads" + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        who = agent_of(ev.get("userAgent", ""), _AGENTS)
        out.setdefault(who, Counter())[f"{ev.get('verb', '?')} {what}"] += 1
    return {who: dict(sorted(c.items())) for who, c in out.items()}


async def one_repeat(i: int, args: argparse.Namespace, commands: list[tuple[str, str]],
                     root: Path) -> dict[str, Any]:
    workdir = root / f"repeat-{i}"
    cluster = Cluster.start(workdir, nodes=args.nodes, node_pods=args.node_pods)
    kueue: Kueue | None = None
    api: Api | None = None
    watcher: Watcher | None = None
    try:
        kueue = Kueue.start(cluster.plane, KueueOptions(frameworks=("batch/job",)))
        log(f"kueue ready in {kueue.timings.get('ready', 0):.1f}s")
        create_resource_flavor(cluster.plane, FLAVOR)
        phases: list[tuple[str, str | None]] = [(BASELINE, None), *commands]
        if i % 2:
            phases.reverse()
        api = Api(cluster.plane, BENCH_UA, pool=16 + 3 * len(phases))
        namespaces = {label: f"kq-{label}" for label, _ in phases}
        for ns in namespaces.values():
            await api.ensure_namespace(ns)
        watcher = Watcher(api, list(namespaces.values()))
        watcher.start()
        await watcher.synced.wait()
        out: dict[str, Any] = {"order": [label for label, _ in phases]}
        for label, command in phases:
            out[label] = await run_phase(cluster, watcher, api, label, command,
                                         namespaces[label], args, workdir)
        return out
    finally:
        if watcher is not None:
            await watcher.stop()
        if api is not None:
            await api.close()
        if kueue is not None:
            kueue.stop()
        cluster.stop()


def summarize(repeats: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label in labels:
        rs = [r[label] for r in repeats]
        out[label] = {k: stats([x[k] for x in rs]) for k in (
            "pods_running_seconds", "first_pod_running_seconds", "pending_seconds")}
        out[label]["release_cpu_s"] = {
            who: stats([x["cpu_release_to_running"].get(who, 0.0) for x in rs])
            for who in ("operator", "kueue", "kube-controller-manager", "kube-apiserver",
                        "kube-scheduler", "others")}
        out[label]["workload_writes_per_job"] = {
            who: stats([x["workload_writes_total"].get(who, 0) / x["jobs"] for x in rs])
            for who in sorted({w for x in rs for w in x["workload_writes_total"]})}
        if "operator_cpu_per_job_ms" in rs[0]:
            out[label]["operator_cpu_per_job_ms"] = stats(
                [x["operator_cpu_per_job_ms"] for x in rs])
    return out


def print_summary(summary: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\nkueue release: {args.jobs} jobs x {1 + args.workers} pods per phase, "
          f"{args.repeats} repeat(s) (median, min-max)")
    for label, s in summary.items():
        def f(st: dict[str, float]) -> str:
            return f"{st['median']:.1f} ({st['min']:.1f}-{st['max']:.1f})"
        print(f"{label}:")
        print(f"  release -> all pods Running (s)   {f(s['pods_running_seconds'])}")
        print(f"  release -> first pod Running (s)  {f(s['first_pod_running_seconds'])}")
        print(f"  create -> all Workloads pending   {f(s['pending_seconds'])}")
        print("  CPU s, release -> all Running     " + ", ".join(
            f"{who} {st['median']:.1f}" for who, st in s["release_cpu_s"].items()))
        print("  Workload writes per job           " + ", ".join(
            f"{who} {st['median']:.2f}" for who, st in s["workload_writes_per_job"].items()))
        if "operator_cpu_per_job_ms" in s:
            print(f"  operator CPU per job (ms)         {f(s['operator_cpu_per_job_ms'])}")


async def amain(args: argparse.Namespace) -> int:
    cmds = args.operator_cmd or [DEFAULT_OPERATOR_CMD]
    labels = args.label or ["ours", *[f"other{i}" for i in range(1, len(cmds))]]
    if len(labels) != len(cmds):
        raise SystemExit("give one --label per --operator-cmd")
    commands = list(zip(labels, cmds, strict=True))
    root = Path(tempfile.mkdtemp(prefix="trainjobs-bench-kueue-"))
    repeats = []
    for i in range(args.repeats):
        log(f"=== repeat {i + 1}/{args.repeats}")
        repeats.append(await one_repeat(i, args, commands, root))
    summary = summarize(repeats, [BASELINE, *labels])
    print_summary(summary, args)
    write_result("kueue", {"machine": machine(), "args": vars(args), "summary": summary,
                           "repeats": repeats}, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    install_signal_handlers()
    return asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
