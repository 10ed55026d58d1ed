"""Fan-out benchmark: many jobs at once, against a raw-client ceiling measured in the same run.

Each repeat starts its own control plane (KWOK nodes with a large pod capacity), then runs, in
alternating order, two phases in separate namespaces:

* ceiling: a bare aiohttp client creates the very pods and Services the operator would create
  (rendered by the same code, relabelled so no operator informer selects them), at the same
  concurrency as the operator's --concurrency;
* operator (one phase per --operator-cmd): the bench creates the jobs; an independent watcher
  in this process records when every pod and Service exists, when every pod runs, when every
  job reports Running and then Succeeded (pods are annotated so KWOK ends them with exit code
  0 after --run-duration). The API server's own write counters (apiserver_request_total) are
  read before and after; the audit log attributes each write to a component by user agent.
  Then the operator is restarted with every job finished, and the writes made while it
  re-syncs are counted (there should be none).

    python -m bench.fanout                       # 500 TfJobs x 4 replicas, 3 repeats
    python -m bench.fanout --jobs 100 --repeats 1
    python -m bench.fanout --operator-cmd "{python} -m trainjobs.cli operator ..." \\
        --operator-cmd "/path/to/other-operator --kubeconfig {kubeconfig}"
    python -m bench.fanout --training-operator   # Kubeflow's as the baseline (below)

--training-operator: the jobs are kubeflow.org/v1 TFJobs (the same Chief + Workers), and the
phases are ours with the kubeflow plugin (default, and tuned: --concurrency 64) and Kubeflow's
training-operator v1.9.4 (bench.training_operator; default flags, and tuned: 16 controller
threads, 500 requests/s, burst 1000), one operator at a time, each phase installing its own
kubeflow.org CRDs first (ours: charts/trainjobs/kubeflow-crds; theirs: its manifests').

Figures go to stdout; everything measured to docs/benchmarks/fanout.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.api import BENCH_UA, CEILING_UA, Api, gather_bounded
from bench.cluster import Cluster
from bench.cpu import control_plane_cpu, cpu_diff, cpu_snapshot
from bench.jobs import KUBEFLOW_GROUP, kubeflow_tfjob, rendered_objects, tfjob, tfjob_path
from bench.operator import DEFAULT_OPERATOR_CMD, OperatorProcess, operator_phases
from bench.report import (
    REPO,
    RESULTS_DIR,
    arguments,
    install_signal_handlers,
    log,
    machine,
    series_since,
    stats,
    workdir,
    write_result,
)
from bench.training_operator import DEFAULT_FLAGS, TUNED_FLAGS, TrainingOperator
from bench.watcher import Watcher
from bench.writes import attribute, audit_writes, counter_diff, write_counters
from trainjobs.testing import apply_crds

#: Our kubeflow.org CRDs (`TRAINJOBS_ENABLE_PLUGINS=kubeflow trainjobs crds`, kept current by
#: tests/unit/plugins/test_kubeflow_plugin.py).
KUBEFLOW_CRDS = REPO / "charts" / "trainjobs" / "kubeflow-crds"
OURS_KUBEFLOW_CMD = f"{DEFAULT_OPERATOR_CMD} --enable-plugins kubeflow"
#: The phases of --training-operator: label -> our command, or training-operator's flags.
TRAINING_OPERATOR_PHASES: dict[str, tuple[str, str]] = {
    "ours": ("ours", OURS_KUBEFLOW_CMD),
    "ours-tuned": ("ours", f"{OURS_KUBEFLOW_CMD} --concurrency 64"),
    "training-operator": ("training-operator", DEFAULT_FLAGS),
    "training-operator-tuned": ("training-operator", TUNED_FLAGS),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arguments("fanout", __doc__)
    p.add_argument("--jobs", type=int, default=500, help="TfJobs per phase (default 500)")
    p.add_argument("--workers", type=int, default=3,
                   help="Workers per job besides the Chief (default 3: 4 replicas)")
    p.add_argument("--concurrency", type=int, default=16,
                   help="operator --concurrency, and the ceiling's and the job creator's "
                        "requests in flight (default 16)")
    p.add_argument("--ceiling-concurrency", default=None,
                   help="comma-separated requests in flight, one ceiling phase each (default: "
                        "--concurrency, and 64: the operator's connection pool, so the most "
                        "requests it can have in flight)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--node-pods", type=int, default=1000)
    p.add_argument("--run-duration", default="20s",
                   help="how long each Worker runs before exiting 0; the Chief runs 2 s longer "
                        "(so no Worker is still running when the job succeeds)")
    p.add_argument("--operator-cmd", action="append", default=[],
                   help="operator command template ({python} {kubeconfig} {port} {namespace} "
                        "{concurrency}); repeat to compare several on the same control plane "
                        f"(default: {DEFAULT_OPERATOR_CMD})")
    p.add_argument("--label", action="append", default=[],
                   help="a name per --operator-cmd (default: ours, other1, ...)")
    p.add_argument("--training-operator", action="store_true",
                   help="kubeflow.org/v1 TFJobs; phases ours (--enable-plugins kubeflow) "
                        "default and tuned, Kubeflow's training-operator default and tuned "
                        "(instead of --operator-cmd)")
    p.add_argument("--ready-path", default="/readyz",
                   help="HTTP path on {port} that answers 200 once the operator is ready; "
                        "'none': wait 5 s instead")
    p.add_argument("--settle", type=float, default=5.0,
                   help="seconds to keep counting writes after the last job succeeded")
    p.add_argument("--resync-wait", type=float, default=5.0,
                   help="seconds after the restarted operator is ready before counting")
    p.add_argument("--no-resync", action="store_true", help="skip the restart check")
    p.add_argument("--no-audit", action="store_true", help="no audit log (attribution by "
                   "resource from the API server's counters only)")
    p.add_argument("--profile", action="store_true",
                   help="py-spy record each operator during the first repeat's fan-out")
    p.add_argument("--timeout", type=float, default=1200.0, help="per phase")
    p.add_argument("--workdir", type=Path, help="control plane state and logs (default: temp)")
    p.add_argument("--keep-workdir", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "fanout.json")
    return p.parse_args(argv)


async def run_ceiling(cluster: Cluster, watcher: Watcher, ns: str, conc: int,
                      args: argparse.Namespace) -> dict[str, Any]:
    api = Api(cluster.plane, CEILING_UA, pool=max(conc, 8))
    try:
        owner = await api.create(f"/api/v1/namespaces/{ns}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench-owner"}})
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "bench-owner",
               "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        objects = []
        for i in range(args.jobs):
            objects += rendered_objects(_job(f"bench-{i:05d}", ns, args), ref)
        per_kind = len(objects) // 2
        before = await write_counters(api)
        audit0 = cluster.audit_offset()
        c = watcher.counts[ns]
        log(f"ceiling: creating {len(objects)} objects at concurrency {conc}")
        cpu0 = cpu_snapshot(cluster.plane)
        t0 = time.perf_counter()
        await gather_bounded(conc, (api.create_ok(_path(ns, o), o) for o in objects))
        t_client = time.perf_counter() - t0
        await watcher.wait(lambda: c.pods >= per_kind and c.services >= per_kind,
                           "ceiling objects", args.timeout)
        cpu_objects = cpu_diff(cpu_snapshot(cluster.plane), cpu0)
        await watcher.wait(lambda: c.pods_running >= per_kind, "ceiling pods running",
                           args.timeout)
        after = await write_counters(api)
        objs = [t for k, t in watcher.pods.items() if k[0] == ns] + \
               [t for k, t in watcher.services.items() if k[0] == ns]
        seen = [x.seen if hasattr(x, "seen") else x for x in objs]
        t_objects = max(seen) - t0
        t_running = max(p.running or 0.0 for k, p in watcher.pods.items() if k[0] == ns) - t0
        res = {
            "objects": len(objects),
            "concurrency": conc,
            "client_seconds": t_client,
            "objects_seconds": t_objects,
            "create_rate": len(objects) / t_objects,
            "pods_running_seconds": t_running,
            # No job: its pods would all have ended the Chief's run time after the last ran.
            "jobs_succeeded_seconds": t_running + _seconds(_chief_run(args.run_duration)),
            "cpu_until_objects": cpu_objects,
            "apiserver_writes": counter_diff(after, before),
            "audit_writes": {k: dict(v) for k, v in
                             audit_writes(cluster.audit_since(audit0), ns).items()},
            "created_series": series_since(c.created_series, t0),
            "running_series": series_since(c.running_series, t0),
        }
        log(f"ceiling: {len(objects)} objects in {t_objects:.1f}s "
            f"({res['create_rate']:.0f}/s, client done at {t_client:.1f}s), "
            f"pods running at {t_running:.1f}s")
        return res
    finally:
        await api.close()


def _job(name: str, ns: str, args: argparse.Namespace) -> dict[str, Any]:
    make = kubeflow_tfjob if args.training_operator else tfjob
    return make(name, ns, workers=args.workers, chief_run=_chief_run(args.run_duration),
                worker_run=args.run_duration)


def _group(args: argparse.Namespace) -> str:
    return KUBEFLOW_GROUP if args.training_operator else "trainjobs.io"


def _seconds(run: str) -> float:
    """A KWOK run duration ("20s", "1500ms") in seconds."""
    return float(run[:-2]) / 1000 if run.endswith("ms") else float(run.rstrip("s"))


def _chief_run(run: str) -> str:
    """The Chief runs 2 s longer than the Workers."""
    if run.endswith("ms"):
        return f"{int(run[:-2]) + 2000}ms"
    if run.endswith("s") and run[:-1].replace(".", "").isdigit():
        return f"{float(run[:-1]) + 2:g}s"
    return run


def _path(ns: str, obj: dict[str, Any]) -> str:
    plural = {"Pod": "pods", "Service": "services"}[obj["kind"]]
    return f"/api/v1/namespaces/{ns}/{plural}"


async def run_operator(cluster: Cluster, watcher: Watcher, ns: str, label: str, command: str,
                       args: argparse.Namespace, workdir: Path, profile: bool
                       ) -> dict[str, Any]:
    api = Api(cluster.plane, BENCH_UA, pool=max(args.concurrency, 8))
    ready_path = None if args.ready_path == "none" else args.ready_path
    op = OperatorProcess(command, kubeconfig=cluster.plane.kubeconfig, namespace=ns,
                         concurrency=args.concurrency, log_path=workdir / f"operator-{ns}.log",
                         ready_path=ready_path)
    pyspy: subprocess.Popen[bytes] | None = None
    replicas = 1 + args.workers
    n_pods = args.jobs * replicas
    c = watcher.counts[ns]
    res: dict[str, Any] = {"label": label, "command": " ".join(op.argv), "jobs": args.jobs,
                           "replicas": replicas}
    try:
        res["ready_seconds"] = await op.start()
        fp0 = op.footprint()
        jobs = [_job(f"bench-{i:05d}", ns, args) for i in range(args.jobs)]
        before = await write_counters(api)
        audit0 = cluster.audit_offset()
        if profile:
            pyspy = _start_pyspy(op.pid, workdir / f"profile-{ns}")
        log(f"{label}: creating {args.jobs} TfJobs x {replicas} replicas")
        cpu0 = cpu_snapshot(cluster.plane, op)
        t0 = time.perf_counter()
        await gather_bounded(args.concurrency,
                             (api.create_ok(tfjob_path(ns, group=_group(args)), j)
                              for j in jobs))
        res["jobs_created_seconds"] = time.perf_counter() - t0
        await watcher.wait(lambda: c.pods >= n_pods and c.services >= n_pods,
                           f"{label}: {n_pods} pods and Services", args.timeout)
        cpu_objects = cpu_diff(cpu_snapshot(cluster.plane, op), cpu0)
        log(f"{label}: all objects exist")
        await watcher.wait(lambda: c.pods_running >= n_pods, f"{label}: pods running",
                           args.timeout)
        log(f"{label}: all pods running")
        await watcher.wait(lambda: c.jobs_in["Succeeded"] + c.jobs_in["Failed"] >= args.jobs,
                           f"{label}: jobs finished", args.timeout)
        t_done = time.perf_counter()
        cpu_done = cpu_diff(cpu_snapshot(cluster.plane, op), cpu0)
        if pyspy is not None:
            res["profile"] = _stop_pyspy(pyspy)
            pyspy = None
        log(f"{label}: all jobs finished; counting writes for {args.settle:.0f}s more")
        await asyncio.sleep(args.settle)
        after = await write_counters(api)
        audit = cluster.audit_since(audit0)
        fp1 = op.footprint()

        mine = [(k, p) for k, p in watcher.pods.items() if k[0] == ns]
        svcs = [t for k, t in watcher.services.items() if k[0] == ns]
        jtracks = [t for k, t in watcher.jobs.items() if k[0] == ns]
        t_objects = max([p.seen for _, p in mine] + svcs) - t0
        t_running = max(p.running or 0.0 for _, p in mine) - t0
        running_seen = [t.states["Running"] for t in jtracks if "Running" in t.states]
        succeeded = [t.states["Succeeded"] for t in jtracks if "Succeeded" in t.states]
        diff = counter_diff(after, before)
        attributed = attribute(diff, "tfjobs", _group(args))
        no_events = sum(v for k, v in attributed.items() if k != "events")
        res.update({
            "objects": 2 * n_pods,
            "objects_seconds": t_objects,
            "create_rate": 2 * n_pods / t_objects,
            "pods_running_seconds": t_running,
            "jobs_running_seconds": (max(running_seen) - t0) if running_seen else None,
            "jobs_seen_running": len(running_seen),
            "jobs_succeeded_seconds": (max(succeeded) - t0) if succeeded else None,
            "jobs_succeeded": len(succeeded),
            "jobs_failed": c.jobs_in["Failed"],
            "finished_seconds": t_done - t0,
            "cpu_until_objects": cpu_objects,
            "cpu_until_finished": cpu_done,
            "operator_cpu_seconds": cpu_done.get("operator"),
            "status_versions_per_job": dict(sorted(Counter(
                t.versions - 1 for t in jtracks).items())),
            "status_log_sample": {k[1]: [(round(x[0] - t0, 2), x[1], x[2]) for x in t.log]
                                  for k, t in watcher.jobs.items()
                                  if k[0] == ns and t.log is not None},
            "apiserver_writes": diff,
            "operator_writes": attributed,
            "writes_per_job": no_events / args.jobs,
            "writes_per_job_with_events": (no_events + attributed["events"]) / args.jobs,
            "audit_writes": {k: dict(v) for k, v in audit_writes(audit, ns).items()},
            "footprint_start": fp0,
            "footprint_end": fp1,
            "created_series": series_since(c.created_series, t0),
            "running_series": series_since(c.running_series, t0),
        })
        aud = res["audit_writes"].get("operator", {})
        res["audit_operator_writes"] = sum(aud.values())
        res.update(_audit_per_job(aud, args.jobs))
        log(f"{label}: {2 * n_pods} objects in {t_objects:.1f}s ({res['create_rate']:.0f}/s); "
            f"pods running {t_running:.1f}s; jobs Running {res['jobs_running_seconds']}; "
            f"Succeeded {res['jobs_succeeded_seconds']}; writes/job {res['writes_per_job']:.2f} "
            f"(+events {res['writes_per_job_with_events']:.2f}); rss {fp1['rss_mb']:.0f} MB "
            f"peak {fp1['hwm_mb']:.0f} MB cpu {fp1['cpu_s']:.1f}s")
        if not args.no_resync:
            res["resync"] = await resync_check(cluster, api, op, ns, args)
        return res
    finally:
        if pyspy is not None:
            _stop_pyspy(pyspy)
        await op.stop()
        op.kill_now()
        await api.close()


async def resync_check(cluster: Cluster, api: Api, op: OperatorProcess, ns: str,
                       args: argparse.Namespace) -> dict[str, Any]:
    """Restart the operator with everything finished and steady; count its writes."""
    await op.stop()
    before = await write_counters(api)
    audit0 = cluster.audit_offset()
    t_ready = await op.start()
    await asyncio.sleep(args.resync_wait)
    after = await write_counters(api)
    fp = op.footprint()
    diff = counter_diff(after, before)
    attributed = attribute(diff, "tfjobs", _group(args))
    audit = audit_writes(cluster.audit_since(audit0), ns)
    res = {"ready_seconds": t_ready, "apiserver_writes": diff, "operator_writes": attributed,
           "operator_writes_total": sum(attributed.values()),
           "audit_writes": {k: dict(v) for k, v in audit.items()},
           "audit_operator_writes": sum(audit.get("operator", {}).values()),
           "footprint": fp}
    log(f"resync: ready in {t_ready:.1f}s; operator writes in {args.resync_wait:.0f}s after "
        f"ready: {res['operator_writes_total']} (audit: {res['audit_operator_writes']})")
    return res


def _start_pyspy(pid: int, prefix: Path) -> subprocess.Popen[bytes] | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        log("py-spy not installed: no profile")
        return None
    cmd = [exe, "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--format", "raw",
           "-o", f"{prefix}.txt"]
    log(f"profiling: {' '.join(cmd)}")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop_pyspy(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    out = next((a for a in proc.args if str(a).endswith(".txt")), "")  # type: ignore[union-attr]
    return str(out)


async def one_repeat(i: int, args: argparse.Namespace, commands: list[tuple[str, str]],
                     root: Path) -> dict[str, Any]:
    workdir = root / f"repeat-{i}"
    cluster = Cluster.start(workdir, nodes=args.nodes, node_pods=args.node_pods,
                            audit=not args.no_audit)
    api: Api | None = None
    watcher: Watcher | None = None
    try:
        ceilings = [f"ceiling{c}" for c in args.ceilings]
        phases = [*ceilings, *[label for label, _ in commands]]
        # The watcher keeps 3 watches per phase open for the whole repeat: with more than 5
        # phases a pool of 16 connections had none left for its lists, and it never synced.
        api = Api(cluster.plane, BENCH_UA, pool=16 + 3 * len(phases))
        if i % 2:
            phases.reverse()
        namespaces = {ph: f"bench-{ph}" for ph in phases}
        if args.training_operator:  # the watcher lists kubeflow.org TFJobs from the start
            _apply_kubeflow_crds(cluster)
        for ns in namespaces.values():
            await api.ensure_namespace(ns)
        watcher = Watcher(api, list(namespaces.values()), job_group=_group(args))
        watcher.log_names = {"bench-00000", "bench-00001", "bench-00250", "bench-00499"}
        watcher.start()
        await watcher.synced.wait()
        out: dict[str, Any] = {"order": phases, "ceilings": args.ceilings}
        theirs = (TrainingOperator.prepare(cluster.plane, workdir / "training-operator")
                  if args.training_operator else None)
        for ph in phases:
            ns = namespaces[ph]
            if ph.startswith("ceiling"):
                out[ph] = await run_ceiling(cluster, watcher, ns, int(ph[7:]), args)
                continue
            cmd = dict(commands)[ph]
            if theirs is not None:  # one operator at a time, each with its own CRDs
                who, setting = TRAINING_OPERATOR_PHASES[ph]
                if who == "training-operator":
                    theirs.install()
                    cmd = theirs.command(setting)
                else:
                    _apply_kubeflow_crds(cluster)
            try:
                out[ph] = await run_operator(cluster, watcher, ns, ph, cmd, args, workdir,
                                             profile=args.profile and i == 0)
            finally:
                if theirs is not None and TRAINING_OPERATOR_PHASES[ph][0] != "ours":
                    theirs.uninstall()
        best = max(out[c]["create_rate"] for c in ceilings)
        out["ceiling"] = {"best_create_rate": best}
        for label, _ in commands:
            out[label]["ratio_to_ceiling"] = out[label]["create_rate"] / best
            for c in ceilings:
                out[label][f"ratio_to_{c}"] = out[label]["create_rate"] / out[c]["create_rate"]
            done = out[label]["jobs_succeeded_seconds"]
            for other in [*ceilings, *(x for x, _ in commands)]:
                if done is not None and out[other].get("jobs_succeeded_seconds"):
                    out[label][f"succeeded_ratio_to_{other}"] = \
                        done / out[other]["jobs_succeeded_seconds"]
        out["watcher_events"] = watcher.events
        return out
    finally:
        if watcher is not None:
            await watcher.stop()
        if api is not None:
            await api.close()
        cluster.stop()


def _apply_kubeflow_crds(cluster: Cluster) -> None:
    """Our kubeflow.org CRDs, replacing training-operator's (same field manager: its fields
    that ours lack go)."""
    apply_crds(cluster.plane.kubeconfig, KUBEFLOW_CRDS, timeout=120,
               kubectl=cluster.plane.bin_dir / "kubectl", wait_published=False)


def _audit_per_job(operator_writes: dict[str, int], jobs: int) -> dict[str, float]:
    """Writes per job made by the operator (audit log, by user agent), without and with its
    Events."""
    events = sum(v for k, v in operator_writes.items() if k.endswith(" events"))
    total = sum(operator_writes.values())
    return {"audit_writes_per_job": (total - events) / jobs,
            "audit_writes_per_job_with_events": total / jobs}


def summarize(repeats: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    for r in repeats:  # also for results written before these figures existed
        for label in labels:
            r[label].update(_audit_per_job(r[label]["audit_writes"].get("operator", {}),
                                           r[label]["jobs"]))
    keys = ("objects_seconds", "create_rate", "pods_running_seconds", "jobs_running_seconds",
            "jobs_succeeded_seconds", "ratio_to_ceiling", "writes_per_job",
            "writes_per_job_with_events", "audit_writes_per_job",
            "audit_writes_per_job_with_events")
    ceilings = [f"ceiling{c}" for c in repeats[0]["ceilings"]]
    summary: dict[str, Any] = {c: {k: stats([r[c][k] for r in repeats if k in r[c]])
                                   for k in ("objects_seconds", "create_rate",
                                             "pods_running_seconds", "jobs_succeeded_seconds")}
                               for c in ceilings}
    for c in ceilings:
        summary[c]["client_cpu_seconds"] = stats([r[c]["cpu_until_objects"]["bench"]
                                                  for r in repeats])
        summary[c]["machine_cpu_until_objects"] = stats([
            r[c]["cpu_until_objects"]["machine_busy"] for r in repeats])
    for label in labels:
        summary[label] = {k: stats([r[label][k] for r in repeats
                                    if r[label].get(k) is not None])
                          for k in (*keys, "operator_cpu_seconds",
                                    *(f"ratio_to_{c}" for c in ceilings),
                                    *(f"succeeded_ratio_to_{x}" for x in [*ceilings, *labels]))}
        for k in ("others", "machine_busy"):
            summary[label][f"{k}_cpu_seconds"] = stats([
                r[label]["cpu_until_finished"][k] for r in repeats])
        # CPU-bound: the create rate follows the CPU every process spent per object.
        until = [r[label]["cpu_until_objects"] for r in repeats]
        summary[label]["machine_cpu_until_objects"] = stats([u["machine_busy"] for u in until])
        summary[label]["operator_cpu_until_objects"] = stats([u["operator"] for u in until])
        summary[label]["control_plane_cpu_until_objects"] = stats([
            control_plane_cpu(u) for u in until])
        for c in ceilings:
            summary[label][f"cpu_ratio_to_{c}"] = stats([
                r[c]["cpu_until_objects"]["machine_busy"] / r[label]["cpu_until_objects"]
                ["machine_busy"] for r in repeats])
        summary[label]["peak_rss_mb"] = stats([r[label]["footprint_end"]["hwm_mb"]
                                               for r in repeats])
        if all("resync" in r[label] for r in repeats):
            summary[label]["resync_writes"] = [r[label]["resync"]["operator_writes_total"]
                                               for r in repeats]
    return summary


def print_summary(summary: dict[str, Any], args: argparse.Namespace, labels: list[str]) -> None:
    def line(name: str, s: dict[str, float], unit: str = "", fmt: str = ".1f") -> None:
        if not s.get("n"):
            return
        print(f"  {name:<34} min {s['min']:{fmt}}{unit}  median {s['median']:{fmt}}{unit}  "
              f"max {s['max']:{fmt}}{unit}  (n={s['n']})")

    n = args.jobs * (1 + args.workers)
    print(f"\nfan-out: {args.jobs} TfJobs x {1 + args.workers} replicas = {n} pods + {n} "
          f"Services, concurrency {args.concurrency}, {args.repeats} repeat(s)")
    for conc in args.ceilings:
        c = summary[f"ceiling{conc}"]
        print(f"ceiling (bare aiohttp client, {conc} requests in flight):")
        line("all objects exist (s)", c["objects_seconds"])
        line("create rate (objects/s)", c["create_rate"], fmt=".0f")
        line("machine CPU until then (CPU-s)", c["machine_cpu_until_objects"])
        line("all pods Running (s)", c["pods_running_seconds"])
        line("+ Chief run: every job Succeeded (s)", c["jobs_succeeded_seconds"])
    for label in labels:
        s = summary[label]
        print(f"{label}:")
        line("all pods+Services exist (s)", s["objects_seconds"])
        line("create rate (objects/s)", s["create_rate"], fmt=".0f")
        line("ours / best ceiling (target >= 0.80)", s["ratio_to_ceiling"], fmt=".2f")
        for conc in args.ceilings:
            line(f"ours / ceiling at {conc}", s[f"ratio_to_ceiling{conc}"], fmt=".2f")
        line("machine CPU until then (CPU-s)", s["machine_cpu_until_objects"])
        line("  of which control plane", s["control_plane_cpu_until_objects"])
        line("  of which operator", s["operator_cpu_until_objects"])
        for conc in args.ceilings:
            line(f"  ceiling{conc}'s CPU / this CPU", s[f"cpu_ratio_to_ceiling{conc}"],
                 fmt=".2f")
        line("all pods Running (s)", s["pods_running_seconds"])
        line("every job Running (s)", s["jobs_running_seconds"])
        line("every job Succeeded (s)", s["jobs_succeeded_seconds"])
        for other in [*(f"ceiling{c}" for c in args.ceilings), *labels]:
            if other != label:
                line(f"  Succeeded / {other}", s[f"succeeded_ratio_to_{other}"], fmt=".2f")
        line("operator CPU until Succeeded (s)", s["operator_cpu_seconds"])
        line("  other work on the machine (CPU-s)", s["others_cpu_seconds"])
        line(f"writes/job w/o Events (<= {2 * (1 + args.workers) + 2})",
             s["audit_writes_per_job"], fmt=".2f")
        line("writes/job with Events", s["audit_writes_per_job_with_events"], fmt=".2f")
        line("  by resource counters, w/o Events", s["writes_per_job"], fmt=".2f")
        line("  by resource counters, with Events", s["writes_per_job_with_events"], fmt=".2f")
        line("peak RSS (MB)", s["peak_rss_mb"], fmt=".0f")
        if "resync_writes" in s:
            print(f"  {'writes during resync (target 0)':<34} {s['resync_writes']}")


async def main_async(args: argparse.Namespace) -> int:
    args.ceilings = sorted({int(x) for x in (args.ceiling_concurrency
                                             or f"{args.concurrency},64").split(",")})
    if args.training_operator:
        if args.operator_cmd or args.label:
            raise SystemExit("--training-operator sets the phases: no --operator-cmd/--label")
        # training-operator's commands are made per repeat (ports, certificates).
        pairs = [(x, TRAINING_OPERATOR_PHASES[x][1] if TRAINING_OPERATOR_PHASES[x][0] == "ours"
                  else "") for x in TRAINING_OPERATOR_PHASES]
    else:
        pairs = operator_phases(args.operator_cmd, args.label)
    labels = [label for label, _ in pairs]
    result: dict[str, Any] = {"benchmark": "fanout", "machine": machine(),
                              "params": {k: (str(v) if isinstance(v, Path) else v)
                                         for k, v in vars(args).items()},
                              "commands": dict(pairs), "repeats": []}
    with workdir("fanout", args.workdir, args.keep_workdir) as root:
        for i in range(args.repeats):
            log(f"=== repeat {i + 1}/{args.repeats}")
            result["repeats"].append(await one_repeat(i, args, pairs, root))
            result["summary"] = summarize(result["repeats"], labels)
            write_result("fanout", result, args.out)
    print_summary(result["summary"], args, labels)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
