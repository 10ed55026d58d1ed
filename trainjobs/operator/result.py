"""What one reconcile of a job asks of the work queue: controller-runtime's `reconcile.Result`.

Why a value: the reconcile decides when its job must be looked at again (a status write
coalesced for a second, a quota's back-off, a deadline, a gate's retry, a large job's batch
period) and returns it; one switch (`Controller._requeue`) turns it into work-queue calls. No
other code writes the queue for a job, so "why did this job run again" has one answer.
Errors stay exceptions (`TemporaryError`, `PermanentError`), as controller-runtime returns an
error beside its Result: they back off whatever the Result said.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DONE", "Result"]


@dataclass(frozen=True, slots=True)
class Result:
    """`requeue_after`: look again in that many seconds (0: as soon as this pass ends), None:
    not unless an event asks. `backoff`: look again after the job's growing back-off, as for
    an error, without one being raised (a gate's step that must run again on fresher data);
    a pass without it resets the back-off. Both may be asked: the sooner look wins. `hold`:
    the job's events of the next `hold` seconds are handled in one pass at their end (a
    large job's batch period)."""

    requeue_after: float | None = None
    backoff: bool = False
    hold: float = 0.0

    @classmethod
    def after(cls, seconds: float) -> Result:
        return cls(requeue_after=max(0.0, seconds))

    def merge(self, other: Result) -> Result:
        """Both wishes at once: the sooner look, either back-off, the longer hold."""
        times = [t for t in (self.requeue_after, other.requeue_after) if t is not None]
        return Result(requeue_after=min(times) if times else None,
                      backoff=self.backoff or other.backoff, hold=max(self.hold, other.hold))


#: Nothing more to do until an event asks.
DONE = Result()
