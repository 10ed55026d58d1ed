"""Keep the operator's long-lived heap out of CPython's full garbage collections.

While the collector runs, the event loop runs nothing. A full (generation 2) collection walks
every object the collector tracks, and the operator's heap is mostly its caches: at 5,000 jobs
one walk takes 0.3-1 s. CPython (3.11-3.13) starts one whenever the objects promoted since the
last one reach a quarter of the long-lived objects it counted then, so while the caches grow -
the first sync, each restart's LIST, a burst of new jobs - the operator stopped for a full walk
at every quarter of growth: 30 full walks, 19.4 s in all, 22 of them 0.5 s or longer, while
5,000 jobs arrived (docs/benchmarks.md, "Garbage-collector pauses"; with this policy: 34 walks,
1.8 s in all).

The policy: when a full collection ends, freeze what survived it (`gc.freeze`), so that the
next one walks only what arrived since. Each walk then costs what the heap grew by, not what
it holds. Beyond one collection at start-up nothing extra is walked: the freeze rides on the
collections CPython starts anyway, which come about as often as before (it also waits for 10
younger collections between two full ones), each short.

Frozen objects are still freed by reference counting the moment their last reference goes;
only reference cycles among them are invisible to the collector. To reclaim those, the first
full collection after `thaw_seconds` starts by unfreezing everything (`gc.unfreeze`), walks it
once, and freezes again: one long pause per thaw interval instead of one per quarter of growth.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FreezePolicy", "install_gc_freeze"]

_FULL = 2  # the oldest generation: CPython's full collection


class FreezePolicy:
    """A gc callback: freeze after every full collection, thaw inside one per `thaw_seconds`."""

    def __init__(self, thaw_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.thaw_seconds = thaw_seconds
        self._clock = clock
        self._last_thaw = clock()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != _FULL:
            return
        if phase == "start":
            now = self._clock()
            if now - self._last_thaw >= self.thaw_seconds:
                # Back into the oldest generation before this collection merges it: this
                # walk sees everything and reclaims the cycles that died frozen.
                self._last_thaw = now
                gc.unfreeze()
        else:
            gc.freeze()  # O(1), unlike gc.get_freeze_count(): it splices the lists


def install_gc_freeze(thaw_seconds: float,
                      clock: Callable[[], float] = time.monotonic) -> FreezePolicy | None:
    """Install the policy, replacing one installed before, and freeze what is alive now (the
    modules and the API client's classes: alive as long as the process); 0 removes it, thaws
    everything and leaves CPython's collector as it is. Returns the installed policy."""
    for callback in [c for c in gc.callbacks if isinstance(c, FreezePolicy)]:
        gc.callbacks.remove(callback)
    if thaw_seconds <= 0:
        gc.unfreeze()
        return None
    policy = FreezePolicy(thaw_seconds, clock=clock)
    gc.callbacks.append(policy)
    gc.collect()  # once, at start-up: and the policy freezes what survives
    return policy
