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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainjobs.core.checkpoint import CheckpointDesk, CheckpointRequest, SavedCheckpoint
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
    # When each replica (pod name) last reported: what the stall rule names the quietest by.
    last_reports: Mapping[str, datetime] = field(default_factory=dict)


@dataclass
class _Entry:
    board: ProgressBoard
    job_key: str
    last_report: datetime
    last_progress: datetime


class ProgressStore:
    """Reports by job uid, and the checkpoint requests the checkpoint gate hands out (one
    `CheckpointDesk` per job that has one pending). Only the event loop's thread calls it
    (no lock)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, max_jobs: int = DEFAULT_MAX_JOBS) -> None:
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self.clock = clock
        self.max_jobs = max_jobs
        self.evicted = 0
        self._jobs: OrderedDict[str, _Entry] = OrderedDict()  # least recently reported first
        self._desks: dict[str, CheckpointDesk] = {}  # job uid -> its checkpoint request
        self._on_report: Callable[[str, bool], None] | None = None

    @property
    def active(self) -> bool:
        """Whether this process applies reports (it is the leader and its controller runs)."""
        return self._on_report is not None

    def activate(self, on_report: Callable[[str, bool], None]) -> None:
        """Start applying reports; `on_report(job_key, answered)` follows every accepted
        one (`answered`: it acknowledged the job's checkpoint request)."""
        self._on_report = on_report

    def deactivate(self) -> None:
        """Stop applying reports and drop what was kept (a later leader rebuilds it, and
        its checkpoint gate hands the pending requests out again from the jobs' status)."""
        self._on_report = None
        self._jobs.clear()
        self._desks.clear()

    def __len__(self) -> int:
        return len(self._jobs)

    def apply(self, report: ProgressReport, job_key: str) -> dict[str, int] | None:
        """Apply `report` for the job `job_key` (the controller's key of the job whose uid
        the report names), or raise core's `ReportRefused` and change nothing. Returns the
        checkpoint request to put in the reply (None: none is asked of that replica)."""
        if self._on_report is None:
            raise ReportRefused(503, "not the leader: this operator replica is a standby")
        now = self.clock.now()
        desk = self._desks.get(report.uid)
        if report.checkpoint is not None:
            if desk is None:
                raise ReportRefused(409, f"checkpoint {report.checkpoint.id} was not asked for "
                                         "or is answered already (no checkpoint is outstanding)")
            desk.check(report)  # before anything changes: a refusal changes nothing
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
        answered = desk is not None and desk.accept(report, now) is not None
        self._on_report(job_key, answered)
        return desk.ask_for(report) if desk is not None else None

    def ask(self, uid: str, request: CheckpointRequest) -> None:
        """Hand `request` out to its replica in the replies to its reports (the same request
        again changes nothing: its answer, if received, is kept)."""
        desk = self._desks.get(uid)
        if desk is not None and desk.pending == request:
            return
        if desk is not None and desk.saved is not None and desk.saved.id == request.id:
            return  # answered already; the gate has not seen the status say so yet
        desk = self._desks.setdefault(uid, CheckpointDesk())
        desk.pending = request

    def stop_asking(self, uid: str) -> None:
        """The job's request is over (answered, timed out, or gone): its desk goes, and a
        late answer is refused."""
        self._desks.pop(uid, None)

    def saved(self, uid: str) -> SavedCheckpoint | None:
        """The newest acknowledgement received for the job's request, if any."""
        desk = self._desks.get(uid)
        return desk.saved if desk is not None else None

    def reports_from(self, uid: str, replica: str) -> bool:
        """Whether `replica` (a pod name) of the job has reported to this process."""
        entry = self._jobs.get(uid)
        return entry is not None and replica in entry.board.replicas

    def snapshot(self, uid: str) -> StoredProgress | None:
        """The job's progress, or None before any report (or after `forget`)."""
        entry = self._jobs.get(uid)
        if entry is None:
            return None
        view = entry.board.view()
        if view is None:  # (an entry exists only after an accepted report)
            return None
        replicas = entry.board.replicas
        newest = max(r.at for r in replicas.values())
        reports = {name: entry.last_report - timedelta(seconds=newest - r.at)
                   for name, r in replicas.items()}
        return StoredProgress(view, entry.last_report, entry.last_progress, reports)

    def forget(self, uid: str) -> None:
        """Drop a job's reports (it was deleted, or replaced by a new job of its name)."""
        self._jobs.pop(uid, None)
        self._desks.pop(uid, None)
