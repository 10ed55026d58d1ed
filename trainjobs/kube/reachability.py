"""Whether the API server answers, as the operator's own requests and watches see it.

Why: /readyz must say when the operator's view of the cluster has gone stale. Nothing is
polled for it: every request and watch already reports whether the API server answered (any
HTTP status below 500) or not (no connection, a timeout, a 5xx, a watch cut), so an API server
that is gone is noticed by the informers' reconnect attempts, and its return by the first
answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Reachability"]


class Reachability:
    """Since when the API server has not answered (None: it answers)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failing_since: float | None = None

    def answered(self) -> None:
        self._failing_since = None

    def failed(self) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock()

    def unreachable_for(self) -> float:
        """Seconds since the first failure with no answer after it; 0 while it answers."""
        if self._failing_since is None:
            return 0.0
        return self._clock() - self._failing_since
