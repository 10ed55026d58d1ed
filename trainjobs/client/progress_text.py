"""How the client shows a job's `status.progress`: the list's PROGRESS and ETA columns, the
lines of `trainjobs status`, and the bar of `trainjobs submit --wait`.

Why one module: the three show the same figures and must agree (the same ETA text, the same
"-" when a job does not report); pure functions of the status and a time, unit-tested without
a cluster. The style is `trainjobs run`'s (local/output.py's durations and metrics).
"""

from __future__ import annotations

from datetime import datetime

from trainjobs.api.models import ProgressStatus
from trainjobs.local.output import format_duration, format_metrics

__all__ = ["BAR_WIDTH", "NONE", "eta_text", "progress_bar", "progress_cells", "progress_lines",
           "progress_plain"]

NONE = "-"  # a job that does not report, in a column
BAR_WIDTH = 20
LIVE_METRICS = 3  # metrics on the live line; `trainjobs status` shows them all


def eta_text(progress: ProgressStatus | None) -> str:
    """`15m50s`; "-" when unknown or the steps are done."""
    if progress is None or progress.eta_seconds is None or \
            (progress.total_steps is not None and progress.step >= progress.total_steps):
        return NONE
    return format_duration(progress.eta_seconds)


def _steps(progress: ProgressStatus) -> str:
    text = f"step {progress.step}" + (f"/{progress.total_steps}" if progress.total_steps
                                       else "")
    return text + (f" ({progress.percent:g}%)" if progress.percent is not None else "")


def progress_cells(progress: ProgressStatus | None) -> tuple[str, str]:
    """The list's PROGRESS and ETA cells: `1200/5000 (24%)`, `15m50s`; "-" for none."""
    if progress is None:
        return NONE, NONE
    return progress.summary or str(progress.step), eta_text(progress)


def progress_plain(progress: ProgressStatus) -> str:
    """One plain line (a pipe, a CI log): `step 1200/5000 (24%), epoch 2, ETA 15m50s,
    loss=0.3121 [from mnist-worker-0]`."""
    parts = [_steps(progress)]
    if progress.epoch is not None:
        parts.append(f"epoch {progress.epoch}")
    if eta_text(progress) != NONE:
        parts.append(f"ETA {eta_text(progress)}")
    if progress.metrics:
        parts.append(format_metrics(progress.metrics, LIVE_METRICS))
    return ", ".join(parts) + (f" [from {progress.replica}]" if progress.replica else "")


def progress_bar(progress: ProgressStatus, width: int = BAR_WIDTH) -> str:
    """`[#####...............] 24% 1200/5000 ETA 15m50s`; without a total, no bar."""
    if progress.percent is None or not progress.total_steps:
        return f"step {progress.step}"
    filled = min(width, int(width * progress.percent / 100))
    bar = "#" * filled + "." * (width - filled)
    eta = eta_text(progress)
    return (f"[{bar}] {progress.percent:g}% {progress.step}/{progress.total_steps}"
            + (f" ETA {eta}" if eta != NONE else ""))


def _ago(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "?"
    return format_duration(max((now - when).total_seconds(), 0.0)) + " ago"


def progress_lines(progress: ProgressStatus | None, now: datetime) -> list[str]:
    """`trainjobs status`'s section: the steps, the ETA, who reported and when, the metrics
    (every one the status keeps); none when the job does not report."""
    if progress is None:
        return []
    head = _steps(progress)
    if progress.epoch is not None:
        head += f", epoch {progress.epoch}"
    eta = eta_text(progress)
    if eta != NONE:
        head += f", ETA {eta}"
    lines = [head, f"reported by {progress.replica or '?'}, last report "
                   f"{_ago(progress.last_report_time, now)}, step last advanced "
                   f"{_ago(progress.last_progress_time, now)}"]
    if progress.metrics:
        lines.append(format_metrics(progress.metrics))
    return lines
