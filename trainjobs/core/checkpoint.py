"""Checkpoint, then stop (issue 38): the request a job's checkpointing replica is asked on the
progress channel, and the acknowledgement it answers with.

Why in core and pure: `trainjobs run` and the operator (its progress store, one desk per job
with a request pending) ask the same way, so a stale or foreign acknowledgement is refused by
the same rules everywhere. Nothing here does I/O or reads a clock (times are passed in).

The request travels in the reply to the checkpointing replica's reports (`{"checkpoint":
{"id": N}}`) until that replica acknowledges it with a report carrying `{"checkpoint": {"id":
N, "step": S, "uri": U}}`. Only one request is outstanding at a time; ids grow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from trainjobs.core.progress import ProgressReport, ReportRefused

__all__ = ["CheckpointDesk", "CheckpointRequest", "SavedCheckpoint"]


@dataclass(frozen=True)
class CheckpointRequest:
    """Asked of `replica` (its pod name) in `attempt` of the job."""

    id: int
    replica: str
    attempt: int


@dataclass(frozen=True)
class SavedCheckpoint:
    """What the replica said it saved, and when the receiver heard it (UTC)."""

    id: int
    step: int
    uri: str
    attempt: int
    replica: str
    at: datetime


class CheckpointDesk:
    """One job's checkpoint request and its answer."""

    def __init__(self) -> None:
        self.pending: CheckpointRequest | None = None
        self.saved: SavedCheckpoint | None = None
        self._last_id = 0

    def request(self, replica: str, attempt: int) -> CheckpointRequest:
        """Ask `replica` to save (replacing any request not yet answered)."""
        self._last_id += 1
        self.pending = CheckpointRequest(self._last_id, replica, attempt)
        return self.pending

    def cancel(self) -> None:
        """Stop asking (the wait is over)."""
        self.pending = None

    def ask_for(self, report: ProgressReport) -> dict[str, int] | None:
        """The request to put in the reply to `report`: only to the replica asked, in the
        attempt asked, while unanswered."""
        asked = self.pending
        if asked is None or report.replica != asked.replica or report.attempt != asked.attempt:
            return None
        return {"id": asked.id}

    def check(self, report: ProgressReport) -> None:
        """Refuse (409) an acknowledgement that does not answer the outstanding request: an
        unknown id, another replica, another attempt (the job's own identity is the board's
        check)."""
        ack = report.checkpoint
        if ack is None:
            return
        asked = self.pending
        if asked is None or ack.id != asked.id:
            now = f"checkpoint {asked.id} is" if asked else "no checkpoint is"
            raise ReportRefused(409, f"checkpoint {ack.id} was not asked for or is answered "
                                     f"already ({now} outstanding)")
        if report.attempt != asked.attempt:
            raise ReportRefused(409, f"checkpoint {ack.id} was asked of attempt "
                                     f"{asked.attempt}, not attempt {report.attempt}")
        if report.replica != asked.replica:
            raise ReportRefused(409, f"checkpoint {ack.id} was asked of {asked.replica}, not "
                                     f"{report.replica}")

    def accept(self, report: ProgressReport, now: datetime) -> SavedCheckpoint | None:
        """Record the acknowledgement in `report` (after `check`), ending the request."""
        ack, asked = report.checkpoint, self.pending
        if ack is None or asked is None:
            return None
        self.saved = SavedCheckpoint(ack.id, ack.step, ack.uri, report.attempt, report.replica,
                                     now)
        self.pending = None
        return self.saved
