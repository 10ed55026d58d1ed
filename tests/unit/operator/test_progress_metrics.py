"""The progress gauges: per-job series for the jobs that reported last only (a bounded
number), aggregates over all, stalled counted from the clock at scrape time."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.controller_harness import FakeClock
from trainjobs.api.models import ProgressStatus
from trainjobs.operator.progress_metrics import JOB_LABELS, ProgressMetrics


def scrape(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(registry).decode()
    return {f.name: [(s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(text)}


def progress(clock: FakeClock, step: int, total: int | None = 100,
             eta: int | None = 50) -> ProgressStatus:
    return ProgressStatus(step=step, total_steps=total,
                          percent=None if total is None else 100.0 * step / total,
                          eta_seconds=eta, last_report_time=clock.now(),
                          last_progress_time=clock.now())


def test_per_job_series_and_aggregates() -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    metrics = ProgressMetrics(clock, registry=registry)
    metrics.observe("ml", "mnist", "TfJob", progress(clock, 25))
    metrics.observe("ml", "free", "MxJob", progress(clock, 7, total=None, eta=None))
    got = scrape(registry)
    labels = {"job_namespace": "ml", "job_name": "mnist", "kind": "TfJob"}
    assert set(labels) == set(JOB_LABELS)
    assert got["trainjobs_job_progress_ratio"] == [(labels, 0.25)]  # no total: no ratio
    assert got["trainjobs_job_eta_seconds"] == [(labels, 50.0)]
    assert sorted(v for _, v in got["trainjobs_job_progress_step"]) == [7.0, 25.0]
    assert got["trainjobs_jobs_reporting_progress"] == [({}, 2.0)]
    assert got["trainjobs_jobs_progress_stalled"] == [({}, 0.0)]
    metrics.forget("ml", "mnist")
    metrics.observe("ml", "free", "MxJob", None)  # progress gone: forgotten too
    got = scrape(registry)
    assert got["trainjobs_job_progress_ratio"] == []
    assert got["trainjobs_jobs_reporting_progress"] == [({}, 0.0)]


def test_series_bounded_to_the_jobs_that_reported_last() -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    metrics = ProgressMetrics(clock, max_series=3, registry=registry)
    for i in range(5):
        metrics.observe("ml", f"j{i}", "TfJob", progress(clock, i))
        clock.advance(1)
    metrics.observe("ml", "j0", "TfJob", progress(clock, 9))  # reports again: newest
    same = progress(clock, 4)
    metrics.observe("ml", "j4", "TfJob", same)
    metrics.observe("ml", "j4", "TfJob", same)  # the same report again: no reorder
    got = scrape(registry)
    names = {labels["job_name"] for labels, _ in got["trainjobs_job_progress_step"]}
    assert names == {"j3", "j0", "j4"}
    assert got["trainjobs_jobs_reporting_progress"] == [({}, 5.0)]
    assert got["trainjobs_job_progress_series_dropped"] == [({}, 2.0)]


def test_stalled_is_counted_at_scrape_time_from_the_clock() -> None:
    clock, registry = FakeClock(), CollectorRegistry()
    metrics = ProgressMetrics(clock, stalled_seconds=600, registry=registry)
    metrics.observe("ml", "slow", "TfJob", progress(clock, 1))
    clock.advance(300)
    metrics.observe("ml", "fast", "TfJob", progress(clock, 1))
    clock.advance(301)
    assert scrape(registry)["trainjobs_jobs_progress_stalled"] == [({}, 1.0)]
    clock.advance(timedelta(minutes=5).total_seconds())
    assert scrape(registry)["trainjobs_jobs_progress_stalled"] == [({}, 2.0)]


def test_the_operators_registry_has_the_families() -> None:
    from trainjobs.operator.metrics import PROGRESS, REGISTRY
    got = scrape(REGISTRY)
    assert isinstance(PROGRESS, ProgressMetrics)
    for name in ("trainjobs_job_progress_ratio", "trainjobs_job_eta_seconds",
                 "trainjobs_jobs_reporting_progress", "trainjobs_jobs_progress_stalled"):
        assert name in got


def test_the_charts_dashboard_draws_them() -> None:
    """The Grafana dashboard's progress panels read these families and label legends with
    these labels (tests/integration/test_helm_observability.py checks them against a real
    operator's /metrics)."""
    import json

    from tests.unit.helpers import REPO
    dash = json.loads((REPO / "charts/trainjobs/dashboards/trainjobs.json").read_text())
    targets = [t for p in dash["panels"] for t in p["targets"]]
    exprs = " ".join(t["expr"] for t in targets)
    for name in ("trainjobs_job_progress_ratio", "trainjobs_job_eta_seconds",
                 "trainjobs_jobs_reporting_progress", "trainjobs_jobs_progress_stalled",
                 "trainjobs_job_progress_series_dropped"):
        assert name in exprs, name
    legends = {t.get("legendFormat") for t in targets if "trainjobs_job_" in t["expr"]}
    assert "{{job_namespace}}/{{job_name}}" in legends
