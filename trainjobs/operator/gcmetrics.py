"""Time every pause of CPython's garbage collector into `trainjobs_gc_pause_seconds`.

While the collector runs, the event loop runs nothing: every watch event, reconcile and status
write waits. A full (generation 2) collection walks every object the interpreter tracks, and
the operator's heap is mostly its caches. CPython starts one when the objects promoted since
the last one reach a quarter of the long-lived heap: rare while the cache only turns over
(`python -m bench.gcpause`: none in 400,000 replayed watch events, where freezing the heap
with `gc.freeze` only added pauses), but recurring while it grows - the scale benchmark's
operator made 30 full collections of 0.5-1 s while 5,000 jobs arrived (docs/benchmarks.md).
The pauses are exported so that they show where they matter; a growth-aware freeze is the
candidate fix, not made yet.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from trainjobs.operator.metrics import GC_PAUSE

__all__ = ["install_gc_metrics"]

_started = 0.0
# One histogram child per generation, looked up once: the callback runs on every collection
# (thousands an hour), inside whatever the event loop was doing.
_by_generation = {g: GC_PAUSE.labels(str(g)) for g in range(3)}


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    global _started
    if phase == "start":
        _started = time.perf_counter()
    else:
        _by_generation[info["generation"]].observe(time.perf_counter() - _started)


def install_gc_metrics() -> None:
    """Time every collection into GC_PAUSE (idempotent)."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
