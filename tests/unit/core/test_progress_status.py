"""status.progress from the receiver's view: rounding, the bounded metrics, the column text."""

from __future__ import annotations

from datetime import UTC, datetime

from trainjobs.api.models import MAX_STATUS_METRICS, JobStatus
from trainjobs.core.progress import JobProgress
from trainjobs.core.progress_status import progress_status, progress_summary, status_metrics

T0 = datetime(2026, 1, 1, 12, 0, 0, 750000, tzinfo=UTC)


def view(step: int = 1200, total: int | None = 5000, rate: float | None = 2.0,
         metrics: dict[str, float] | None = None) -> JobProgress:
    return JobProgress(step, total, 2, metrics or {"loss": 0.3121}, "mnist-worker-0", 7, rate)


def test_fields_rounded_and_times_whole_seconds() -> None:
    status = progress_status(view(step=1234, total=4000, rate=3.0), T0, T0.replace(second=5))
    assert status.to_api() == {
        "step": 1234, "totalSteps": 4000, "epoch": 2, "percent": 30.9, "etaSeconds": 922,
        "summary": "1234/4000 (30.9%)", "metrics": {"loss": 0.3121},
        "replica": "mnist-worker-0", "lastReportTime": "2026-01-01T12:00:00Z",
        "lastProgressTime": "2026-01-01T12:00:05Z"}


def test_without_a_total_or_a_rate() -> None:
    status = progress_status(view(total=None, rate=None), T0, T0)
    assert (status.total_steps, status.percent, status.eta_seconds) == (None, None, None)
    assert status.summary == "1200"
    assert "etaSeconds" not in status.to_api()


def test_finished_steps_have_no_time_left() -> None:
    status = progress_status(view(step=5000, total=5000), T0, T0)
    assert (status.percent, status.eta_seconds, status.summary) == (100.0, 0, "5000/5000 (100%)")


def test_summary() -> None:
    assert progress_summary(3, 7, 42.9) == "3/7 (42.9%)"
    assert progress_summary(3, None, None) == "3"


def test_metrics_bounded_by_name_order_and_digits() -> None:
    many = {f"m{i:02d}": i + 0.123456789 for i in range(40, 0, -1)}
    kept = status_metrics(many)
    assert list(kept) == [f"m{i:02d}" for i in range(1, MAX_STATUS_METRICS + 1)]
    assert kept["m01"] == 1.12346
    assert status_metrics({}) == {}
    status = progress_status(view(metrics=many), T0, T0)
    assert len(status.metrics) == MAX_STATUS_METRICS


def test_status_round_trips_through_the_api_shape() -> None:
    status = JobStatus(state="Running", progress=progress_status(view(), T0, T0))
    again = JobStatus.model_validate(status.to_api())
    assert again == status
    assert again.progress is not None and again.progress.eta_seconds == 1900
