"""Writing a job's status: at once when it matters, coalesced when only counts changed, and
on a budget when only the training program's progress changed.

Why apart from the controller: it returns what it did (`StatusWrite`: the API server's
answer, or how long the change may still wait) and the controller decides what that means for
the job and its memory; the writer never calls back into the controller's event handlers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from trainjobs.api.models import Job, JobStatus
from trainjobs.core.status import must_write_now, progress_only
from trainjobs.kube import ApiError, ApiNotFound, Kube, Resource
from trainjobs.operator.cache import JobEntry, reduce_job
from trainjobs.operator.clock import Clock
from trainjobs.operator.memory import JobMemory
from trainjobs.operator.write_budget import WriteBudget
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Framework

__all__ = ["StatusWrite", "StatusWriter", "log_state_change", "state_change_line"]

log = logging.getLogger("trainjobs.operator.controller")  # (the state lines' logger, as ever)


@dataclass(frozen=True, slots=True)
class StatusWrite:
    """What `StatusWriter.write` did: `written`, the job as the API server answered the
    write (None: nothing written); `wait`, seconds the coalesced change may still wait
    before it must be written (None: it need not)."""

    written: JobEntry | None = None
    wait: float | None = None


class StatusWriter:
    """Writes jobs' statuses (one per controller)."""

    def __init__(self, kube: Kube, plugins: PluginManager, coalesce_seconds: float,
                 clock: Clock, progress_interval: float = 30.0,
                 progress_writes_per_second: float = 20.0) -> None:
        self.kube, self.plugins, self.clock = kube, plugins, clock
        self.coalesce_seconds = coalesce_seconds
        self.progress_interval = progress_interval
        self.progress_budget = WriteBudget(progress_writes_per_second, clock)

    async def write(self, mem: JobMemory, job: Job, framework: Framework, resource: Resource,
                    new: JobStatus) -> StatusWrite:
        """Write `new` unless it is the job's status already, or only counts changed and the
        coalescing wait is not over, or only the progress changed and its turn has not come."""
        old = job.status
        log_state_change(mem, job, new)
        if new == old:
            mem.pending_since = None
            return _NOTHING
        now = self.clock.monotonic()
        if progress_only(old, new):
            wait = self._progress_wait(mem, now)
            if wait > 0:
                return StatusWrite(wait=wait)
        else:
            urgent = must_write_now(old, new)
            # A change of counts only (or a new job's first status) goes out coalesce_seconds
            # after it was first seen, with whatever changed meanwhile: replicas that start
            # or end together cost one write, and a new job's first status already counts
            # the pods this reconcile creates.
            if mem.pending_since is None:
                mem.pending_since = now
            wait = self.coalesce_seconds - (now - mem.pending_since)
            if not urgent and wait > 0:
                return StatusWrite(wait=wait)
        body = new.to_api()
        self.plugins.adjust_status(job, framework, body)
        # A merge patch replaces what we send; fields we dropped must be sent as null.
        before = old.to_api()
        for field_name in before:
            body.setdefault(field_name, None)
        if isinstance(body.get("progress"), dict) and isinstance(before.get("progress"), dict):
            _null_dropped(before["progress"], body["progress"])
        try:
            updated = await self.kube.merge_patch_status(resource, job.namespace, job.name, body)
        except ApiNotFound:
            return _NOTHING
        except ApiError as exc:
            raise exc.temporary() from None
        mem.pending_since = None
        if new.progress != old.progress:  # written, on its turn or along with another change
            mem.progress_written_at, mem.progress_turn = now, None
        return StatusWrite(written=reduce_job(updated) if updated.get("metadata") else None)

    def _progress_wait(self, mem: JobMemory, now: float) -> float:
        """Seconds a change of progress alone must still wait: until the job's interval since
        its last progress write is over, then until the turn the budget gives it (taken once,
        kept across reconciles: a job asks the budget once per write)."""
        if mem.progress_turn is None:
            if mem.progress_written_at is not None:
                due = mem.progress_written_at + self.progress_interval
                if now < due:
                    return due - now
            mem.progress_turn = self.progress_budget.reserve()
        return mem.progress_turn - now


_NOTHING = StatusWrite()


def _null_dropped(old: dict[str, object], new: dict[str, object]) -> None:
    """Make `new` a merge patch over `old`: a key `old` has and `new` lacks is sent as null
    (the API server merges objects key by key: a metric no longer reported, or an ETA no
    longer known, would otherwise stay)."""
    for key, value in old.items():
        if key not in new:
            new[key] = None
        elif isinstance(value, dict) and isinstance(new[key], dict):
            _null_dropped(value, new[key])  # type: ignore[arg-type]


def state_change_line(job: Job, old: JobStatus, new: JobStatus, was: str | None = None) -> str:
    """The info line logged once per state a job enters, as written to the API server:
    `MxJob team-a/mnist: Failed (was Running): BackoffLimitExceeded: 7 restarts exceed ...`.
    What `kubectl logs deployment/...` shows of the jobs, one line each change."""
    cond = next((c for c in new.conditions if c.type.value == new.state and c.status == "True"),
                None)
    why = f": {cond.reason}: {cond.message}" if cond is not None else ""
    summary = f" [{new.replica_summary}]" if new.replica_summary else ""
    before = was or old.state or "new"
    return f"{job.kind} {job.key}: {new.state} (was {before}){why}{summary}"


def log_state_change(mem: JobMemory, job: Job, new: JobStatus) -> None:
    """One info line per state the job enters, when it is decided (a coalesced status write
    may carry Created and Running together: both are logged). The state is remembered only
    while the decided state is ahead of the cache."""
    old = job.status
    if new.state and new.state != (mem.logged_state or old.state):
        log.info("%s", state_change_line(job, old, new, mem.logged_state))
        mem.logged_state = new.state
    if new.state == old.state:
        mem.logged_state = None
