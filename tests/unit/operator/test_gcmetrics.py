"""The operator times every garbage-collector pause into its /metrics."""

from __future__ import annotations

import gc

from trainjobs.operator.gcmetrics import install_gc_metrics
from trainjobs.operator.metrics import REGISTRY


def _count(generation: str) -> float:
    return REGISTRY.get_sample_value("trainjobs_gc_pause_seconds_count",
                                     {"generation": generation}) or 0.0


def test_collections_are_timed_by_generation() -> None:
    install_gc_metrics()
    install_gc_metrics()  # idempotent: one callback, one observation per collection
    full, young = _count("2"), _count("0")
    gc.collect()
    gc.collect(0)
    assert _count("2") == full + 1
    assert _count("0") == young + 1
    total = REGISTRY.get_sample_value("trainjobs_gc_pause_seconds_sum", {"generation": "2"})
    assert total is not None and total > 0
