"""The controller's clock: one object for monotonic time (back-offs, expectations, status
coalescing) and wall time (timestamps written into a status).

Why injectable: the controller's timing decisions (a count change waits `--status-coalesce`
seconds, a quota refusal holds creates for a growing back-off, an expectation lapses after
its timeout) are unit-tested by moving a fake clock instead of sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    def now(self) -> datetime:
        """The wall-clock time, timezone-aware UTC."""
        ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK: Clock = SystemClock()
