"""Time every pause of CPython's garbage collector into `trainjobs_gc_pause_seconds`.

While the collector runs, the event loop runs nothing: every watch event, reconcile and status
write waits. A full (generation 2) collection walks every object the interpreter tracks, and
the operator's heap is mostly its caches (~250 ms with 5,000 jobs and 40,000 pods and Services
cached, on a 2-CPU VM). CPython starts one only when the objects promoted since the last one
reach a quarter of the long-lived heap, so a large cache makes them rare (`python -m
bench.gcpause`: none in 400,000 replayed watch events); freezing the heap out of them
(`gc.freeze`) was measured and cost more than it saved, so the collector is left as it is and
its pauses are exported instead, to tell whether one ever shows in a latency.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from trainjobs.operator.metrics import GC_PAUSE

__all__ = ["install_gc_metrics"]

_started: list[float] = []


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
    elif _started:
        GC_PAUSE.labels(str(info.get("generation", ""))).observe(
            time.perf_counter() - _started.pop())


def install_gc_metrics() -> None:
    """Time every collection into GC_PAUSE (idempotent)."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
