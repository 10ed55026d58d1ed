"""One job's back-off for creates the API server refuses for a passing reason (a full
ResourceQuota), and what the job is told meanwhile.

Why a gate and not only the work queue's retry: any event of the job (its own status write, a
pod of it changing) queues it again at once, so without a gate a job over its quota would try
its creates several times a second. The gate holds the job's creates until its back-off has
passed, however often the job is reconciled; deletes and status go on. A job has a gate only
while its creates are refused (it lives in the job's `JobMemory`, and goes with it). The
clock is injectable so that the back-off is tested without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["CreateGate"]


class CreateGate:
    """Exponential back-off of one job: base, 2*base, ... up to `max_delay` seconds."""

    __slots__ = ("base_delay", "clock", "failures", "max_delay", "reason", "until")

    def __init__(self, base_delay: float = 1.0, max_delay: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.clock = clock
        self.failures = 0
        self.until = 0.0
        self.reason = ""  # why the job's creates wait (until one succeeds)

    def refuse(self, reason: str, retry_after: float | None = None) -> float:
        """The job's creates were refused for `reason`: hold them; returns the delay."""
        self.failures += 1
        delay = min(self.base_delay * 2.0 ** (self.failures - 1), self.max_delay)
        delay = max(delay, retry_after or 0.0)
        self.until = self.clock() + delay
        self.reason = reason
        return delay

    def wait(self) -> float:
        """Seconds until the job may create again (0: now)."""
        return max(0.0, self.until - self.clock()) if self.failures else 0.0
