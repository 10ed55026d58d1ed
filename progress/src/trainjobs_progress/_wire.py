"""The wire format of a progress report (version 1), shared by the client and its tests.

Why a separate module: the receiver (trainjobs.core.progress) enforces the same limits, and a
client that cleans its reports first never sends one the receiver must refuse.

A report is one JSON object POSTed to TRAINJOBS_PROGRESS_URL:

    {"version": 1, "job": {"namespace": ..., "name": ..., "uid": ...},
     "replica": {"name": ..., "type": ..., "index": 0}, "attempt": 0,
     "session": "<hex, one per process>", "seq": 3, "sentAt": <unix seconds>,
     "step": 120, "total": 400, "epoch": 2, "metrics": {"loss": 0.31}}

The reply to an accepted report is a JSON object too: "accepted", "interval" (the fewest
seconds the receiver wants between two reports of one process) and, to the checkpointing
replica while a checkpoint is asked of it (issue 38), "checkpoint": {"id": N}. A client ignores
fields it does not know. The program's answer is a report with
"checkpoint": {"id": N, "step": S, "uri": "<where it saved, at most 1024 characters>"}.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

VERSION = 1
MAX_METRICS = 64
MAX_METRIC_NAME = 64
MAX_BODY_BYTES = 64 * 1024
MAX_CHECKPOINT_URI = 1024
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")

__all__ = ["MAX_BODY_BYTES", "MAX_CHECKPOINT_URI", "MAX_METRICS", "MAX_METRIC_NAME",
           "METRIC_NAME", "VERSION", "clean_metrics", "number"]


def number(value: Any) -> float | None:
    """`value` as a finite float, or None (not a number, a bool, NaN or infinite).

    Accepts anything with __float__ (numpy scalars, 0-d tensors) without importing them."""
    if isinstance(value, (bool, str, bytes)):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


def clean_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
    """The metrics that can be sent, and a note per one that cannot (name, and why)."""
    kept: dict[str, float] = {}
    dropped: list[str] = []
    for name, value in metrics.items():
        if not isinstance(name, str) or len(name) > MAX_METRIC_NAME \
                or not METRIC_NAME.match(name):
            dropped.append(f"{name!r}: not a metric name ([A-Za-z_][A-Za-z0-9_./-]*, at most "
                           f"{MAX_METRIC_NAME} characters)")
            continue
        converted = number(value)
        if converted is None:
            dropped.append(f"{name}: {value!r} is not a finite number")
            continue
        if name not in kept and len(kept) >= MAX_METRICS:
            dropped.append(f"{name}: more than {MAX_METRICS} metrics")
            continue
        kept[name] = converted
    return kept, dropped
