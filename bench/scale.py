"""Scale benchmark: thousands of jobs present. Reaction latency, new-job latency against an
empty-cluster baseline measured in the same run, and the operator's footprint.

One control plane, one namespace, the operator watching it:

1. baseline: --probes new jobs, one every --probe-interval seconds, on an empty cluster; for
   each, the time from sending its create to the watcher seeing all its pods (--repeats times);
2. populate: jobs until --jobs exist (all but --running of them finish: KWOK ends their pods
   with exit code 0 after --finished-run); wait until every one is Succeeded or Running;
3. footprint: the operator's RSS now and its peak (VmHWM), CPU seconds, per 1,000 pods;
4. latency: --changes times, end the Chief of a running job (patch its pod's annotations so
   KWOK ends it with exit code 0 at once); from the watcher seeing the pod Succeeded to the
   watcher seeing the job Succeeded;
5. the same probes as in 1, now with every job present;
   (before 1, 4 and 5 the bench waits until the machine is quiet, --quiet-cpu, so that the
   full cluster is compared with the empty one, not with its own backlog);
6. restart the operator: time to ready (LIST of everything), its peak RSS while re-syncing,
   and the writes it makes (none expected: nothing changed).

Steps 4-6 are one round, repeated --repeats times over the one population (populating takes
most of the run's time); each round ends other running jobs and pairs its probes with the
baseline of the same number. Every finished pod stays (--pod-gc-threshold), so the operator's
caches hold every job's pods throughout.

    python -m bench.scale                                  # 5,000 jobs / 20,000 pods
    python -m bench.scale --jobs 1000 --changes 50 --probes 30  # a quick look

Figures go to stdout; everything measured to docs/benchmarks/scale.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.api import BENCH_UA, CEILING_UA, Api, gather_bounded
from bench.cluster import Cluster
from bench.cpu import cpu_diff, cpu_snapshot
from bench.fanout import _path, _start_pyspy, _stop_pyspy
from bench.heapprobe import ENV
from bench.jobs import rendered_objects, tfjob, tfjob_path
from bench.operator import DEFAULT_OPERATOR_CMD, OperatorProcess
from bench.report import (
    RESULTS_DIR,
    arguments,
    install_signal_handlers,
    log,
    machine,
    stats,
    write_result,
)
from bench.watcher import JobTrack, PodTrack, Watcher
from bench.writes import attribute, audit_writes, counter_diff, write_counters
from trainjobs.testing import EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arguments("scale", __doc__)
    p.add_argument("--jobs", type=int, default=5000, help="jobs present (default 5000)")
    p.add_argument("--workers", type=int, default=3, help="Workers per job besides the Chief")
    p.add_argument("--running", type=int, default=None,
                   help="jobs among them that keep running (the latency changes end them; "
                        "default: changes x repeats + 50)")
    p.add_argument("--repeats", type=int, default=3,
                   help="measurement rounds over the one population (default 3)")
    p.add_argument("--changes", type=int, default=200, help="pod changes for the latency")
    p.add_argument("--change-interval", type=float, default=0.25)
    p.add_argument("--probes", type=int, default=100, help="new jobs per new-job measurement")
    p.add_argument("--probe-interval", type=float, default=0.5)
    p.add_argument("--finished-run", default="1s", help="run time of the finishing jobs' pods")
    p.add_argument("--concurrency", type=int, default=16,
                   help="operator --concurrency and the bench's creates in flight")
    p.add_argument("--node-pods", type=int, default=1000)
    p.add_argument("--pod-gc-threshold", type=int, default=None,
                   help="kube-controller-manager --terminated-pod-gc-threshold (default: twice "
                        "the pods the run creates, so that every finished pod stays; 0: the "
                        "controller manager's own default, 12,500)")
    p.add_argument("--operator-cmd", default=DEFAULT_OPERATOR_CMD,
                   help="operator command template ({python} {kubeconfig} {port} {namespace} "
                        "{concurrency})")
    p.add_argument("--ready-path", default="/readyz", help="'none': wait 5 s instead")
    p.add_argument("--resync-wait", type=float, default=10.0)
    p.add_argument("--quiet-cpu", type=float, default=0.3,
                   help="before measuring with every job present, wait until the machine uses "
                        "less than this many CPUs (10 s windows): the control plane's backlog "
                        "from the population has drained (default 0.3)")
    p.add_argument("--quiet-timeout", type=float, default=900.0,
                   help="measure anyway after this many seconds, recording that it was busy")
    p.add_argument("--no-audit", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="py-spy record the operator while populating and during the latency "
                        "phase")
    p.add_argument("--heap-probe", action="store_true",
                   help="run the operator under bench.heapprobe and break its memory down "
                        "when empty and when populated (the default operator command only)")
    p.add_argument("--timeout", type=float, default=3600.0, help="per phase")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--keep-workdir", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "scale.json")
    return p.parse_args(argv)


class Bench:
    def __init__(self, args: argparse.Namespace, cluster: Cluster, api: Api, watcher: Watcher,
                 op: OperatorProcess, ns: str, ceiling_ns: str, owner: dict[str, Any]) -> None:
        self.args = args
        self.cluster = cluster
        self.api = api
        self.watcher = watcher
        self.op = op
        self.ns = ns
        self.ceiling_ns = ceiling_ns
        self.owner = owner  # what the ceiling's objects are owned by
        self.replicas = 1 + args.workers
        self.c = watcher.counts[ns]

    def job(self, name: str, *, running: bool) -> dict[str, Any]:
        run = None if running else self.args.finished_run
        return tfjob(name, self.ns, workers=self.args.workers, chief_run=run, worker_run=run)

    async def probes(self, prefix: str) -> dict[str, Any]:
        """New jobs, one every probe-interval: create sent -> all pods seen. Interleaved, half
        an interval later each time: the ceiling, the same pods and Services created directly
        by the bench (all in flight at once, as the operator creates one job's objects)."""
        sent: dict[str, float] = {}
        csent: dict[str, float] = {}
        ceiling_api = Api(self.cluster.plane, CEILING_UA, pool=16)

        async def one(i: int) -> None:
            name = f"{prefix}-{i:04d}"
            await asyncio.sleep(i * self.args.probe_interval)
            sent[name] = time.perf_counter()
            await self.api.create_ok(tfjob_path(self.ns), self.job(name, running=False))

        async def ceiling(i: int) -> None:
            name = f"{prefix}-c{i:04d}"
            objs = rendered_objects(tfjob(name, self.ceiling_ns, workers=self.args.workers,
                                          chief_run=None, worker_run=None), self.owner)
            await asyncio.sleep((i + 0.5) * self.args.probe_interval)
            csent[name] = time.perf_counter()
            await asyncio.gather(*(ceiling_api.create_ok(_path(self.ceiling_ns, o), o)
                                   for o in objs))

        try:
            await asyncio.gather(*(one(i) for i in range(self.args.probes)),
                                 *(ceiling(i) for i in range(self.args.probes)))
        finally:
            await ceiling_api.close()
        full = self.watcher.job_pods_full
        await self.watcher.wait(lambda: all((self.ns, n) in full for n in sent) and all(
            (self.ceiling_ns, n) in full for n in csent), f"{prefix}: all pods",
            self.args.timeout)
        lat = [full[(self.ns, n)] - t for n, t in sent.items()]
        clat = [full[(self.ceiling_ns, n)] - t for n, t in csent.items()]
        s, cs = stats(lat), stats(clat)
        log(f"{prefix}: create -> all {self.replicas} pods seen: p50 {s['p50'] * 1000:.0f} ms, "
            f"p99 {s['p99'] * 1000:.0f} ms (n={s['n']}); ceiling p50 {cs['p50'] * 1000:.0f} "
            f"ms, p99 {cs['p99'] * 1000:.0f} ms")
        # Let them finish, so they count among the finished jobs.
        await self.watcher.wait(
            lambda: all("Succeeded" in self.watcher.jobs[(self.ns, n)].states for n in sent
                        if (self.ns, n) in self.watcher.jobs),
            f"{prefix}: finished", self.args.timeout)
        return {"seconds": s, "values": sorted(lat), "ceiling_seconds": cs,
                "ceiling_values": sorted(clat)}

    async def populate(self, names: list[str], running: set[str]) -> dict[str, Any]:
        n = len(names)
        before = await write_counters(self.api)
        audit0 = self.cluster.audit_offset()
        cpu0 = cpu_snapshot(self.cluster.plane, self.op)
        log(f"populate: creating {n} jobs ({len(running)} keep running)")
        t0 = time.perf_counter()
        await gather_bounded(self.args.concurrency, (
            self.api.create_ok(tfjob_path(self.ns), self.job(x, running=x in running))
            for x in names))
        t_created = time.perf_counter() - t0
        log(f"populate: {n} jobs created in {t_created:.0f}s; waiting for them to settle")
        want_done = n - len(running)
        jobs_in = self.c.jobs_in

        def settled() -> bool:
            done = sum(1 for x in names if "Succeeded" in
                       (self.watcher.jobs.get((self.ns, x)) or JobTrack(0)).states)
            return done >= want_done and all(
                "Running" in (self.watcher.jobs.get((self.ns, x)) or JobTrack(0)).states
                for x in running)

        last_log = [0.0]

        def progress() -> bool:
            now = time.perf_counter()
            if now - last_log[0] > 30:
                last_log[0] = now
                fp = self.op.footprint()
                log(f"populate: {now - t0:.0f}s: pods {self.c.pods}, services "
                    f"{self.c.services}, jobs Succeeded {jobs_in['Succeeded']}, Running "
                    f"{jobs_in['Running']}; operator rss {fp['rss_mb']:.0f} MB "
                    f"cpu {fp['cpu_s']:.0f}s")
            return jobs_in["Succeeded"] >= want_done and settled()

        await self.watcher.wait(progress, "population settled", self.args.timeout)
        t_settled = time.perf_counter() - t0
        after = await write_counters(self.api)
        diff = counter_diff(after, before)
        res = {
            "jobs": n, "running": len(running), "create_seconds": t_created,
            "settled_seconds": t_settled, "cpu": cpu_diff(cpu_snapshot(self.cluster.plane,
                                                                       self.op), cpu0),
            "apiserver_writes": diff, "operator_writes": attribute(diff, "tfjobs"),
            "audit_writes": {k: dict(v) for k, v in
                             audit_writes(self.cluster.audit_since(audit0), self.ns).items()},
        }
        log(f"populate: settled after {t_settled:.0f}s")
        return res

    async def quiesce(self, label: str) -> dict[str, Any]:
        """Wait until the machine is quiet (see --quiet-cpu), so that the figures measured with
        every job present are not those of a control plane still catching up with the
        population (its controllers work through 20,000 pods' changes for minutes after the
        last job settled). Records how long that took and who was busy meanwhile."""
        window = 10.0
        t0 = time.perf_counter()
        first = cpu_snapshot(self.cluster.plane, self.op)
        before = first
        while True:
            await asyncio.sleep(window)
            now = cpu_snapshot(self.cluster.plane, self.op)
            busy = (now["machine_busy"] - before["machine_busy"]) / window
            waited = time.perf_counter() - t0
            if busy < self.args.quiet_cpu or waited >= self.args.quiet_timeout:
                break
            log(f"{label}: machine busy {busy:.2f} CPUs, waiting for < "
                f"{self.args.quiet_cpu:.2f} ({waited:.0f}s)")
            before = now
        res = {"seconds": waited, "busy_cpus_last_window": busy,
               "quiet": busy < self.args.quiet_cpu, "cpu": cpu_diff(now, first)}
        log(f"{label}: {'quiet' if res['quiet'] else 'still busy'} after {waited:.0f}s "
            f"({busy:.2f} CPUs busy)")
        return res

    async def make_reaction_pods(self, count: int) -> list[str]:
        """Pods for the reaction ceiling: the ceiling's copy of a running Chief each."""
        names = []
        objs = []
        for i in range(count):
            job = tfjob(f"lat-{i:04d}", self.ceiling_ns, workers=0, chief_run=None,
                        worker_run=None)
            pod = next(o for o in rendered_objects(job, self.owner) if o["kind"] == "Pod")
            names.append(pod["metadata"]["name"])
            objs.append(pod)
        await gather_bounded(self.args.concurrency, (
            self.api.create_ok(_path(self.ceiling_ns, o), o) for o in objs))
        await self.watcher.wait(lambda: all(
            (p := self.watcher.pods.get((self.ceiling_ns, n))) is not None
            and p.running is not None for n in names), "reaction pods running",
            self.args.timeout)
        return names

    async def latency(self, jobs: list[str], reaction_pods: list[str]) -> dict[str, Any]:
        """End running jobs' Chiefs; pod Succeeded seen -> job Succeeded seen. Interleaved:
        end a reaction pod; pod Succeeded seen -> the reactor's ConfigMap seen."""
        pod_t: dict[str, float] = {}
        job_t: dict[str, float] = {}
        cpod_t: dict[str, float] = {}
        for name in reaction_pods:
            def on_cpod(track: PodTrack, phase: str, name: str = name) -> None:
                if phase in ("Succeeded", "Failed") and name not in cpod_t:
                    cpod_t[name] = time.perf_counter()

            self.watcher.pod_hooks[(self.ceiling_ns, name)] = on_cpod
        for name in jobs:
            def on_pod(track: PodTrack, phase: str, name: str = name) -> None:
                if phase in ("Succeeded", "Failed") and name not in pod_t:
                    pod_t[name] = time.perf_counter()

            def on_job(track: JobTrack, state: str, now: float, name: str = name) -> None:
                if state in ("Succeeded", "Failed") and name not in job_t:
                    job_t[name] = now

            self.watcher.pod_hooks[(self.ns, f"{name}-chief-0")] = on_pod
            self.watcher.job_hooks[(self.ns, name)] = on_job
        cpu0 = cpu_snapshot(self.cluster.plane, self.op)
        t0 = time.perf_counter()
        end = {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0",
                                            RUN_DURATION_ANNOTATION: "1ms"}}}

        async def one(i: int, name: str) -> None:
            await asyncio.sleep(i * self.args.change_interval)
            await self.api.merge_patch(
                f"/api/v1/namespaces/{self.ns}/pods/{name}-chief-0", end)

        async def ceiling(i: int, pod: str) -> None:
            await asyncio.sleep((i + 0.5) * self.args.change_interval)
            await self.api.merge_patch(f"/api/v1/namespaces/{self.ceiling_ns}/pods/{pod}", end)

        cms = self.watcher.configmaps
        await asyncio.gather(*(one(i, n) for i, n in enumerate(jobs)),
                             *(ceiling(i, p) for i, p in enumerate(reaction_pods)))
        await self.watcher.wait(
            lambda: all(n in job_t for n in jobs) and all(
                (self.ceiling_ns, f"react-{p}") in cms for p in reaction_pods),
            "latency: jobs ended", self.args.timeout)
        cpu = cpu_diff(cpu_snapshot(self.cluster.plane, self.op), cpu0)
        lat = [job_t[n] - pod_t[n] for n in jobs if n in pod_t]
        clat = [cms[(self.ceiling_ns, f"react-{p}")] - cpod_t[p] for p in reaction_pods
                if p in cpod_t]
        s, cs = stats(lat), stats(clat)
        log(f"latency: pod Succeeded -> job Succeeded: p50 {s['p50'] * 1000:.0f} ms, p99 "
            f"{s['p99'] * 1000:.0f} ms, max {s['max'] * 1000:.0f} ms (n={s['n']}); ceiling "
            f"(pod ended -> ConfigMap): p50 {cs['p50'] * 1000:.0f} ms, p99 "
            f"{cs['p99'] * 1000:.0f} ms; over {time.perf_counter() - t0:.0f}s")
        return {"seconds": s, "values": sorted(lat), "ceiling_seconds": cs,
                "ceiling_values": sorted(clat), "cpu": cpu}

    async def restart(self) -> dict[str, Any]:
        """Restart the operator with everything steady: time to ready (the LIST of
        everything), its peak RSS then, and the writes it makes (none expected)."""
        op, api, cluster = self.op, self.api, self.cluster
        await op.stop()
        before = await write_counters(api)
        audit0 = cluster.audit_offset()
        t_ready = await op.start(timeout=self.args.timeout)
        hwm_ready = op.footprint()
        await asyncio.sleep(self.args.resync_wait)
        after = await write_counters(api)
        diff = counter_diff(after, before)
        attributed = attribute(diff, "tfjobs")
        audit = audit_writes(cluster.audit_since(audit0), self.ns)
        res = {
            "ready_seconds": t_ready, "footprint_at_ready": hwm_ready,
            "footprint_after": op.footprint(), "apiserver_writes": diff,
            "operator_writes": attributed,
            "operator_writes_total": sum(attributed.values()),
            "audit_writes": {k: dict(v) for k, v in audit.items()},
            "audit_operator_writes": sum(audit.get("operator", {}).values()),
        }
        log(f"resync: ready in {t_ready:.1f}s, peak rss {hwm_ready['hwm_mb']:.0f} MB; "
            f"operator writes in {self.args.resync_wait:.0f}s (audit log): "
            f"{res['audit_operator_writes']}; writes to pods, Services, job status and Events "
            f"by anyone: {res['operator_writes_total']}")
        return res

    def start_reactor(self) -> subprocess.Popen[bytes]:
        """The bare reactor (bench._reactor), the latency's ceiling; returns once it watches."""
        plane = self.cluster.plane
        reactor = subprocess.Popen(
            [sys.executable, "-m", "bench._reactor", plane.server, str(plane.pki.ca_cert),
             str(plane.pki.admin_cert), str(plane.pki.admin_key), self.ceiling_ns],
            stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
        assert reactor.stdout is not None
        reactor.stdout.readline()  # "ready"
        return reactor


def probe_ratios(empty: dict[str, float], full: dict[str, float], ceiling_empty: dict[str, float],
                 ceiling_full: dict[str, float]) -> dict[str, float]:
    """New-job latency with every job present over the empty cluster's, ours and the bare
    client's, at p50 and p99."""
    out = {}
    for who, e, f in (("", empty, full), ("ceiling_", ceiling_empty, ceiling_full)):
        for q in ("p50", "p99"):
            out[f"{who}probes_{q}_ratio"] = f[q] / e[q]
    return out


def spread(values: list[float]) -> dict[str, float]:
    """min/median/max over the rounds."""
    s = stats(values)
    return {k: s[k] for k in ("n", "min", "median", "max")} if values else {"n": 0}


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each per-round figure as min/median/max over the rounds."""
    done = [r for r in rounds if "resync" in r]
    pick: dict[str, Callable[[dict[str, Any]], float]] = {
        "latency_p50": lambda r: r["latency"]["seconds"]["p50"],
        "latency_p99": lambda r: r["latency"]["seconds"]["p99"],
        "reactor_p99": lambda r: r["latency"]["ceiling_seconds"]["p99"],
        "probes_empty_p99": lambda r: r["probes_empty"]["seconds"]["p99"],
        "probes_full_p99": lambda r: r["probes_full"]["seconds"]["p99"],
        "probes_p99_ratio": lambda r: r["probes_p99_ratio"],
        "probes_p50_ratio": lambda r: r["probes_p50_ratio"],
        "ceiling_probes_p99_ratio": lambda r: r["ceiling_probes_p99_ratio"],
        "ceiling_probes_p50_ratio": lambda r: r["ceiling_probes_p50_ratio"],
        "restart_ready_seconds": lambda r: r["resync"]["ready_seconds"],
        "restart_hwm_mb": lambda r: r["resync"]["footprint_at_ready"]["hwm_mb"],
        "restart_operator_writes": lambda r: r["resync"]["audit_operator_writes"],
    }
    out: dict[str, Any] = {k: spread([f(r) for r in done]) for k, f in pick.items()}

    def pool(phase: str, key: str) -> dict[str, float]:
        return stats([v for r in done for v in r[phase][key]])

    # Every round's samples together: a p99 of 300 probes says more than one of 100.
    pooled: dict[str, Any] = {
        "latency": pool("latency", "values"),
        "reactor": pool("latency", "ceiling_values"),
        "probes_empty": pool("probes_empty", "values"),
        "probes_full": pool("probes_full", "values"),
        "ceiling_probes_empty": pool("probes_empty", "ceiling_values"),
        "ceiling_probes_full": pool("probes_full", "ceiling_values")}
    if done:
        pooled.update(probe_ratios(pooled["probes_empty"], pooled["probes_full"],
                                   pooled["ceiling_probes_empty"],
                                   pooled["ceiling_probes_full"]))
    out["pooled"] = pooled
    return out


async def main_async(args: argparse.Namespace) -> int:
    root = args.workdir or Path(tempfile.mkdtemp(prefix="trainjobs-bench-scale-"))
    replicas = 1 + args.workers
    running_jobs = args.running if args.running is not None else \
        args.changes * args.repeats + 50
    if running_jobs < args.changes * args.repeats:
        raise SystemExit(f"--running {running_jobs} is less than --changes x --repeats "
                         f"({args.changes * args.repeats}): each change ends a running job")
    if args.jobs <= args.probes * args.repeats + running_jobs:
        raise SystemExit(f"--jobs {args.jobs} leaves no finished jobs besides the "
                         f"{args.probes * args.repeats} probes and {running_jobs} running jobs")
    # jobs present, plus the full cluster's probes, plus the reactor's pods
    total_pods = (args.jobs + args.probes * args.repeats) * replicas + \
        args.changes * args.repeats
    nodes = math.ceil(total_pods * 1.05 / args.node_pods) + 1
    gc_threshold = args.pod_gc_threshold if args.pod_gc_threshold is not None \
        else 2 * total_pods
    ns = "bench-scale"
    ceiling_ns = "bench-ceiling"
    result: dict[str, Any] = {"benchmark": "scale", "machine": machine(),
                              "params": {k: (str(v) if isinstance(v, Path) else v)
                                         for k, v in vars(args).items()},
                              "nodes": nodes}
    ok = False
    cluster = Cluster.start(
        root / "cluster", nodes=nodes, node_pods=args.node_pods, audit=not args.no_audit,
        controller_manager_args=[f"--terminated-pod-gc-threshold={gc_threshold}"]
        if gc_threshold else [])
    api = Api(cluster.plane, BENCH_UA, pool=max(args.concurrency, 8))
    watcher = Watcher(api, [ns, ceiling_ns], keep_series=False,
                      configmap_namespaces=[ceiling_ns])
    watcher.pods_per_job = replicas
    operator_cmd = args.operator_cmd
    if args.heap_probe:
        operator_cmd = heap_probed(operator_cmd, root / "heap")
    op = OperatorProcess(operator_cmd, kubeconfig=cluster.plane.kubeconfig, namespace=ns,
                         concurrency=args.concurrency, log_path=root / "operator.log",
                         ready_path=None if args.ready_path == "none" else args.ready_path)
    pyspy = None
    reactor: subprocess.Popen[bytes] | None = None
    try:
        await api.ensure_namespace(ns)
        await api.ensure_namespace(ceiling_ns)
        cm = await api.create(f"/api/v1/namespaces/{ceiling_ns}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench-owner"}})
        owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "bench-owner",
                 "uid": cm["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        watcher.start()
        await watcher.synced.wait()
        result["operator_ready_seconds"] = await op.start()
        result["footprint_empty"] = op.footprint()
        if args.heap_probe:
            result["heap_empty"] = await heap(op, root / "heap", 1)
        bench = Bench(args, cluster, api, watcher, op, ns, ceiling_ns, owner)
        rounds: list[dict[str, Any]] = [{} for _ in range(args.repeats)]
        result["rounds"] = rounds

        for k, rnd in enumerate(rounds):
            rnd["quiesce_before_empty"] = await bench.quiesce("quiesce")
            rnd["probes_empty"] = await bench.probes(f"probe-empty-r{k}")
        write_result("scale", result, args.out)
        reaction_pods = await bench.make_reaction_pods(args.changes * args.repeats)

        n_pop = args.jobs - args.probes * args.repeats
        names = [f"job-{i:05d}" for i in range(n_pop)]
        # Spread the running jobs over the creation order.
        step = max(1, n_pop // max(1, running_jobs))
        running = [names[i] for i in range(0, n_pop, step)][:running_jobs]
        if args.profile:
            pyspy = _start_pyspy(op.pid, root / "profile-populate")
        result["populate"] = await bench.populate(names, set(running))
        if pyspy is not None:
            result["populate"]["profile"] = _stop_pyspy(pyspy)
            pyspy = None
        await asyncio.sleep(10)
        fp = op.footprint()
        result["footprint_full"] = {
            **fp, "jobs": watcher.counts[ns].jobs, "pods": watcher.counts[ns].pods,
            "services": watcher.counts[ns].services,
            "rss_mb_per_1000_pods": fp["rss_mb"] / (watcher.counts[ns].pods / 1000),
            "hwm_mb_per_1000_pods": fp["hwm_mb"] / (watcher.counts[ns].pods / 1000),
            "rss_growth_mb_per_1000_pods": (fp["rss_mb"] - result["footprint_empty"]["rss_mb"])
            / (watcher.counts[ns].pods / 1000),
        }
        log(f"footprint: {watcher.counts[ns].jobs} jobs, {watcher.counts[ns].pods} pods, "
            f"{watcher.counts[ns].services} Services: rss {fp['rss_mb']:.0f} MB, peak "
            f"{fp['hwm_mb']:.0f} MB, cpu {fp['cpu_s']:.0f}s")
        if args.heap_probe:
            result["heap_full"] = await heap(op, root / "heap", 2)
        write_result("scale", result, args.out)

        for k, rnd in enumerate(rounds):
            log(f"round {k + 1} of {args.repeats}")
            rnd["quiesce_before_latency"] = await bench.quiesce("quiesce")
            if args.profile and k == 0:
                pyspy = _start_pyspy(op.pid, root / "profile-latency")
            reactor = await asyncio.to_thread(bench.start_reactor)
            chunk = slice(k * args.changes, (k + 1) * args.changes)
            rnd["latency"] = await bench.latency(running[chunk], reaction_pods[chunk])
            reactor.terminate()
            reactor.wait(10)
            reactor = None
            if pyspy is not None:
                rnd["latency"]["profile"] = _stop_pyspy(pyspy)
                pyspy = None
            write_result("scale", result, args.out)

            await asyncio.sleep(10)  # the operator's clean-up after the latency phase
            rnd["quiesce_before_probes"] = await bench.quiesce("quiesce")
            rnd["probes_full"] = await bench.probes(f"probe-full-r{k}")
            rnd.update(probe_ratios(
                rnd["probes_empty"]["seconds"], rnd["probes_full"]["seconds"],
                rnd["probes_empty"]["ceiling_seconds"], rnd["probes_full"]["ceiling_seconds"]))
            write_result("scale", result, args.out)

            await asyncio.sleep(5)
            rnd["footprint_before_restart"] = op.footprint()
            rnd["gc_pauses_before_restart"] = await op.gc_pauses()
            if k == 0:
                result["operator_series"] = [
                    (round(t, 1), round(rss / 1024, 1), round(cpu, 2))
                    for t, rss, cpu in op.samples]
            op.samples = []
            rnd["resync"] = await bench.restart()
            result["summary"] = summarise(rounds)
            write_result("scale", result, args.out)
        result["watcher_events"] = watcher.events
        write_result("scale", result, args.out)
        ok = True
    finally:
        if reactor is not None:
            reactor.kill()
            reactor.wait()
        if pyspy is not None:
            _stop_pyspy(pyspy)
        await op.stop()
        op.kill_now()
        await watcher.stop()
        await api.close()
        cluster.stop()
        if ok and not args.keep_workdir and args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
        elif not ok:
            log(f"logs kept in {root}")
    print_summary(result)
    return 0


def print_summary(r: dict[str, Any]) -> None:
    def ms(s: dict[str, float]) -> str:
        return (f"p50 {s['p50'] * 1000:.0f} ms  p90 {s['p90'] * 1000:.0f} ms  "
                f"p99 {s['p99'] * 1000:.0f} ms  max {s['max'] * 1000:.0f} ms  (n={s['n']})")

    def mmm(s: dict[str, float], scale: float = 1.0, fmt: str = ".0f") -> str:
        if not s.get("n"):
            return "-"
        return (f"{s['median'] * scale:{fmt}} ({s['min'] * scale:{fmt}}-"
                f"{s['max'] * scale:{fmt}}, n={s['n']})")

    f = r.get("footprint_full")
    if f is None:
        print("\nscale: the run ended before the population settled")
        return
    print(f"\nscale: {f['jobs']} jobs, {f['pods']} pods, {f['services']} Services present")
    print(f"  populate: created in {r['populate']['create_seconds']:.0f}s, settled in "
          f"{r['populate']['settled_seconds']:.0f}s")
    print(f"  operator RSS {f['rss_mb']:.0f} MB (peak {f['hwm_mb']:.0f} MB; target <= 300 MB): "
          f"{f['rss_mb_per_1000_pods']:.1f} MB per 1,000 pods "
          f"({f['rss_growth_mb_per_1000_pods']:.1f} MB above the empty operator); "
          f"CPU {f['cpu_s']:.0f}s")
    for k, rnd in enumerate(r["rounds"]):
        if "resync" not in rnd:
            continue
        rs = rnd["resync"]
        print(f"  round {k + 1}:")
        print(f"    pod end -> job status:          {ms(rnd['latency']['seconds'])}")
        print(f"      ceiling (bare reactor):       {ms(rnd['latency']['ceiling_seconds'])}")
        print(f"    new job -> all pods, empty:     {ms(rnd['probes_empty']['seconds'])}")
        print(f"      ceiling (bench creates them): "
              f"{ms(rnd['probes_empty']['ceiling_seconds'])}")
        print(f"    new job -> all pods, full:      {ms(rnd['probes_full']['seconds'])}")
        print(f"      ceiling (bench creates them): {ms(rnd['probes_full']['ceiling_seconds'])}")
        print(f"    full / empty p99:               {rnd['probes_p99_ratio']:.2f} "
              f"(ceiling: {rnd['ceiling_probes_p99_ratio']:.2f})")
        g2 = rnd.get("gc_pauses_before_restart", {}).get("2")
        if g2:
            over = g2["count"] - g2["buckets"].get("0.1", g2["count"])
            print(f"    operator's full GCs before the restart: {g2['count']:.0f}, "
                  f"{g2['sum_seconds']:.2f}s in all, {over:.0f} longer than 100 ms")
        print(f"    restart: ready in {rs['ready_seconds']:.1f}s, peak RSS "
              f"{rs['footprint_at_ready']['hwm_mb']:.0f} MB, operator writes while "
              f"re-syncing {rs['audit_operator_writes']} (audit log); writes to the resources "
              f"it writes, by anyone: {rs['operator_writes_total']}")
    sm = r.get("summary")
    if sm:
        print("  median (min-max) over the rounds:")
        print(f"    pod end -> job status p99 (target <= 250 ms): "
              f"{mmm(sm['latency_p99'], 1000)} ms; p50 {mmm(sm['latency_p50'], 1000)} ms")
        print(f"    new job full / empty p99 (target <= 1.10):    "
              f"{mmm(sm['probes_p99_ratio'], 1, '.2f')}; ceiling "
              f"{mmm(sm['ceiling_probes_p99_ratio'], 1, '.2f')}")
        pl = sm["pooled"]
        print(f"  all rounds' samples together: pod end -> job status {ms(pl['latency'])}")
        print(f"    new job full / empty p99 {pl['probes_p99_ratio']:.2f}, p50 "
              f"{pl['probes_p50_ratio']:.2f}; ceiling p99 {pl['ceiling_probes_p99_ratio']:.2f},"
              f" p50 {pl['ceiling_probes_p50_ratio']:.2f}")
        print(f"    restart ready: {mmm(sm['restart_ready_seconds'], 1, '.1f')} s; peak RSS "
              f"{mmm(sm['restart_hwm_mb'])} MB; operator writes "
              f"{mmm(sm['restart_operator_writes'])} (target 0)")


def heap_probed(command: str, out: Path) -> str:
    """The default operator command, run under bench.heapprobe (writing to `out`-N.json)."""
    prefix = "{python} -m trainjobs.cli "
    if not command.startswith(prefix):
        raise SystemExit(f"--heap-probe needs an operator command starting {prefix!r}")
    return f"env {ENV}={out} {{python}} -m bench.heapprobe " + command[len(prefix):]


async def heap(op: OperatorProcess, out: Path, n: int) -> dict[str, Any]:
    """Ask the operator for its n-th memory breakdown (bench.heapprobe) and log its lines."""
    path = Path(f"{out}-{n}.json")
    os.kill(op.pid, signal.SIGUSR1)
    for _ in range(600):
        if path.exists():
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError(f"the operator wrote no heap probe {path} in 60 s")
    found: dict[str, Any] = json.loads(path.read_text())
    if "error" in found:
        raise RuntimeError(f"the operator's heap probe failed: {found['error']}")
    glibc = found["glibc"] or {}
    log(f"heap: rss {found['rss_mb']:.1f} MB; pymalloc in use "
        f"{found['pymalloc']['in_use_mb']:.1f} MB of {found['pymalloc']['arenas']} arenas; "
        f"glibc in use {glibc.get('in_use_mb', float('nan')):.1f} MB, free "
        f"{glibc.get('free_mb', float('nan')):.1f} MB; {found['tls_connections']} TLS "
        f"connections ({found['tls_read_buffers_mb']:.1f} MB of read buffers)")
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
