"""Bounds of the operator's progress endpoint: a report rate per pod, and a log rate per reason.

Why: one replica (a bug, a tight loop with no client rate limit, a hostile program) must not
take the operator's time from the other jobs' reports, nor fill its log with refusals. Both
bounds hold their state in a fixed-size map, so neither grows with the number of pods.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass

from trainjobs.operator.clock import Clock

__all__ = ["FloodLimit", "RefusalLog"]

# The client sends at most one report per interval (1 s or more), so a pod past 5 reports a
# second sustained is not using the library as shipped.
DEFAULT_RATE = 5.0
DEFAULT_BURST = 10.0
DEFAULT_PODS = 20_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class FloodLimit:
    """A token bucket per pod uid: `rate` reports a second, bursts of `burst`. At most
    `max_pods` buckets are kept (the least recently used forgotten: it starts full again)."""

    def __init__(self, clock: Clock, rate: float = DEFAULT_RATE, burst: float = DEFAULT_BURST,
                 max_pods: int = DEFAULT_PODS) -> None:
        self.clock, self.rate, self.burst, self.max_pods = clock, rate, burst, max_pods
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, pod_uid: str) -> float:
        """0 if the pod may send this report now, else the seconds until it may."""
        now = self.clock.monotonic()
        bucket = self._buckets.get(pod_uid)
        if bucket is None:
            bucket = self._buckets[pod_uid] = _Bucket(self.burst, now)
            while len(self._buckets) > self.max_pods:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(pod_uid)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate


class RefusalLog:
    """Logs a refusal at warning, at most once per `every` seconds per reason; the refusals
    not logged meanwhile are counted in the next line (the metric counts each one)."""

    def __init__(self, log: logging.Logger, clock: Clock, every: float = 10.0) -> None:
        self.log, self.clock, self.every = log, clock, every
        self._last: dict[str, float] = {}  # bounded: one per reason, a fixed set
        self._quiet: dict[str, int] = {}

    def refused(self, reason: str, status: int, message: str) -> bool:
        """Log one refusal (or count it); True if it was logged."""
        now = self.clock.monotonic()
        last = self._last.get(reason)
        if last is not None and now - last < self.every:
            self._quiet[reason] = self._quiet.get(reason, 0) + 1
            return False
        quiet = self._quiet.pop(reason, 0)
        self._last[reason] = now
        more = f" (and {quiet} more {reason} refusals in the last {math.ceil(now - last)}s)" \
            if quiet and last is not None else ""
        self.log.warning("progress report refused (%d %s): %s%s", status, reason, message, more)
        return True
