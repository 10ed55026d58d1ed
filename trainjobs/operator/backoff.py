"""Per-job back-off for creates the API server refuses for a passing reason (a full
ResourceQuota), and what the job is told meanwhile.

Why a gate and not only the work queue's retry: any event of the job (its own status write, a
pod of it changing) queues it again at once, so without a gate a job over its quota would try
its creates several times a second. The gate holds the job's creates until its back-off has
passed, however often the job is reconciled; deletes and status go on. The clock is injectable
so that the back-off is tested without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CreateGate"]


@dataclass
class _Refusal:
    failures: int
    until: float
    reason: str


class CreateGate:
    """Exponential back-off per job: base, 2*base, ... up to `max_delay` seconds."""

    def __init__(self, base_delay: float = 1.0, max_delay: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.clock = clock
        self._refused: dict[str, _Refusal] = {}

    def refuse(self, key: str, reason: str, retry_after: float | None = None) -> float:
        """The job's creates were refused for `reason`: hold them; returns the delay."""
        before = self._refused.get(key)
        failures = before.failures + 1 if before else 1
        delay = min(self.base_delay * 2.0 ** (failures - 1), self.max_delay)
        delay = max(delay, retry_after or 0.0)
        self._refused[key] = _Refusal(failures, self.clock() + delay, reason)
        return delay

    def wait(self, key: str) -> float:
        """Seconds until the job may create again (0: now)."""
        refusal = self._refused.get(key)
        return max(0.0, refusal.until - self.clock()) if refusal else 0.0

    def reason(self, key: str) -> str:
        """Why the job's creates wait (until one succeeds), else ''."""
        refusal = self._refused.get(key)
        return refusal.reason if refusal else ""

    def clear(self, key: str) -> bool:
        """Creates went through (or the job is gone): forget the refusal. True if there was one."""
        return self._refused.pop(key, None) is not None
