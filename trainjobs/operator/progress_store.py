"""The leader's progress reports: one `ProgressBoard` per job, bounded, with report times.

Why in memory and only on the leader: progress is a state the replicas resend every few
seconds, so a restarted or newly elected leader rebuilds it from the next reports; nothing
needs to survive a process. A standby's store is inactive and refuses to apply (the server
answers 503, the client warns and drops that report), so a report is never applied by two
processes nor lost without the replica being told.

Bounded: at most `max_jobs` jobs (10,000 by default) are kept; a report for a new job past
that evicts the job idle longest (its next report starts it again). The controller also
`forget`s a job when it is deleted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from trainjobs.core.progress import JobProgress, ProgressBoard, ProgressReport, ReportRefused
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock

__all__ = ["DEFAULT_MAX_JOBS", "ProgressStore", "StoredProgress"]

DEFAULT_MAX_JOBS = 10_000


@dataclass(frozen=True)
class StoredProgress:
    """A job's progress as the gate reads it, with when it last heard and when training last
    moved (a replica's step went up, or a replica's process reported for the first time:
    `ProgressBoard.last_advance`, what the stall rule measures from); timezone-aware UTC."""

    view: JobProgress
    last_report: datetime
    last_progress: datetime


@dataclass
class _Entry:
    board: ProgressBoard
    job_key: str
    last_report: datetime
    last_progress: datetime


class ProgressStore:
    """Reports by job uid. Only the event loop's thread calls it (no lock)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, max_jobs: int = DEFAULT_MAX_JOBS) -> None:
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self.clock = clock
        self.max_jobs = max_jobs
        self.evicted = 0
        self._jobs: OrderedDict[str, _Entry] = OrderedDict()  # least recently reported first
        self._on_report: Callable[[str], None] | None = None

    @property
    def active(self) -> bool:
        """Whether this process applies reports (it is the leader and its controller runs)."""
        return self._on_report is not None

    def activate(self, on_report: Callable[[str], None]) -> None:
        """Start applying reports; `on_report(job_key)` follows every accepted one."""
        self._on_report = on_report

    def deactivate(self) -> None:
        """Stop applying reports and drop what was kept (a later leader rebuilds it)."""
        self._on_report = None
        self._jobs.clear()

    def __len__(self) -> int:
        return len(self._jobs)

    def apply(self, report: ProgressReport, job_key: str) -> None:
        """Apply `report` for the job `job_key` (the controller's key of the job whose uid
        the report names), or raise core's `ReportRefused` and change nothing."""
        if self._on_report is None:
            raise ReportRefused(503, "not the leader: this operator replica is a standby")
        now = self.clock.now()
        entry = self._jobs.get(report.uid)
        if entry is None:
            board = ProgressBoard(report.namespace, report.job, report.uid)
            board.apply(report, self.clock.monotonic())  # a refusal keeps nothing
            while len(self._jobs) >= self.max_jobs:
                self._jobs.popitem(last=False)
                self.evicted += 1
            self._jobs[report.uid] = _Entry(board, job_key, now, now)
        else:
            moved = entry.board.last_advance
            entry.board.apply(report, self.clock.monotonic())
            self._jobs.move_to_end(report.uid)
            entry.last_report, entry.job_key = now, job_key
            if entry.board.last_advance != moved:
                entry.last_progress = now
        self._on_report(job_key)

    def snapshot(self, uid: str) -> StoredProgress | None:
        """The job's progress, or None before any report (or after `forget`)."""
        entry = self._jobs.get(uid)
        if entry is None:
            return None
        view = entry.board.view()
        assert view is not None  # an entry exists only after an accepted report
        return StoredProgress(view, entry.last_report, entry.last_progress)

    def forget(self, uid: str) -> None:
        """Drop a job's reports (it was deleted, or replaced by a new job of its name)."""
        self._jobs.pop(uid, None)
