"""A job's progress as its `status.progress` says it: what the receiver's view becomes on the
cluster.

Why pure and apart from core/progress.py: that module is the receiver's rules (shared with
`trainjobs run`); this one is the API's shape — rounding, the bounded metrics, the short text
kubectl's Progress column shows — and the gate that writes the status calls it with the
times it keeps (its injected clock), so an operator restart loses nothing it needs.
"""

from __future__ import annotations

from datetime import datetime

from trainjobs.api.models import MAX_STATUS_METRICS, ProgressStatus
from trainjobs.core.progress import JobProgress
from trainjobs.core.status import whole_seconds

__all__ = ["METRIC_DIGITS", "progress_status", "progress_summary", "status_metrics"]

#: Significant digits a metric keeps in the status: enough to read, and a loss that moves in
#: its 9th digit does not make every write differ from the last.
METRIC_DIGITS = 6


def progress_summary(step: int, total: int | None, percent: float | None) -> str:
    """`1200/5000 (24%)`, `5000/5000 (100%)`; `1200` without a total."""
    if not total:
        return str(step)
    return f"{step}/{total}" + (f" ({percent:g}%)" if percent is not None else "")


def status_metrics(metrics: dict[str, float] | None) -> dict[str, float]:
    """The metrics the status keeps: the first MAX_STATUS_METRICS by name order (a stable
    choice: the same names every write, whatever order the program sent them in), each to
    METRIC_DIGITS significant digits."""
    if not metrics:
        return {}
    return {n: float(f"{metrics[n]:.{METRIC_DIGITS}g}")
            for n in sorted(metrics)[:MAX_STATUS_METRICS]}


def progress_status(view: JobProgress, last_report: datetime,
                    last_progress: datetime) -> ProgressStatus:
    """`status.progress` for `view`, received last at `last_report`, its step last advanced
    at `last_progress` (the caller keeps both: the view has only monotonic times)."""
    percent = view.percent
    rounded = None if percent is None else round(percent, 1)
    eta = view.eta_seconds
    return ProgressStatus(
        step=view.step, total_steps=view.total or None, epoch=view.epoch, percent=rounded,
        eta_seconds=None if eta is None else round(eta),
        summary=progress_summary(view.step, view.total, rounded),
        metrics=status_metrics(dict(view.metrics)), replica=view.replica,
        last_report_time=whole_seconds(last_report),
        last_progress_time=whole_seconds(last_progress))
