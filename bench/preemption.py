"""Checkpoint before preemption (issue 38.6): what asking the preempted job's checkpointing
replica to save first costs the high-priority job that preempts it, on the real control plane
with Kueue v0.19.2, against Kueue's own timeline for batch/v1 Jobs measured in the same run.

One control plane (KWOK nodes), one Kueue (its batch/job integration on), one ResourceFlavor,
WorkloadPriorityClasses low (100) and high (1000), and per phase a namespace with a
ClusterQueue whose CPU quota fits exactly one job (preemption within it: LowerPriority) and
its LocalQueue. One operator watches the TfJob phases' namespaces and serves progress on
127.0.0.1 (plain HTTP, `--progress-interval`). Each repeat runs every phase once (the order
reversed every other repeat). A scenario: a low-priority job, its pods Running (1 + --workers
pods of 100m CPU); then a high-priority job of the same size is created (t0); the bench
watches until every pod of the high job is Running (t1), then deletes both jobs and waits
until their pods and Workloads are gone.

Phases:

* ``batch-job``: batch/v1 Jobs through Kueue's own batch/job integration (Kueue suspends the
  low Job; the controller-manager's Job controller deletes and creates the pods): the baseline;
* ``off``: TfJobs without ``runPolicy.checkpointTimeoutSeconds`` (the operator stops the pods
  as soon as Kueue evicts the Workload);
* ``ack``: the low TfJob with ``checkpointTimeoutSeconds`` (--checkpoint-timeout); the bench
  acts as its Chief through ``trainjobs_progress`` with a token the API server binds to the
  Chief's pod: it reports as a training loop does (every 50 ms; the library sends at most once
  per interval), and answers ``checkpoint_saved`` as soon as ``checkpoint_requested`` is True;
* ``silent``: the same, but the Chief reports once and never again: it never sees the request,
  and the operator waits the whole bound before it stops the pods.

Times are read from the bench's own watches (pods, Workloads, the jobs) and are seconds after
t0; the breakdown splits t0 -> t1 into Kueue's decision (the low Workload Evicted), the
checkpoint (request recorded in status.checkpointRequest, seen by the Chief, answered), the
stop (the first low pod marked for deletion, the last gone), the quota released (the low
Workload's QuotaReserved False), the high Workload Admitted and its pods Running.

    python -m bench.preemption                     # 3 repeats of the four phases
    python -m bench.preemption --repeats 1 --phases off,ack

Results to stdout and docs/benchmarks/preemption.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.api import Api
from bench.cluster import Cluster
from bench.cpu import cpu_diff, cpu_snapshot
from bench.jobs import JOB_LABEL, tfjob_path
from bench.kueue import BASELINE, FLAVOR, POD_CPU_MILLI, queued_batch_job, queued_tfjob
from bench.operator import DEFAULT_OPERATOR_CMD, OperatorProcess
from bench.progress import tokens
from bench.report import (
    REPO,
    arguments,
    install_signal_handlers,
    log,
    machine,
    stats,
    workdir,
    write_result,
)
from trainjobs.kube import PODS, Resource
from trainjobs.kube.listwatch import LISTED, LISTING, SYNCED, Backoff, ListWatch
from trainjobs.testing import (
    WORKLOAD_PRIORITY_CLASS_LABEL,
    Kueue,
    KueueOptions,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
    create_workload_priority_class,
)
from trainjobs.testing._process import free_ports

if TYPE_CHECKING:
    from trainjobs_progress import Reporter

WORKLOADS = Resource("Workload", "workloads", "kueue.x-k8s.io", "v1beta2")
BATCH_JOBS = Resource("Job", "jobs", "batch", "v1")
TFJOBS = Resource("TfJob", "tfjobs", "trainjobs.io", "v1alpha1")
BATCH_JOB_LABELS = ("batch.kubernetes.io/job-name", "job-name")
CONTAINER = "tensorflow"  # the TfJob's container (bench/jobs.py)
PRIORITIES = {"low": 100, "high": 1000}
TOKEN_FILE_ENV = "TRAINJOBS_PROGRESS_TOKEN_FILE"

#: The marks of a scenario, in the order they normally come (seconds after t0).
MARKS = ("evicted", "requested", "chief_asked", "acked", "settled", "low_first_delete",
         "low_gone", "low_released", "high_admitted", "high_pods", "high_running")
#: The breakdown of t0 -> high Running: (name, from mark, to mark); a step whose marks a
#: scenario lacks is left out of it. "stop" starts at the answer (ack), the request (silent:
#: the wait for the bound) or the eviction (no checkpoint).
STEPS = (
    ("kueue decides (t0 -> low Workload Evicted)", "t0", "evicted"),
    ("operator asks (Evicted -> checkpointRequest in status)", "evicted", "requested"),
    ("request reaches the Chief (-> checkpoint_requested)", "requested", "chief_asked"),
    ("Chief answers (-> checkpoint_saved accepted)", "chief_asked", "acked"),
    ("stop begins (-> first low pod marked for deletion)", "stop_from", "low_first_delete"),
    ("low pods go (-> the last one gone)", "low_first_delete", "low_gone"),
    ("quota released (-> low Workload QuotaReserved False)", "low_gone", "low_released"),
    ("high admitted (-> high Workload Admitted)", "low_released", "high_admitted"),
    ("high pods run (-> all high pods Running)", "high_admitted", "high_running"),
)


@dataclass(frozen=True)
class Phase:
    name: str
    batch: bool  # batch/v1 Jobs (Kueue's integration) rather than TfJobs (the operator)
    checkpoint: bool = False  # the low job has checkpointTimeoutSeconds
    answers: bool = False  # its Chief answers the request (else: reports once, then silent)


PHASES = {p.name: p for p in (
    Phase(BASELINE, batch=True),
    Phase("off", batch=False),
    Phase("ack", batch=False, checkpoint=True, answers=True),
    Phase("silent", batch=False, checkpoint=True, answers=False),
)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arguments("preemption", __doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--phases", default=",".join(PHASES),
                   help=f"comma-separated, of {', '.join(PHASES)} (default: all)")
    p.add_argument("--workers", type=int, default=2,
                   help="Workers per TfJob (a batch Job has as many pods; default 2)")
    p.add_argument("--checkpoint-timeout", type=int, default=30,
                   help="the low TfJob's checkpointTimeoutSeconds (default 30)")
    p.add_argument("--progress-interval", type=float, default=1.0,
                   help="the operator's --progress-interval (default 1)")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--timeout", type=float, default=180.0, help="per wait (seconds)")
    p.add_argument("--operator-cmd", default=DEFAULT_OPERATOR_CMD)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    names = [n.strip() for n in args.phases.split(",") if n.strip()]
    unknown = [n for n in names if n not in PHASES]
    if unknown or not names:
        p.error(f"--phases: unknown {unknown or 'none given'}; known: {', '.join(PHASES)}")
    if args.repeats < 1 or args.workers < 0 or args.checkpoint_timeout < 1:
        p.error("--repeats and --checkpoint-timeout must be positive, --workers not negative")
    args.phase_list = [PHASES[n] for n in names]
    return args


# Pure helpers (tests/unit/bench/test_preemption_bench.py) ---------------------------------


def pod_job(pod: Mapping[str, Any]) -> str:
    """The job a pod belongs to: the operator's job-name label, else the Job controller's."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for key in (JOB_LABEL, *BATCH_JOB_LABELS):
        if labels.get(key):
            return str(labels[key])
    return ""


def condition_status(obj: Mapping[str, Any] | None, ctype: str) -> str:
    """The status ("True", "False", ...) of `obj`'s condition `ctype`; "" without one."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return str(cond.get("status", ""))
    return ""


def owned_by(objects: Iterable[Mapping[str, Any]], owner: str) -> Mapping[str, Any] | None:
    """The object among `objects` with an owner reference named `owner`."""
    for obj in objects:
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        if any(ref.get("name") == owner for ref in refs):
            return obj
    return None


def running(pods: Iterable[Mapping[str, Any]]) -> int:
    """Pods Running and not marked for deletion."""
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and not (p.get("metadata") or {}).get("deletionTimestamp"))


def marked(pods: Iterable[Mapping[str, Any]]) -> int:
    return sum(1 for p in pods if (p.get("metadata") or {}).get("deletionTimestamp"))


def checkpoint_outcome(job: Mapping[str, Any] | None) -> str:
    """status.checkpointRequest.outcome ("" without a request)."""
    request = ((job or {}).get("status") or {}).get("checkpointRequest") or {}
    return str(request.get("outcome") or "")


def breakdown(marks: Mapping[str, float]) -> dict[str, float]:
    """`marks` (seconds after t0) as the STEPS between them; a step missing either mark is
    left out. The stop starts at the Chief's answer, else at the request (a silent Chief:
    the bound), else at the eviction."""
    at = {"t0": 0.0, **marks}
    at["stop_from"] = next((marks[k] for k in ("acked", "requested", "evicted") if k in marks),
                           0.0)
    return {name: round(at[b] - at[a], 3) for name, a, b in STEPS if a in at and b in at}


def summarize(scenarios: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per phase: t0 -> high Running and Evicted -> high Running (median, min, max), each
    mark after t0, each step of the breakdown, the Chief's own answer time."""
    out: dict[str, Any] = {}
    for phase in dict.fromkeys(s["phase"] for s in scenarios):
        mine = [s for s in scenarios if s["phase"] == phase]
        marks = [s["marks"] for s in mine]
        entry: dict[str, Any] = {
            "repeats": len(mine),
            "preemption_to_high_running": stats([m["high_running"] for m in marks]),
            "evicted_to_high_running": stats([m["high_running"] - m["evicted"]
                                              for m in marks]),
            "marks": {k: stats([m[k] for m in marks if k in m])
                      for k in MARKS if any(k in m for m in marks)},
        }
        steps = [breakdown(m) for m in marks]
        entry["steps"] = {name: stats([b[name] for b in steps if name in b])
                          for name, _, _ in STEPS if any(name in b for b in steps)}
        answers = [s["chief"]["answer_seconds"] for s in mine
                   if (s.get("chief") or {}).get("answer_seconds") is not None]
        if answers:
            entry["chief_answer_seconds"] = stats(answers)
        out[phase] = entry
    return out


# The watch of one namespace ----------------------------------------------------------------


class Timeline:
    """Follows one namespace's pods, Workloads and jobs (the transport's list-then-watch) and
    records when each expected mark first held: the perf_counter() of the event that made it
    so, read by this process."""

    def __init__(self, api: Api, namespace: str, jobs: Resource) -> None:
        self.api, self.namespace = api, namespace
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"pod": {}, "workload": {},
                                                              "job": {}}
        self.marks: dict[str, float] = {}
        self._expected: dict[str, Callable[[], bool]] = {}
        self._changed = asyncio.Event()
        self._resources = {"pod": PODS, "workload": WORKLOADS, "job": jobs}
        self._tasks: list[asyncio.Task[None]] = []
        self._listed: set[str] = set()
        self.synced = asyncio.Event()

    def start(self) -> None:
        for kind in self._resources:
            self._tasks.append(asyncio.create_task(self._follow(kind)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _follow(self, kind: str) -> None:
        follow = ListWatch(self.api, self._resources[kind], self.namespace, watch_timeout=3600,
                           backoff=Backoff(first=0.2, most=0.2))
        async with contextlib.aclosing(follow.events()) as events:
            async for event in events:
                store = self.objects[kind]
                if event.type == LISTING:
                    store.clear()
                    continue
                if event.type == SYNCED:
                    self._listed.add(kind)
                    if len(self._listed) == len(self._resources):
                        self.synced.set()
                elif event.type in (LISTED, "ADDED", "MODIFIED"):
                    store[event.object["metadata"]["name"]] = event.object
                elif event.type == "DELETED":
                    store.pop(event.object["metadata"]["name"], None)
                self._changed_now(time.perf_counter())

    def _changed_now(self, now: float) -> None:
        for name, check in list(self._expected.items()):
            if check():
                self.marks[name] = now
                del self._expected[name]
        self._changed.set()
        self._changed = asyncio.Event()

    # What the marks read.
    def pods_of(self, job: str) -> list[dict[str, Any]]:
        return [p for p in self.objects["pod"].values() if pod_job(p) == job]

    def workload_of(self, job: str) -> Mapping[str, Any] | None:
        return owned_by(self.objects["workload"].values(), job)

    def job(self, name: str) -> dict[str, Any] | None:
        return self.objects["job"].get(name)

    def expect(self, name: str, check: Callable[[], bool]) -> None:
        """Record when `check()` first holds (now, if it already does)."""
        if check():
            self.marks[name] = time.perf_counter()
        else:
            self._expected[name] = check

    def mark(self, name: str) -> None:
        """A mark the bench itself saw (the Chief's), now."""
        self.marks.setdefault(name, time.perf_counter())

    async def until(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while not check():
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"{self.namespace}: timed out after {timeout:.0f}s waiting "
                                   f"for {what}")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, 1.0))

    async def until_mark(self, name: str, timeout: float) -> float:
        await self.until(lambda: name in self.marks, name, timeout)
        return self.marks[name]


# The Chief ----------------------------------------------------------------------------------


def _progress_library() -> Any:
    """`trainjobs_progress`: installed, or this clone's progress/src (as the tests use it)."""
    try:
        return importlib.import_module("trainjobs_progress")
    except ImportError:
        sys.path.insert(0, str(REPO / "progress" / "src"))
        return importlib.import_module("trainjobs_progress")


def container_env(pod: Mapping[str, Any], container: str = CONTAINER) -> dict[str, str]:
    """The literal environment the operator gave `container` (what the replica's process
    would read)."""
    main = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", "") for e in main.get("env") or []}


@dataclass
class Chief:
    """The low job's Chief as a training loop runs trainjobs_progress: a report every 50 ms
    (the library sends at most once per interval); when asked, `checkpoint_saved` at once.
    Silent (`answers` False): one report, then nothing."""

    reporter: Reporter
    timeline: Timeline
    answers: bool
    job: str
    reported: asyncio.Event = field(default_factory=asyncio.Event)
    answer_seconds: float | None = None
    accepted: bool | None = None
    step: int = 0

    async def run(self) -> None:
        self.step = 1
        self.reporter.report(self.step, total=1_000_000)
        if not await asyncio.to_thread(self.reporter.flush, 10.0) or self.reporter.sent < 1:
            raise RuntimeError(f"{self.job}: the operator did not accept the Chief's report "
                               f"(last reply {self.reporter.last_reply})")
        self.reported.set()
        if not self.answers:
            return
        while True:
            await asyncio.sleep(0.05)
            self.step += 1
            self.reporter.report(self.step, total=1_000_000)
            if self.reporter.checkpoint_requested:
                self.timeline.mark("chief_asked")
                t = time.perf_counter()
                self.accepted = await asyncio.to_thread(
                    self.reporter.checkpoint_saved, self.step,
                    f"s3://bench/{self.job}/{self.step}", 10.0)
                self.answer_seconds = round(time.perf_counter() - t, 4)
                if self.accepted:
                    self.timeline.mark("acked")
                return


async def start_chief(api: Api, timeline: Timeline, job: str, answers: bool, tmp: Path
                      ) -> tuple[Chief, asyncio.Task[None]]:
    """A Chief for `job` reporting with its pod's own bound token, its first report
    accepted."""
    pod = timeline.objects["pod"][f"{job}-chief-0"]
    (minted,) = await tokens(api, [pod], timeline.namespace, expiration=1800)
    token_file = tmp / f"{timeline.namespace}-{job}.token"
    token_file.write_text(minted["token"])
    env = {**container_env(pod), TOKEN_FILE_ENV: str(token_file)}
    reporter = _progress_library().from_environment(env)
    if not reporter.enabled:
        raise RuntimeError(f"{job}: the Chief's pod has no TRAINJOBS_PROGRESS_URL")
    chief = Chief(reporter, timeline, answers, job)
    task = asyncio.create_task(chief.run())
    done, _ = await asyncio.wait({task, asyncio.create_task(chief.reported.wait())},
                                 timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # its error, if any
    if not chief.reported.is_set():
        task.cancel()
        raise TimeoutError(f"{job}: the Chief's first report was not accepted in 30 s")
    return chief, task


# One scenario -------------------------------------------------------------------------------


def job_manifest(phase: Phase, ns: str, name: str, priority: str, workers: int,
                 checkpoint_timeout: int | None) -> tuple[str, dict[str, Any]]:
    """(collection path, manifest) of a job of 1 + `workers` pods of 100m CPU labelled for
    the queue "queue" and the priority class `priority`."""
    tf = queued_tfjob(name, ns, workers)
    if phase.batch:
        template = tf["spec"]["replicaSpecs"]["Chief"]["template"]
        doc = queued_batch_job(name, ns, 1 + workers, template)
        path = f"/apis/batch/v1/namespaces/{ns}/jobs"
    else:
        doc, path = tf, tfjob_path(ns)
        for spec in doc["spec"]["replicaSpecs"].values():
            spec["template"]["spec"]["serviceAccountName"] = "default"  # a token is bound
        if checkpoint_timeout is not None:
            doc["spec"]["runPolicy"] = {"checkpointTimeoutSeconds": checkpoint_timeout}
    doc["metadata"]["labels"][WORKLOAD_PRIORITY_CLASS_LABEL] = priority
    return path, doc


def expect_marks(tl: Timeline, phase: Phase, low: str, high: str, pods: int) -> None:
    tl.expect("evicted", lambda: condition_status(tl.workload_of(low), "Evicted") == "True")
    if phase.checkpoint:
        tl.expect("requested", lambda: checkpoint_outcome(tl.job(low)) == "Pending")
        tl.expect("settled", lambda: checkpoint_outcome(tl.job(low)) not in ("", "Pending"))
    tl.expect("low_first_delete", lambda: marked(tl.pods_of(low)) > 0
              or len(tl.pods_of(low)) < pods)
    tl.expect("low_gone", lambda: not tl.pods_of(low))
    tl.expect("low_released",
              lambda: condition_status(tl.workload_of(low), "QuotaReserved") == "False")
    tl.expect("high_admitted",
              lambda: condition_status(tl.workload_of(high), "Admitted") == "True")
    tl.expect("high_pods", lambda: len(tl.pods_of(high)) >= pods)
    tl.expect("high_running", lambda: running(tl.pods_of(high)) >= pods)


async def scenario(ctx: Context, phase: Phase, repeat: int) -> dict[str, Any]:
    args, api, tl = ctx.args, ctx.api, ctx.timelines[phase.name]
    ns, pods = tl.namespace, 1 + args.workers
    low, high = f"low-{repeat}", f"high-{repeat}"
    tl.marks.clear()
    timeout = args.checkpoint_timeout if phase.checkpoint else None
    path, doc = job_manifest(phase, ns, low, "low", args.workers, timeout)
    await api.create(path, doc)
    await tl.until(lambda: running(tl.pods_of(low)) >= pods and (
        phase.batch or ((tl.job(low) or {}).get("status") or {}).get("state") == "Running"),
        f"{low}'s pods Running", args.timeout)
    chief: Chief | None = None
    chief_task: asyncio.Task[None] | None = None
    result: dict[str, Any] = {"phase": phase.name, "repeat": repeat}
    try:
        if phase.checkpoint:
            chief, chief_task = await start_chief(api, tl, low, phase.answers, ctx.root)
        await asyncio.sleep(1.0)  # the low job's own writes (PodsReady, status) settle
        expect_marks(tl, phase, low, high, pods)
        path, doc = job_manifest(phase, ns, high, "high", args.workers, None)
        cpu0 = cpu_snapshot(ctx.cluster.plane, ctx.operator)
        t0 = time.perf_counter()
        await api.create(path, doc)
        result["create_seconds"] = round(time.perf_counter() - t0, 4)
        await tl.until_mark("high_running", args.timeout + (timeout or 0))
        result["cpu"] = cpu_diff(cpu_snapshot(ctx.cluster.plane, ctx.operator), cpu0)
        if phase.checkpoint and "settled" not in tl.marks:
            await tl.until_mark("settled", 10)
        result["marks"] = {k: round(tl.marks[k] - t0, 4) for k in MARKS if k in tl.marks}
        missing = [k for k in MARKS if k not in tl.marks and (phase.checkpoint or k not in (
            "requested", "chief_asked", "acked", "settled")) and (phase.answers or k not in (
                "chief_asked", "acked"))]
        if missing:
            result["missing_marks"] = missing
        if chief is not None:
            result["chief"] = {"answers": chief.answers, "accepted": chief.accepted,
                               "answer_seconds": chief.answer_seconds,
                               "reports_accepted": chief.reporter.sent}
        status = (tl.job(low) or {}).get("status") or {}
        if phase.checkpoint:
            result["checkpoint_request"] = status.get("checkpointRequest")
            result["last_checkpoint"] = status.get("lastCheckpoint")
        m = result["marks"]
        log(f"{phase.name} #{repeat}: high Running {m['high_running']:.2f}s after its "
            f"creation (Evicted at {m.get('evicted', float('nan')):.2f}s); "
            + ", ".join(f"{k} {v:.2f}" for k, v in breakdown(m).items()))
        return result
    finally:
        if chief_task is not None:
            chief_task.cancel()
            await asyncio.gather(chief_task, return_exceptions=True)
        if chief is not None:
            await asyncio.to_thread(chief.reporter.close, 0.5)
        await clean(api, tl, phase, (low, high), args.timeout)


async def clean(api: Api, tl: Timeline, phase: Phase, jobs: Sequence[str],
                timeout: float) -> None:
    """Both jobs deleted (the low one first, so it is not admitted again meanwhile), then
    their pods and Workloads awaited gone."""
    for name in jobs:
        path = (f"/apis/batch/v1/namespaces/{tl.namespace}/jobs/{name}" if phase.batch
                else tfjob_path(tl.namespace, name))
        with contextlib.suppress(Exception):
            await api.request("DELETE", path, {"propagationPolicy": "Background"})
    await tl.until(lambda: not any(tl.pods_of(j) or tl.workload_of(j) for j in jobs),
                   f"{', '.join(jobs)}: pods and Workloads gone", timeout)


# The run ------------------------------------------------------------------------------------


@dataclass
class Context:
    args: argparse.Namespace
    cluster: Cluster
    api: Api
    root: Path
    timelines: dict[str, Timeline] = field(default_factory=dict)
    operator: OperatorProcess | None = None


def setup_queues(cluster: Cluster, namespaces: Mapping[str, str], pods: int) -> None:
    """The flavor, the priority classes, and per phase a ClusterQueue fitting one job."""
    plane = cluster.plane
    create_resource_flavor(plane, FLAVOR)
    for name, value in PRIORITIES.items():
        create_workload_priority_class(plane, name, value)
    for phase, ns in namespaces.items():
        create_cluster_queue(plane, f"cq-{phase}",
                             quotas={FLAVOR: {"cpu": f"{pods * POD_CPU_MILLI}m"}},
                             preemption={"withinClusterQueue": "LowerPriority"})
        create_local_queue(plane, ns, "queue", f"cq-{phase}")


def operator_command(args: argparse.Namespace, extra_namespaces: Sequence[str],
                     port: int) -> str:
    return (str(args.operator_cmd) + "".join(f" --namespace {ns}" for ns in extra_namespaces)
            + f" --progress-listen 127.0.0.1:{port}"
            + f" --progress-url http://127.0.0.1:{port}/v1/progress"
            + f" --progress-interval {args.progress_interval:g}")


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    phases: list[Phase] = args.phase_list
    cluster = Cluster.start(root / "cluster", nodes=args.nodes, node_pods=110, audit=False)
    kueue: Kueue | None = None
    api: Api | None = None
    ctx: Context | None = None
    try:
        kueue = Kueue.start(cluster.plane, KueueOptions(frameworks=("batch/job",)))
        log(f"kueue ready in {kueue.timings.get('ready', 0):.1f}s")
        api = Api(cluster.plane, pool=32)
        ctx = Context(args, cluster, api, root)
        namespaces = {p.name: f"pre-{p.name}" for p in phases}
        for ns in namespaces.values():
            await api.ensure_namespace(ns)
        setup_queues(cluster, namespaces, 1 + args.workers)
        tf_namespaces = [namespaces[p.name] for p in phases if not p.batch]
        if tf_namespaces:
            command = operator_command(args, tf_namespaces[1:], free_ports(1)[0])
            ctx.operator = OperatorProcess(command, kubeconfig=cluster.plane.kubeconfig,
                                           namespace=tf_namespaces[0], concurrency=16,
                                           log_path=root / "operator.log")
            await ctx.operator.start()
        for p in phases:
            tl = ctx.timelines[p.name] = Timeline(api, namespaces[p.name],
                                                  BATCH_JOBS if p.batch else TFJOBS)
            tl.start()
            await tl.synced.wait()
        for ns in tf_namespaces:  # a token is bound to a pod of this ServiceAccount
            await wait_service_account(api, ns, args.timeout)
        cpu0 = cpu_snapshot(cluster.plane, ctx.operator)
        scenarios = []
        for r in range(args.repeats):
            order = phases if r % 2 == 0 else list(reversed(phases))
            log(f"=== repeat {r + 1}/{args.repeats}: {', '.join(p.name for p in order)}")
            for phase in order:
                scenarios.append(await scenario(ctx, phase, r))
        cpu = cpu_diff(cpu_snapshot(cluster.plane, ctx.operator), cpu0)
        if ctx.operator is not None and ctx.operator.proc is not None and \
                ctx.operator.proc.poll() is not None:
            raise RuntimeError(f"the operator exited:\n{ctx.operator.log_tail()}")
        return {"scenarios": scenarios, "cpu_whole_run": cpu,
                "operator_command": " ".join(ctx.operator.argv) if ctx.operator else None,
                "operator_log_problems": operator_problems(root / "operator.log")}
    finally:
        if ctx is not None:
            for tl in ctx.timelines.values():
                await tl.stop()
            if ctx.operator is not None:
                await ctx.operator.stop()
                ctx.operator.kill_now()
        if api is not None:
            await api.close()
        if kueue is not None:
            kueue.stop()
        cluster.stop()


async def wait_service_account(api: Api, ns: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            await api.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}: no default ServiceAccount after {timeout:.0f}s")
        await asyncio.sleep(0.5)


def operator_problems(path: Path) -> list[str]:
    """The operator log's lines at warning level or worse that are not expected here
    (at most 20)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[:300] for line in lines if any(w in line for w in (
        "ERROR", "Traceback", "CRITICAL"))][:20]


def print_summary(summary: Mapping[str, Any], args: argparse.Namespace) -> None:
    def f(st: Mapping[str, float]) -> str:
        return f"{st['median']:.2f} ({st['min']:.2f}-{st['max']:.2f})"

    print(f"\npreemption: low job of {1 + args.workers} pods preempted by a high one, "
          f"{args.repeats} repeat(s), checkpointTimeoutSeconds {args.checkpoint_timeout} "
          "(seconds: median (min-max))")
    for phase, s in summary.items():
        print(f"{phase}:")
        print(f"  created -> high pods Running   {f(s['preemption_to_high_running'])}")
        print(f"  Evicted -> high pods Running   {f(s['evicted_to_high_running'])}")
        for name, st in s["steps"].items():
            print(f"    {name:58s} {f(st)}")
        if "chief_answer_seconds" in s:
            print(f"  the bench's own checkpoint_saved call {f(s['chief_answer_seconds'])}")


async def amain(args: argparse.Namespace) -> int:
    with workdir("preemption", args.workdir) as root:
        info = machine()
        t = time.monotonic()
        measured = await run(args, root)
        summary = summarize(measured["scenarios"])
        print_summary(summary, args)
        write_result("preemption", {
            "machine": info, "loadavg_at_end": list(os.getloadavg()),
            "seconds": round(time.monotonic() - t, 1),
            "args": {k: v for k, v in vars(args).items() if k != "phase_list"},
            "summary": summary, **measured}, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    install_signal_handlers()
    return asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
