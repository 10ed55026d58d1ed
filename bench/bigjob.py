"""One large job beside many small ones, on the real control plane: the operator's longest
event-loop stall, how long the small jobs wait for their pods, and the memory the large job
costs (issue 15.1c/d).

The operator runs as a child process watching one namespace. After it is ready, one job of
--workers Workers (TfJob: plus a Chief; MxJob: plus a Scheduler and 2 Servers) and --small
small TfJobs (a Chief and a Worker) are created together; pods run until deleted (KWOK). The
figures come from the operator's own /metrics (trainjobs_event_loop_lag_seconds and its max)
and /proc (RSS, peak).

    python -m bench.bigjob                        # TfJob of 2,000 Workers beside 100 small
    python -m bench.bigjob --kind MxJob --workers 2000
    python -m bench.bigjob --validate             # no cluster: CPU of parse_job/render_job
    python -m bench.bigjob --repeats 3 --label old --operator-cmd "env PYTHONPATH=/tmp/old \\
        {python} -P -m trainjobs.cli operator ..." --label new --operator-cmd "{python} ..."

With several --operator-cmd, the phases alternate (old, new, old, new, ...), each on a fresh
control plane, so that the baseline is measured in the same run on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.api import Api, gather_bounded
from bench.cluster import Cluster
from bench.jobs import tfjob
from bench.operator import OperatorProcess, operator_phases
from bench.report import arguments, log, machine, workdir, write_result

NS = "bench-bigjob"
PLURALS = {"TfJob": "tfjobs", "MxJob": "mxjobs"}
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def big_job(kind: str, workers: int) -> dict[str, Any]:
    if kind == "TfJob":
        return tfjob("big", NS, workers=workers, chief_run=None, worker_run=None)
    tmpl = {"spec": {"containers": [{"name": "mxnet", "image": "example.invalid/mx:1"}]}}
    return {"apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob",
            "metadata": {"name": "big", "namespace": NS},
            "spec": {"replicaSpecs": {"Scheduler": {"replicas": 1, "template": tmpl},
                                      "Server": {"replicas": 2, "template": tmpl},
                                      "Worker": {"replicas": workers, "template": tmpl}}}}


async def pods_per_job(api: Api) -> dict[str, int]:
    """Pods per job-name label, read as metadata only (a big job's pods carry megabytes)."""
    async with api.session.get(f"{api.server}/api/v1/namespaces/{NS}/pods",
                               headers={"Accept": METADATA_ONLY},
                               timeout=aiohttp.ClientTimeout(total=60)) as resp:
        body = await resp.json()
    counts: dict[str, int] = {}
    for item in body.get("items") or []:
        job = ((item.get("metadata") or {}).get("labels") or {}).get("trainjobs.io/job-name")
        if job:
            counts[job] = counts.get(job, 0) + 1
    return counts


async def loop_lag(op: OperatorProcess) -> dict[str, float]:
    """The operator's loop lag so far: max, max while on the CPU, count, count over 100 ms."""
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{op.port}/metrics") as r:
        text = await r.text()
    out = {"max_s": 0.0, "busy_max_s": 0.0, "count": 0.0, "over_100ms": 0.0}
    le_100 = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "trainjobs_event_loop_lag_max_seconds":
                out["max_s"] = sample.value
            elif sample.name == "trainjobs_event_loop_lag_busy_max_seconds":
                out["busy_max_s"] = sample.value
            elif sample.name == "trainjobs_event_loop_lag_seconds_count":
                out["count"] = sample.value
            elif sample.name == "trainjobs_event_loop_lag_seconds_bucket" and \
                    sample.labels.get("le") == "0.1":
                le_100 = sample.value
    out["over_100ms"] = out["count"] - le_100
    return out


async def run(args: argparse.Namespace, root: Path, operator_cmd: str) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.start(root / "cluster", nodes=args.nodes, node_pods=args.node_pods,
                            audit=False)
    api = Api(cluster.plane)
    big = big_job(args.kind, args.workers)
    big_pods = sum(r["replicas"] for r in big["spec"]["replicaSpecs"].values())
    # The operator refuses a job over --max-replicas-per-job (default 2000): a TfJob of 2,000
    # Workers has a Chief too, so the limit is raised to fit the job under test.
    command = f"{operator_cmd} --max-replicas-per-job {max(big_pods, 2000)}"
    op = OperatorProcess(command, kubeconfig=cluster.plane.kubeconfig,
                         namespace=NS, concurrency=16, log_path=root / "operator.log")
    try:
        await api.ensure_namespace(NS)
        await op.start()
        await asyncio.sleep(3)
        before_lag, before_mem = await loop_lag(op), op.footprint()
        log(f"operator ready: RSS {before_mem['rss_mb']:.0f} MB, lag max "
            f"{before_lag['max_s'] * 1000:.1f} ms")
        plural = PLURALS[args.kind]
        small = [tfjob(f"small-{i}", NS, workers=1, chief_run=None, worker_run=None)
                 for i in range(args.small)]
        t0 = time.monotonic()
        creates = [api.create_ok(f"/apis/trainjobs.io/v1alpha1/namespaces/{NS}/{plural}", big)]
        creates += [api.create_ok(f"/apis/trainjobs.io/v1alpha1/namespaces/{NS}/tfjobs", job)
                    for job in small]
        await gather_bounded(32, creates)
        small_done = big_done = None
        while big_done is None or small_done is None:
            counts = await pods_per_job(api)
            now = time.monotonic() - t0
            if small_done is None and all(counts.get(f"small-{i}", 0) == 2
                                          for i in range(args.small)):
                small_done = now
            if big_done is None and counts.get("big", 0) == big_pods:
                big_done = now
            if now > args.timeout:
                raise RuntimeError(f"not all pods after {args.timeout}s: big "
                                   f"{counts.get('big', 0)}/{big_pods}")
            await asyncio.sleep(0.5)
        await asyncio.sleep(5)  # status writes and events settle
        after_lag, after_mem = await loop_lag(op), op.footprint()
        result = {
            "big_job": {"kind": args.kind, "pods": big_pods},
            "small_jobs": args.small,
            "seconds_to_all_small_pods": round(small_done, 2),
            "seconds_to_all_big_pods": round(big_done, 2),
            "loop_lag_max_ms": round(after_lag["max_s"] * 1000, 1),
            "loop_lag_busy_max_ms": round(after_lag["busy_max_s"] * 1000, 1),
            "loop_lag_samples": int(after_lag["count"] - before_lag["count"]),
            "loop_lag_samples_over_100ms": int(after_lag["over_100ms"]
                                               - before_lag["over_100ms"]),
            "rss_mb_before": round(before_mem["rss_mb"], 1),
            "rss_mb_after": round(after_mem["rss_mb"], 1),
            "rss_mb_delta": round(after_mem["rss_mb"] - before_mem["rss_mb"], 1),
            "rss_mb_peak": round(op.peak_hwm_kb / 1024, 1),
        }
        log(f"result: {result}")
        return result
    finally:
        await op.stop()
        await api.close()
        cluster.stop()


def validate_cpu() -> dict[str, list[float]]:
    """CPU seconds of parse_job and render_job per kind at 250..2,000 Workers."""
    from trainjobs.core.render import render_job
    from trainjobs.core.validation import parse_job
    from trainjobs.plugin.manager import load_plugins

    plugins = load_plugins()
    out: dict[str, list[float]] = {}
    for kind in ("MxJob", "TfJob", "Caffe2Job"):
        framework = plugins.framework_for(kind)
        assert framework is not None
        for workers in (250, 500, 1000, 2000):
            if kind == "Caffe2Job":
                doc = big_job("MxJob", workers)
                doc["kind"] = kind
                tmpl = doc["spec"]["replicaSpecs"]["Worker"]["template"]
                tmpl["spec"]["containers"][0]["name"] = "caffe2"
                doc["spec"] = {"replicaSpecs": {"Worker": {"replicas": workers,
                                                           "template": tmpl}},
                               "backend": {"type": "redis", "redisHost": "redis"}}
            else:
                doc = big_job(kind, workers)
            started = time.process_time()
            job = parse_job(doc, plugins)
            parsed = time.process_time() - started
            render_job(job, framework, plugins)
            rendered = time.process_time() - started - parsed
            out[f"{kind} {workers}"] = [round(parsed, 3), round(rendered, 3)]
            log(f"{kind} {workers} Workers: parse_job {parsed:.3f} s, render_job "
                f"{rendered:.3f} s (CPU)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = arguments("bigjob", __doc__)
    p.add_argument("--kind", choices=sorted(PLURALS), default="TfJob")
    p.add_argument("--workers", type=int, default=2000)
    p.add_argument("--small", type=int, default=100)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--node-pods", type=int, default=1000)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--operator-cmd", action="append", default=[],
                   help="the operator under test, a template as bench.fanout's (repeatable: "
                        "the phases alternate); --max-replicas-per-job is appended")
    p.add_argument("--label", action="append", default=[],
                   help="a name per --operator-cmd (default: ours, other1, ...)")
    p.add_argument("--repeats", type=int, default=1, help="runs per operator, alternated")
    p.add_argument("--validate", action="store_true",
                   help="only the CPU of validating and rendering, no cluster")
    args = p.parse_args(argv)
    if args.validate:
        write_result("validate-render-cpu", {"benchmark": "validate-render-cpu",
                                             "machine": machine(), "after": validate_cpu()},
                     args.out)
        return 0
    phases = operator_phases(args.operator_cmd, args.label)
    runs: list[dict[str, Any]] = []
    with workdir("bigjob") as root:
        for repeat in range(args.repeats):
            for label, command in phases:
                log(f"phase {label}, repeat {repeat + 1} of {args.repeats}")
                result = asyncio.run(run(args, root / f"{label}-{repeat}", command))
                runs.append({"label": label, "repeat": repeat} | result)
    for run_ in runs:
        log(f"{run_['label']:>10} #{run_['repeat'] + 1}: longest lag {run_['loop_lag_max_ms']} "
            f"ms (on the CPU {run_['loop_lag_busy_max_ms']} ms), "
            f"{run_['loop_lag_samples_over_100ms']} of {run_['loop_lag_samples']} over 100 ms, "
            f"all small pods {run_['seconds_to_all_small_pods']} s, all big pods "
            f"{run_['seconds_to_all_big_pods']} s, peak RSS {run_['rss_mb_peak']} MB")
    document: dict[str, Any] = {"benchmark": "bigjob", "machine": machine(),
                                "params": vars(args) | {"out": str(args.out)}}
    document |= {"result": runs[0]} if len(runs) == 1 else {"runs": runs}
    write_result(f"bigjob-{args.kind.lower()}", document, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
