"""`trainjobs run`: the embedded local runtime. Each replica is a process on this machine.

Why it exists: to run the very job YAML a user will `kubectl apply`, before there is a cluster,
through the same plugins and the same reconcile planner as the operator, so restart policies,
backoffLimit, the deadline and success rules behave identically. The loop is the operator's
loop in miniature: observe processes, `plan`, act, repeat on every change.

Local differences, all documented in docs/local.md: addresses are 127.0.0.1 with free ports,
the image is ignored (commands run from PATH, relative paths from the job file's directory),
Services are only names, Pods among a plugin's extra objects run as processes (the managed
Redis), other extra objects are skipped with a note, and every process is stopped when the job
ends whatever cleanPodPolicy says (nothing may outlive the command).

Progress (docs/progress.md): a receiver on 127.0.0.1 takes the replicas' reports; every
replica gets the progress environment and the `trainjobs_progress` library on its PYTHONPATH,
and the console shows the job's progress live.

Checkpoint, then stop (issue 38, docs/local.md): with `runPolicy.checkpointTimeoutSeconds`,
the first Ctrl-C/SIGTERM asks the kind's checkpointing replica to save (through the
receiver's replies) and waits for its answer within the bound before stopping every process;
the answer is kept in the run directory's checkpoint.json, which `--resume` hands to the next
run (trainjobs/local/checkpoint.py).

Fault injection (`--inject`, issue 39): an injector (trainjobs/local/injector.py) watches the
processes beside the loop and kills, stops or makes them exit when asked; the loop sees the
result as it would see any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shutil
import socket
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from trainjobs.api.models import ConditionType, Job
from trainjobs.core.checkpoint import SavedCheckpoint
from trainjobs.core.observed import PodPhase
from trainjobs.core.planner import KindRules, Plan, PlanInputs, ProgressSeen, plan
from trainjobs.core.progress import ProgressBoard
from trainjobs.core.render import RenderedJob, expected_replicas, render_job
from trainjobs.core.status import current_condition, is_finished
from trainjobs.core.validation import load_job_file
from trainjobs.errors import ProgramMissing, SpecError, SpecInvalid, TrainjobsError
from trainjobs.local.checkpoint import ResumePoint, find_resume, resume_command, write_checkpoint
from trainjobs.local.ignored import ignored_fields_note
from trainjobs.local.inject import Trigger, arm, parse_injection
from trainjobs.local.injector import Injector, report_interval
from trainjobs.local.output import Console, ReplicaSummary
from trainjobs.local.process import ProcessSpec, ReplicaProcess, process_spec
from trainjobs.local.receiver import LOCAL_INTERVAL, ProgressReceiver
from trainjobs.local.supervise import supervise
from trainjobs.plugin.manager import PluginManager, load_plugins
from trainjobs.plugin.types import Address, ClusterLayout, Framework
from trainjobs.yamlio import describe, ignored_note

__all__ = ["LocalRun", "free_port", "progress_library", "run_file"]

LOCAL_NAMESPACE = "local"
# How to get the programs the local runtime itself runs (not the jobs' own).
INSTALL_HINTS = {
    "redis-server": "install it with `make redis` (scripts/ensure-redis.sh, from a clone of "
                    "trainjobs) or the Debian/Ubuntu package redis-server (apt-get install "
                    "redis-server), or give the job a spec.backend.redisHost",
}


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks it; it stays free until someone binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def local_layout(job: Job) -> ClusterLayout:
    ports: dict[str, Address] = {}

    def allocate(component: str, _default_port: int) -> Address:
        if component not in ports:
            ports[component] = Address("127.0.0.1", free_port())
        return ports[component]

    return ClusterLayout({r: Address("127.0.0.1", free_port()) for r in expected_replicas(job)},
                         job_name=job.name, allocate=allocate)


def _library_source() -> Path | None:
    """The `trainjobs_progress` package: installed next to trainjobs, or in this clone."""
    spec = importlib.util.find_spec("trainjobs_progress")
    if spec is not None and spec.origin:
        return Path(spec.origin).parent
    clone = Path(__file__).resolve().parents[2] / "progress" / "src" / "trainjobs_progress"
    return clone if (clone / "__init__.py").is_file() else None


def progress_library(run_dir: Path) -> Path | None:
    """A folder holding a copy of `trainjobs_progress` (stdlib only, a few kB) for the
    replicas' PYTHONPATH, or None if trainjobs cannot find the library.

    Why a copy: the replicas run in the framework's environment, not trainjobs'; putting the
    folder trainjobs imports from on their path could bring all of trainjobs' dependencies
    with it (site-packages), and the copy is the version that speaks this receiver's format."""
    source = _library_source()
    if source is None:
        return None
    target = run_dir / "python"
    shutil.copytree(source, target / "trainjobs_progress", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _with_env(spec: ProcessSpec, extra: dict[str, str]) -> ProcessSpec:
    """`extra` added to the process's environment (after the template's own)."""
    return replace(spec, env={**spec.env, **extra}) if extra else spec


def _with_pythonpath(spec: ProcessSpec, folder: Path) -> ProcessSpec:
    """`folder` after the PYTHONPATH the replica would have had (the template's, else ours)."""
    current = spec.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    value = os.pathsep.join(p for p in (current, str(folder)) if p)
    return replace(spec, env={**spec.env, "PYTHONPATH": value})


class LocalRun:
    """Runs one job to completion."""

    def __init__(self, job: Job, framework: Framework, plugins: PluginManager,
                 base_dir: Path, log_dir: Path, console: Console,
                 resume: ResumePoint | None = None, injections: Sequence[Trigger] = ()) -> None:
        self.job = job
        self.resume = resume
        self.saved: SavedCheckpoint | None = None
        self.checkpoint_saved = asyncio.Event()
        self.framework = framework
        self.plugins = plugins
        self.base_dir = base_dir
        self.log_dir = log_dir
        self.console = console
        self.layout = local_layout(job)
        self.processes: dict[str, ReplicaProcess] = {}
        self.components: dict[str, ReplicaProcess] = {}
        self.services: set[str] = set()
        self.extras: set[str] = set()
        self.history: dict[str, ReplicaSummary] = {}
        self.recreations: Counter[str] = Counter()
        self.resume_hint = ""  # the command that resumes from a checkpoint this run saves
        self._wake = asyncio.Event()
        self.board = ProgressBoard(job.namespace, job.name, job.metadata.uid or "")
        self.receiver = ProgressReceiver(self.board, self._on_report,
                                         interval=report_interval(injections, LOCAL_INTERVAL),
                                         on_checkpoint=self._on_checkpoint)
        self.injector = Injector(injections, console.note, log_dir, self.receiver.clock)
        try:
            self._prepare()
        except BaseException:
            self.receiver.sock.close()  # bound already; nothing will serve it
            raise

    def _prepare(self) -> None:
        """Render the job and check every process can start (before anything does)."""
        self.library = progress_library(self.log_dir)
        self.desired: RenderedJob = render_job(self.job, self.framework, self.plugins,
                                               backend="local", layout=self.layout,
                                               progress=self.receiver.endpoint)
        self._specs = self._process_specs()
        self._component_specs = self._extra_specs()

    def _extra_specs(self) -> dict[str, ProcessSpec]:
        """The processes of the Pods among the extra objects (the managed Redis), checked
        before anything starts: a missing program is said at once, with how to get it."""
        specs: dict[str, ProcessSpec] = {}
        for obj in self.desired.extras:
            if obj["kind"] != "Pod":
                continue
            key = f"{obj['kind']}/{obj['metadata']['name']}"
            result = process_spec(obj, obj["spec"]["containers"][0]["name"], self.base_dir, key)
            if isinstance(result, SpecError):
                program = obj["spec"]["containers"][0]["command"][0]
                if program in INSTALL_HINTS:
                    raise ProgramMissing(f"cannot run {key} locally: {program!r} is not on "
                                         f"PATH; {INSTALL_HINTS[program]}")
                raise TrainjobsError(f"cannot run {key} locally: {result.message}")
            specs[key] = replace(result, restart_policy="Never")
        return specs

    def _process_specs(self) -> dict[str, ProcessSpec]:
        specs: dict[str, ProcessSpec] = {}
        errors: list[SpecError] = []
        for name, pod in self.desired.pods.items():
            replica = self.desired.replicas[name]
            path = f"spec.replicaSpecs.{replica.type}.template"
            result = process_spec(pod, self.framework.container_name, self.base_dir, path)
            if isinstance(result, SpecError):
                errors.append(result)
            else:
                result = _with_env(result, self.resume.env() if self.resume else {})
                result = self.injector.wrap(name, result)
                specs[name] = result if self.library is None else \
                    _with_pythonpath(result, self.library)
        if errors:
            raise SpecInvalid(sorted(set(errors)), "cannot run locally")
        return specs

    def wake(self) -> None:
        self._wake.set()

    def _on_report(self) -> None:
        view = self.board.view()
        if view is not None:
            self.console.progress(view)

    def checkpoint_target(self) -> tuple[str, int] | None:
        """The running process to ask for a checkpoint before stopping, and the seconds to
        wait for it; None when the job sets no bound, its kind names no replica, or that
        replica's process is not running (then everything stops at once, as before)."""
        seconds = self.job.spec.run_policy.checkpoint_timeout_seconds
        if seconds is None:
            return None
        wanted = self.plugins.checkpoint_replica(self.job, self.framework)
        name = next((n for n, r in self.desired.replicas.items() if r == wanted), None)
        proc = self.processes.get(name) if name is not None else None
        if proc is None or proc.phase is not PodPhase.RUNNING:
            return None
        return proc.name, seconds

    def _on_checkpoint(self, saved: SavedCheckpoint) -> None:
        path = write_checkpoint(self.log_dir, saved, self.job.name, self.job.metadata.uid or "")
        self.saved = saved
        self.console.note(f"checkpoint saved by {saved.replica} at step {saved.step}: "
                          f"{saved.uri} (recorded in {path})")
        self.checkpoint_saved.set()

    def progress_seen(self) -> ProgressSeen | None:
        """What the replicas reported, as the stall rule reads it (wall-clock times from the
        receiver's monotonic ones)."""
        view = self.board.view()
        if view is None or self.board.last_advance is None:
            return None
        now_wall, now = datetime.now(UTC), self.receiver.clock.monotonic()

        def wall(at: float) -> datetime:
            return now_wall - timedelta(seconds=max(now - at, 0.0))

        return ProgressSeen(last_progress=wall(self.board.last_advance), step=view.step,
                            replica=view.replica,
                            last_reports={name: wall(r.at)
                                          for name, r in self.board.replicas.items()})

    async def run(self) -> Job:
        """Reconcile until the job has finished and every process is stopped; the progress
        receiver serves meanwhile."""
        await self.receiver.start()
        injecting = asyncio.get_running_loop().create_task(self.injector.watch(
            lambda: self.processes, self.recreations, self.board), name="inject") \
            if self.injector.triggers else None
        try:
            return await self._reconcile()
        finally:
            if injecting is not None:
                injecting.cancel()
                await asyncio.gather(injecting, return_exceptions=True)
                for line in self.injector.unfired():
                    self.console.note(line)
            await self.receiver.stop()

    async def _reconcile(self) -> Job:
        self.console.register(self.desired.pods)
        last_state, last_summary = "", ""
        while True:
            pods = [p.observed() for p in self.processes.values()]
            decision = plan(self.job, self.desired,
                            PlanInputs(pods, self.services, self.extras,
                                       progress=self.progress_seen(), now=datetime.now(UTC)),
                            lambda outcomes: self.plugins.job_succeeded(
                                self.job, self.framework, outcomes),
                            kind=KindRules(self.framework.replicas_restart_together,
                                           self.framework.suspend_style))
            for event in decision.events:
                self.console.note(f"{event.reason}: {event.message}")
            attempt = self.job.status.attempt
            self.job = self.job.model_copy(update={"status": decision.status})
            if decision.status.attempt != attempt:
                # A new attempt's replicas get a new environment (Caffe2's RUN_ID).
                self.desired = render_job(self.job, self.framework, self.plugins,
                                          backend="local", layout=self.layout,
                                          progress=self.receiver.endpoint)
                self._specs = self._process_specs()
            state = decision.status.state
            summary = decision.status.replica_summary
            if (state, summary) != (last_state, last_summary):
                self.console.note(f"{state or 'Pending'}: {summary}")
                last_state, last_summary = state, summary
            await self._act(decision)
            if (is_finished(decision.status) or current_condition(decision.status) is
                    ConditionType.SUSPENDED) and not decision.delete_pods:
                await self.stop_all()
                return self.job
            self._wake.clear()
            timeout = 1.0 if decision.requeue_after is None else min(
                max(decision.requeue_after, 0.05), 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _act(self, decision: Plan) -> None:
        for name in decision.delete_pods:
            proc = self.processes.get(name)
            if proc is not None:
                self._remember(proc)
                await proc.stop()
                del self.processes[name]
        for svc in decision.create_services:
            self.services.add(svc["metadata"]["name"])
        for name in decision.delete_services:
            self.services.discard(name)
        for obj in decision.create_extras:
            self._start_extra(obj)
        for pod in decision.create_pods:
            name = pod["metadata"]["name"]
            if name in self.history:
                self.recreations[name] += 1
            proc = ReplicaProcess(name, pod, self._specs[name], self.log_dir / f"{name}.log",
                                  self.console.line, self.wake)
            self.processes[name] = proc
            proc.start()

    def _start_extra(self, obj: dict[str, Any]) -> None:
        key = f"{obj['kind']}/{obj['metadata']['name']}"
        self.extras.add(key)
        if obj["kind"] != "Pod":
            self.console.note(f"skipping {key}: the local runtime runs only pods")
            return
        name = obj["metadata"]["name"]
        self.console.register([name])
        proc = ReplicaProcess(name, obj, self._component_specs[key],
                              self.log_dir / f"{name}.log", self.console.line, self.wake)
        self.components[name] = proc
        proc.start()

    def _remember(self, proc: ReplicaProcess) -> None:
        """Record a replica as it is just before we stop it (a running one shows Stopped)."""
        state = "Stopped" if proc.phase in (PodPhase.RUNNING, PodPhase.PENDING) else \
            str(proc.phase)
        restarts = proc.restarts + self.recreations[proc.name]
        self.history[proc.name] = ReplicaSummary(proc.name, state, proc.exit_code, restarts)

    async def stop_all(self) -> None:
        everything = list(self.processes.values()) + list(self.components.values())
        for proc in everything:
            self._remember(proc)
        await asyncio.gather(*(p.stop() for p in everything))
        # A process stopped by us is reported as it was when we stopped it.

    def summaries(self) -> list[ReplicaSummary]:
        order = list(self.desired.pods)
        return [self.history[n] for n in order if n in self.history]


def run_file(path: Path, args: argparse.Namespace) -> int:
    """Run the job in `path`; returns the process exit code."""
    started = time.monotonic()  # the summary's duration covers start-up too
    injections = [parse_injection(text) for text in getattr(args, "inject", None) or []]
    plugins = load_plugins()
    loaded = load_job_file(path, plugins)
    if len(loaded.jobs) != 1:
        names = ", ".join(describe(j.to_api()) for j in loaded.jobs)
        raise SpecInvalid([SpecError("", f"expected one job, found {len(loaded.jobs)}: "
                                         f"{names}")], str(path))
    job = loaded.jobs[0]
    framework = plugins.framework_for(job.kind)
    assert framework is not None
    if job.spec.run_policy.suspend:
        raise SpecInvalid([SpecError("spec.runPolicy.suspend", "the job is suspended: nothing "
                                     "to run (set it to false)")], str(path))
    job = job.model_copy(update={"metadata": job.metadata.model_copy(
        update={"uid": str(uuid.uuid4()), "namespace": LOCAL_NAMESPACE})})
    triggers = arm(injections, job.name, expected_replicas(job))  # refused before any start
    resume = find_resume(Path(args.run_dir), job.name) if getattr(args, "resume", False) \
        else None
    log_dir = Path(args.run_dir) / f"{job.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    console = Console(colour=False if args.no_color else None)
    run = LocalRun(job, framework, plugins, path.resolve().parent, log_dir, console, resume,
                   triggers)
    run.resume_hint = resume_command(str(path), str(args.run_dir))
    console.note(f"running {job.kind} {job.name} locally ({len(run.desired.pods)} replicas; "
                 f"images are ignored); logs in {log_dir}")
    if loaded.ignored:
        console.note(ignored_note(loaded.ignored))
    fields = ignored_fields_note(job, framework)
    if fields:
        console.note(fields)
    if resume is not None:
        console.note(f"resuming from the checkpoint at step {resume.step}: {resume.uri} "
                     f"({resume.path}); every replica gets TRAINJOBS_CHECKPOINT_STEP and "
                     f"TRAINJOBS_CHECKPOINT_URI")
    for trigger in triggers:
        console.note(f"will inject: {trigger.injection.text} (on {trigger.pod})")
    if run.library is None:
        console.note("trainjobs_progress not found: replicas report progress only if their "
                     "environment has it (pip install ./progress from a clone of trainjobs)")
    return asyncio.run(supervise(run, started))
