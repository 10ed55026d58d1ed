"""Following a job on the cluster live, as `trainjobs run` shows a local one: state changes,
per-replica counts (running, pending and why, succeeded, failed), the job's and its pods'
events, then a summary.

Why three watches merged into one loop: the job's status says what the operator decided, the
pods say why replicas wait (unschedulable, pulling an image), the events say what happened in
between; each arrives on its own stream and one display orders them. On a terminal the counts
are one line redrawn in place, led by a bar of the program's reported progress
(`status.progress`); otherwise (CI logs, pipes) each change is a plain line.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TextIO

from trainjobs.api.models import Job, ProgressStatus
from trainjobs.client.aio import FINISHED, AsyncClient, finish_message, owned_by
from trainjobs.client.errors import WaitTimeout
from trainjobs.client.progress_text import progress_bar, progress_plain
from trainjobs.client.views import JobEvent, PodInfo, progress, replica_names
from trainjobs.core.render import LABEL_JOB_NAME
from trainjobs.kube import EVENTS, PODS
from trainjobs.local.output import Console, ReplicaSummary

__all__ = ["Display", "follow"]


class Display:
    """Writes what `follow` sees. `live`: redraw the counts in place (a terminal)."""

    def __init__(self, stream: TextIO, live: bool | None = None,
                 colour: bool | None = None) -> None:
        self.console = Console(stream, colour)
        self.stream = stream
        is_tty = hasattr(stream, "isatty") and stream.isatty()
        self.live = is_tty if live is None else live
        self._progress = ""
        self._bar = ""  # the program's progress, leading the live line
        self._reported = ""  # the last plain progress line written
        self._shown = False

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self._shown = False

    def note(self, text: str) -> None:
        self._clear()
        self.console.note(text)
        self._redraw()

    def progress(self, text: str) -> None:
        if text == self._progress:
            return
        self._progress = text
        if self.live:
            self._clear()
            self._redraw()
        else:
            self.console.note(text)

    def job_progress(self, progress: ProgressStatus | None) -> None:
        """The program's reported progress: a bar leading the live line on a terminal, a
        plain line each time it changes otherwise."""
        if progress is None:
            return
        if self.live:
            bar = progress_bar(progress)
            if bar != self._bar:
                self._bar = bar
                self._clear()
                self._redraw()
            return
        line = f"progress: {progress_plain(progress)}"
        if line != self._reported:
            self._reported = line
            self.console.note(line)

    def _redraw(self) -> None:
        line = " | ".join(t for t in (self._bar, self._progress) if t)
        if self.live and line:
            self.stream.write(line[:200])
            self.stream.flush()
            self._shown = True

    def summary(self, job: Job, seconds: float, pods: list[PodInfo], hint: str) -> None:
        self._clear()
        self._progress = self._bar = ""
        replicas = [ReplicaSummary(p.replica, p.phase, p.exit_code, p.restarts)
                    for p in sorted(pods, key=lambda p: (p.replica_type, p.index or 0))
                    if p.index is not None]
        self.console.summary(f"{job.kind} {job.name}", job.status.state, seconds,
                             finish_message(job), replicas, hint)


@dataclass
class _Seen:
    job: Job
    pods: dict[str, PodInfo]  # by uid; a deleted pod stays with its last state (summary)
    gone: set[str]
    events: set[tuple[str, int]]


async def follow(client: AsyncClient, job: Job, display: Display,
                 timeout: float | None = None) -> Job:
    """Show the job until it Succeeded or Failed; returns its last version. Raises
    `WaitTimeout` after `timeout` seconds (the job is left as it is)."""
    started = time.monotonic()
    seen = _Seen(job, {}, set(), set())
    queue: asyncio.Queue[tuple[str, str, dict[str, Any]] | Job | BaseException] = \
        asyncio.Queue()
    names = replica_names(job)

    async def pump(source: str, stream: AsyncIterator[tuple[str, dict[str, Any]]]) -> None:
        try:
            async for change, obj in stream:
                await queue.put((source, change, obj))
        except BaseException as exc:  # reported by the loop below
            await queue.put(exc)
            raise

    async def jobs() -> None:
        try:
            async for version in client.watch(job.name, job.kind, job.namespace):
                await queue.put(version)
        except BaseException as exc:
            await queue.put(exc)
            raise

    tasks = [
        asyncio.create_task(jobs()),
        asyncio.create_task(pump("pod", client.watch_objects(
            PODS, job.namespace, label_selector=f"{LABEL_JOB_NAME}={job.name}"))),
        asyncio.create_task(pump("event", client.watch_objects(EVENTS, job.namespace))),
    ]
    state: str | None = None
    deadline = None if timeout is None else started + timeout
    try:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeout(f"{job.kind} {job.name} is {seen.job.status.state or 'new'} "
                                  f"after {timeout:g}s", seen.job)
            try:
                item = await asyncio.wait_for(queue.get(), left)
            except TimeoutError:
                continue
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, Job):
                seen.job = item
            else:
                _apply(seen, item, names, display)
            if seen.job.status.state != state:
                state = seen.job.status.state
                message = finish_message(seen.job)
                display.note(f"{state or 'Created'}" + (f": {message}" if message else ""))
            current = [p for uid, p in seen.pods.items() if uid not in seen.gone]
            display.job_progress(seen.job.status.progress)
            display.progress("; ".join(r.describe() for r in progress(seen.job, current)))
            if state in FINISHED:
                display.summary(seen.job, time.monotonic() - started,
                                list(seen.pods.values()),
                                f"trainjobs logs {seen.job.name} -n {seen.job.namespace}")
                return seen.job
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def _apply(seen: _Seen, item: tuple[str, str, dict[str, Any]], names: dict[str, str],
           display: Display) -> None:
    source, change, obj = item
    if source == "pod":
        if not owned_by(obj, seen.job):
            return
        pod = PodInfo.from_api(obj, names)
        seen.pods[pod.uid] = pod
        if change == "DELETED":
            seen.gone.add(pod.uid)
        return
    involved = obj.get("involvedObject") or {}
    # A pod's first events (Scheduled) may come before the pod itself: its name tells.
    ours = (involved.get("uid") == seen.job.metadata.uid or involved.get("uid") in seen.pods
            or (involved.get("kind") == "Pod"
                and str(involved.get("name", "")).startswith(f"{seen.job.name}-")))
    if not ours:
        return
    event = JobEvent.from_api(obj)
    born = seen.job.metadata.creation_timestamp
    if event.time is not None and born is not None and event.time < born:
        return  # about an older job of the same name
    key = (event.uid, event.count)
    if key in seen.events:
        return
    seen.events.add(key)
    display.note(f"{event.type} {event.reason} {event.object}: {event.message}")
