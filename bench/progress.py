"""Progress benchmark (issue 37.8): N running jobs whose replicas report progress, against the
same operator with the same jobs not reporting (the baseline, taken in the same run).

One control plane (KWOK nodes), one operator pinned to one CPU (``taskset -c 1``; ``--cpu
none``: not pinned) serving progress on 127.0.0.1 over TLS (a CA and a certificate made
here), ``--progress-status-interval S``. N TfJobs of one Chief each, running until the end;
each Chief's pod gets a pod-bound token (the TokenRequest API, audience
trainjobs.io/progress), as the kubelet would mount it, and this process reports for it exactly
as ``trainjobs_progress`` does (the same JSON, a bearer token, one keep-alive connection pool).
This process is pinned to the other CPU.

Phases, each ``--phase-seconds`` long:

1. idle: every job Running, nobody reports: the operator's CPU and RSS, status writes;
2. steady: every job reports every ``--report-every`` seconds (spread evenly), its step one
   higher each time: reports accepted per second and refused; report-to-status latency (from
   a report's send until a watch on the jobs sees the job's status.progress.step reach that
   step; a report no status showed by the phase's end is counted apart, never as 0); status
   writes per job per minute (the watch's MODIFIED events) against the interval; the
   operator's CPU per accepted report above idle; RSS per job above idle;
3. saturation: ``--saturation-connections`` senders report as fast as they can, round-robin
   over the pods (within each pod's bucket of 5/s while N is large enough): the most reports
   per second the operator accepts on its CPU, and how busy that CPU was (below ~90 %, the
   sender was the limit, and the figure says so).

    python -m bench.progress                         # 1,000 jobs, 5 s apart, 60 s phases
    python -m bench.progress --jobs 5000 --report-every 5

Figures to stdout; everything measured to docs/benchmarks/progress.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import ssl
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import aiohttp

from bench.api import Api, gather_bounded
from bench.cluster import Cluster
from bench.jobs import JOB_LABEL, tfjob, tfjob_path
from bench.operator import DEFAULT_OPERATOR_CMD, OperatorProcess
from bench.report import (
    RESULTS_DIR,
    arguments,
    install_signal_handlers,
    log,
    machine,
    stats,
    workdir,
    write_result,
)
from trainjobs.core.progress_pod import AUDIENCE
from trainjobs.kube.resources import job_resource
from trainjobs.testing._pki import make_serving_cert
from trainjobs.testing._process import free_ports

NAMESPACE = "bench-progress"
TFJOBS = job_resource("TfJob", "tfjobs", "trainjobs.io", "v1alpha1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arguments("progress", __doc__)
    p.add_argument("--jobs", type=int, default=1000, help="reporting jobs (default 1000)")
    p.add_argument("--report-every", type=float, default=5.0,
                   help="seconds between two reports of one job in the steady phase")
    p.add_argument("--status-interval", type=float, default=30.0,
                   help="the operator's --progress-status-interval (default 30)")
    p.add_argument("--status-writes", type=float, default=20.0,
                   help="the operator's --progress-status-writes-per-second (default 20)")
    p.add_argument("--phase-seconds", type=float, default=60.0)
    p.add_argument("--saturation-connections", type=int, default=32)
    p.add_argument("--cpu", default="1", help="the CPU the operator is pinned to (taskset "
                                              "-c); 'none': not pinned")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--node-pods", type=int, default=1000)
    p.add_argument("--timeout", type=float, default=900.0, help="for the jobs to run")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--keep-workdir", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "progress.json")
    return p.parse_args(argv)


class Reporter:
    """Reports for every pod as its replica's `trainjobs_progress` would: one JSON report,
    a bearer token, over a pool of keep-alive TLS connections."""

    def __init__(self, url: str, ca: Path, pods: list[dict[str, Any]], connections: int) -> None:
        self.url, self.pods = url, pods
        context = ssl.create_default_context(cafile=str(ca))
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            limit=connections, ssl=context), timeout=aiohttp.ClientTimeout(total=30))
        self.steps = [0] * len(pods)
        self.answers: Counter[int] = Counter()
        self.sent: list[tuple[int, int, float]] = []  # (job index, step, monotonic send time)

    async def close(self) -> None:
        await self.session.close()

    async def report(self, i: int, record: bool = True) -> None:
        pod = self.pods[i]
        self.steps[i] += 1
        step = self.steps[i]
        body = {"version": 1, "job": pod["job"], "replica": {"name": pod["name"],
                                                            "type": "Chief", "index": 0},
                "attempt": 0, "session": "bench", "seq": step, "step": step,
                "total": 1_000_000, "metrics": {"loss": 1.0 / step}}
        sent = time.monotonic()
        try:
            async with self.session.post(self.url, data=json.dumps(body).encode(), headers={
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {pod['token']}"}) as resp:
                await resp.read()
                self.answers[resp.status] += 1
                if resp.status == 200 and record:
                    self.sent.append((i, step, sent))
        except (aiohttp.ClientError, TimeoutError):
            self.answers[0] += 1


class StatusWatch:
    """Every job's status.progress.step as a watch delivers it, with when it was seen."""

    def __init__(self, api: Api, names: dict[str, int]) -> None:
        self.api, self.names = api, names
        self.seen: dict[int, list[tuple[float, int]]] = defaultdict(list)
        self.modified = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self, resource_version: str) -> None:
        opened = asyncio.Event()
        self._task = asyncio.create_task(self._run(resource_version, opened.set))
        await asyncio.wait_for(opened.wait(), 30)

    async def _run(self, resource_version: str, on_open: Any) -> None:
        async for event in self.api.watch(TFJOBS, NAMESPACE, resource_version,
                                          on_open=on_open):
            if event.get("type") != "MODIFIED":
                continue
            obj = event["object"]
            index = self.names.get(obj["metadata"]["name"])
            if index is None:
                continue
            self.modified += 1
            step = ((obj.get("status") or {}).get("progress") or {}).get("step")
            if isinstance(step, int):
                self.seen[index].append((time.monotonic(), step))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def latencies(sent: list[tuple[int, int, float]], seen: dict[int, list[tuple[float, int]]],
              until: float) -> tuple[list[float], int]:
    """Seconds from each report's send until the job's status showed its step (or a later
    one), and how many reports no status showed before `until`."""
    out: list[float] = []
    missing = 0
    for i, step, at in sent:
        shown = next((t for t, s in seen.get(i, ()) if s >= step and t >= at), None)
        if shown is None or shown > until:
            missing += 1
        else:
            out.append(shown - at)
    return out, missing


def cdf(values: list[float], points: int = 200) -> list[tuple[float, float]]:
    """(value, fraction at or below it) at up to `points` evenly spaced ranks: enough to
    plot the distribution (bench.plot), small enough to keep in the results."""
    ordered = sorted(values)
    if not ordered:
        return []
    step = max(1, len(ordered) // points)
    marks = list(range(step - 1, len(ordered), step))
    if marks[-1] != len(ordered) - 1:
        marks.append(len(ordered) - 1)
    return [(round(ordered[i], 3), round((i + 1) / len(ordered), 4)) for i in marks]


async def create_jobs(api: Api, n: int) -> None:
    def job(i: int) -> dict[str, Any]:
        doc = tfjob(f"p-{i:05d}", NAMESPACE, workers=0, chief_run=None, worker_run=None)
        # A token is bound only to a pod of its own ServiceAccount (no admission plugin
        # sets it on the test control plane).
        doc["spec"]["replicaSpecs"]["Chief"]["template"]["spec"]["serviceAccountName"] = \
            "default"
        return doc

    await gather_bounded(16, (api.create_ok(tfjob_path(NAMESPACE), job(i)) for i in range(n)))


async def running_pods(api: Api, n: int, timeout: float) -> list[dict[str, Any]]:
    """The jobs' Chief pods once all n run, and every job's status says Running."""
    deadline = time.monotonic() + timeout
    while True:
        pods = [p for page, _ in [x async for x in api.list_pages(
            job_resource("Pod", "pods", "", "v1"), NAMESPACE, label_selector=JOB_LABEL)]
            for p in page if (p.get("status") or {}).get("phase") == "Running"]
        jobs = [j for page, _ in [x async for x in api.list_pages(TFJOBS, NAMESPACE)]
                for j in page if (j.get("status") or {}).get("state") == "Running"]
        log(f"{len(pods)}/{n} pods running, {len(jobs)}/{n} jobs Running")
        if len(pods) >= n and len(jobs) >= n:
            return pods
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(pods)} of {n} pods running after {timeout}s")
        await asyncio.sleep(5)


async def tokens(api: Api, pods: list[dict[str, Any]], namespace: str = NAMESPACE,
                 expiration: int = 3600) -> list[dict[str, Any]]:
    """Per pod (all of `namespace`): a pod-bound token of our audience, and the job it
    reports for."""
    async def one(pod: dict[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        owner = next(r for r in meta["ownerReferences"] if r.get("controller"))
        answer = await api.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"audiences": [AUDIENCE], "expirationSeconds": expiration,
                      "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                                         "name": meta["name"], "uid": meta["uid"]}}})
        return {"name": meta["name"], "token": answer["status"]["token"],
                "job": {"namespace": namespace, "name": owner["name"], "uid": owner["uid"]}}

    return list(await gather_bounded(16, (one(p) for p in pods)))


async def steady(reporter: Reporter, n: int, every: float, seconds: float) -> None:
    """Every job once per `every` seconds, the jobs spread evenly over it."""
    start = time.monotonic()
    tasks: set[asyncio.Task[None]] = set()
    for k in itertools.count():
        due = start + k * every / n
        if due - start >= seconds:
            break
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(reporter.report(k % n))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def saturate(reporter: Reporter, n: int, connections: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    order = itertools.count()

    async def sender() -> None:
        while time.monotonic() < end:
            await reporter.report(next(order) % n, record=False)

    await asyncio.gather(*(sender() for _ in range(connections)))


def operator_command(args: argparse.Namespace, port: int, cert: Any, ca: Any) -> str:
    pinned = "" if args.cpu == "none" else f"taskset -c {args.cpu} "
    return (pinned + DEFAULT_OPERATOR_CMD
            + f" --progress-listen 127.0.0.1:{port}"
            + f" --progress-url https://127.0.0.1:{port}/v1/progress"
            + f" --progress-tls-cert {cert.cert} --progress-tls-key {cert.key}"
            + f" --progress-ca-file {ca.cert} --progress-interval 1"
            + f" --progress-status-interval {args.status_interval:g}"
            + f" --progress-status-writes-per-second {args.status_writes:g}")


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    cluster = Cluster.start(root / "cluster", nodes=args.nodes, node_pods=args.node_pods,
                            audit=False)
    api = Api(cluster.plane)
    operator: OperatorProcess | None = None
    try:
        await api.ensure_namespace(NAMESPACE)
        ca = make_serving_cert(root / "ca", subject="/CN=bench-progress-ca")
        cert = make_serving_cert(root / "tls", subject="/CN=bench-progress",
                                 ca_cert=ca.cert, ca_key=ca.key)
        port = free_ports(1)[0]
        operator = OperatorProcess(operator_command(args, port, cert, ca),
                                   kubeconfig=cluster.plane.kubeconfig, namespace=NAMESPACE,
                                   concurrency=16, log_path=root / "operator.log")
        await operator.start()
        t0 = time.monotonic()
        await create_jobs(api, args.jobs)
        pods = await running_pods(api, args.jobs, args.timeout)
        log(f"{args.jobs} jobs running in {time.monotonic() - t0:.1f}s; minting tokens")
        reporters = await tokens(api, pods)
        names = {r["job"]["name"]: i for i, r in enumerate(reporters)}
        listed = [x async for x in api.list_pages(TFJOBS, NAMESPACE)]
        watch = StatusWatch(api, names)
        await watch.start(listed[-1][1])
        reporter = Reporter(f"https://127.0.0.1:{port}/v1/progress", ca.cert, reporters,
                            args.saturation_connections)
        try:
            out: dict[str, Any] = {}
            # 1. idle ------------------------------------------------------------------
            before = operator.footprint()
            await asyncio.sleep(args.phase_seconds)
            idle = operator.footprint()
            out["idle"] = {"operator_cpu_s": idle["cpu_s"] - before["cpu_s"],
                           "rss_mb": idle["rss_mb"], "status_writes": watch.modified}
            log(f"idle: operator CPU {out['idle']['operator_cpu_s']:.2f}s in "
                f"{args.phase_seconds:g}s, RSS {idle['rss_mb']:.0f} MB")
            # 2. steady ----------------------------------------------------------------
            modified0 = watch.modified
            start = time.monotonic()
            await steady(reporter, args.jobs, args.report_every, args.phase_seconds)
            sent_until = time.monotonic()
            # Reports of the last round may still be written: wait one round more (the
            # interval, or the budget's round over every job when that is longer).
            await asyncio.sleep(max(args.status_interval, args.jobs / args.status_writes) + 5)
            after = operator.footprint()
            lat, missing = latencies(reporter.sent, watch.seen, time.monotonic())
            accepted = reporter.answers[200]
            writes = watch.modified - modified0
            elapsed = time.monotonic() - start
            cpu = after["cpu_s"] - idle["cpu_s"]
            idle_rate = out["idle"]["operator_cpu_s"] / args.phase_seconds
            out["steady"] = {
                "seconds_reporting": sent_until - start, "seconds_measured": elapsed,
                "answers": dict(reporter.answers),
                "accepted_per_second": accepted / (sent_until - start),
                "latency_s": stats(lat), "latency_cdf": cdf(lat),
                "reports_not_shown": missing,
                "status_writes": writes,
                "status_writes_per_job_per_minute": writes / args.jobs / (elapsed / 60),
                "operator_cpu_s": cpu,
                "operator_cpu_ms_per_report_above_idle":
                    1000 * (cpu - idle_rate * elapsed) / accepted if accepted else None,
                "rss_mb": after["rss_mb"],
                "rss_kb_per_job_above_idle":
                    1024 * (after["rss_mb"] - idle["rss_mb"]) / args.jobs}
            s = out["steady"]
            log(f"steady: {s['accepted_per_second']:.0f} reports/s accepted "
                f"({dict(reporter.answers)}); latency p50 {s['latency_s'].get('p50', 0):.1f}s "
                f"p99 {s['latency_s'].get('p99', 0):.1f}s, {missing} not shown; "
                f"{s['status_writes_per_job_per_minute']:.2f} status writes/job/min; CPU "
                f"{s['operator_cpu_ms_per_report_above_idle']} ms/report above idle")
            # 3. saturation ------------------------------------------------------------
            reporter.answers.clear()
            before = operator.footprint()
            start = time.monotonic()
            await saturate(reporter, args.jobs, args.saturation_connections,
                           args.phase_seconds)
            elapsed = time.monotonic() - start
            after = operator.footprint()
            busy = (after["cpu_s"] - before["cpu_s"]) / elapsed
            out["saturation"] = {
                "seconds": elapsed, "answers": dict(reporter.answers),
                "accepted_per_second": reporter.answers[200] / elapsed,
                "operator_cpu_busy": busy,
                "limited_by": "operator" if busy >= 0.9 else "sender (the operator's CPU was "
                                                             "not saturated)"}
            log(f"saturation: {out['saturation']['accepted_per_second']:.0f} reports/s "
                f"accepted ({dict(reporter.answers)}), operator CPU {100 * busy:.0f}% busy")
            return out
        finally:
            await reporter.close()
            await watch.stop()
    finally:
        if operator is not None:
            await operator.stop()
        await api.close()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    if args.cpu != "none":
        # This process (the replicas' side) on the other CPU than the operator's.
        others = set(range(os.cpu_count() or 1)) - {int(args.cpu)}
        if others:
            os.sched_setaffinity(0, others)
    with workdir("progress", args.workdir, args.keep_workdir) as root:
        results = asyncio.run(run(args, root))
    write_result("progress", {"benchmark": "progress", "machine": machine(),
                              "params": {k: str(v) if isinstance(v, Path) else v
                                         for k, v in vars(args).items()},
                              "results": results}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
