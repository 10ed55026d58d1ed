"""Time every pause of CPython's garbage collector into `trainjobs_gc_pause_seconds`.

While the collector runs, the event loop runs nothing: every watch event, reconcile and status
write waits. Full (generation 2) collections are the long ones; gcfreeze.py keeps the cache out
of them, and this metric is how that is judged on a real operator (docs/benchmarks.md,
"Garbage-collector pauses").
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
