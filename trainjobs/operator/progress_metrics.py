"""Prometheus gauges of the jobs' reported progress, with a bounded number of series.

Why a collector of its own rather than labelled Gauges: a series per job is what a dashboard
wants, but 5,000 reporting jobs must not become 15,000 series in every scrape. The gate that
writes status.progress tells this object each job's progress (`observe`, `forget`); at scrape
time it exports the per-job gauges of the MAX_JOB_SERIES jobs that reported last, and
aggregates over all of them (how many report, how many have stalled, how many series were
left out). Stalled is counted at scrape time from the injected clock, so a job that stops
reporting is counted without anyone calling `observe`.

Labels: `job_namespace`, `job_name`, `kind` — not `namespace` and `job`, which Prometheus'
scrape sets to the operator's own (a ServiceMonitor's target labels).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from trainjobs.api.models import ProgressStatus
from trainjobs.operator.clock import Clock

__all__ = ["JOB_LABELS", "MAX_JOB_SERIES", "STALLED_SECONDS", "ProgressMetrics"]

#: Jobs that get per-job series (the ones that reported last); the rest are only counted.
MAX_JOB_SERIES = 1000
#: A reporting job whose step has not advanced for this long counts as stalled.
STALLED_SECONDS = 600.0
JOB_LABELS = ("job_namespace", "job_name", "kind")


@dataclass(frozen=True, slots=True)
class _Job:
    kind: str
    ratio: float | None
    eta: int | None
    step: int
    reported: datetime | None
    advanced: datetime | None


class ProgressMetrics(Collector):
    """The progress of the jobs that report, as the gate last saw it."""

    def __init__(self, clock: Clock, max_series: int = MAX_JOB_SERIES,
                 stalled_seconds: float = STALLED_SECONDS,
                 registry: CollectorRegistry | None = None) -> None:
        self.clock, self.max_series, self.stalled_seconds = clock, max_series, stalled_seconds
        # (namespace, name) -> progress; the job that reported last at the end.
        self.jobs: OrderedDict[tuple[str, str], _Job] = OrderedDict()
        if registry is not None:
            registry.register(self)

    def observe(self, namespace: str, name: str, kind: str,
                progress: ProgressStatus | None) -> None:
        """The job's progress now (None: it has none, e.g. a new attempt cleared it)."""
        if progress is None:
            self.forget(namespace, name)
            return
        key = (namespace, name)
        job = _Job(kind, None if progress.percent is None else progress.percent / 100.0,
                   progress.eta_seconds, progress.step, progress.last_report_time,
                   progress.last_progress_time)
        before = self.jobs.get(key)
        self.jobs[key] = job
        if before is None or before.reported != job.reported:
            self.jobs.move_to_end(key)

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone (deleted, or its memory dropped)."""
        self.jobs.pop((namespace, name), None)

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily("trainjobs_job_progress_ratio", "Reported step / total steps "
                              f"(0-1), per job; only the {self.max_series} jobs that reported "
                              "last.", labels=JOB_LABELS),
            GaugeMetricFamily("trainjobs_job_progress_step", "Reported step, per job; only "
                              f"the {self.max_series} jobs that reported last.",
                              labels=JOB_LABELS),
            GaugeMetricFamily("trainjobs_job_eta_seconds", "Seconds left at the recent rate "
                              f"of steps, per job; only the {self.max_series} jobs that "
                              "reported last.", labels=JOB_LABELS),
            GaugeMetricFamily("trainjobs_jobs_reporting_progress",
                              "Jobs whose status carries reported progress."),
            GaugeMetricFamily("trainjobs_jobs_progress_stalled", "Reporting jobs whose step "
                              f"has not advanced for {self.stalled_seconds:g} s."),
            GaugeMetricFamily("trainjobs_job_progress_series_dropped", "Reporting jobs left "
                              f"out of the per-job series (beyond {self.max_series})."),
        )

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ratio, step, eta, reporting, stalled, dropped = self._families()
        now = self.clock.now()
        shown = list(self.jobs.items())[-self.max_series:] if self.max_series > 0 else []
        for (namespace, name), job in shown:
            labels = [namespace, name, job.kind]
            step.add_metric(labels, job.step)
            if job.ratio is not None:
                ratio.add_metric(labels, job.ratio)
            if job.eta is not None:
                eta.add_metric(labels, job.eta)
        reporting.add_metric([], len(self.jobs))
        stalled.add_metric([], sum(
            1 for j in self.jobs.values() if j.advanced is not None
            and (now - j.advanced).total_seconds() > self.stalled_seconds))
        dropped.add_metric([], len(self.jobs) - len(shown))
        yield from (ratio, step, eta, reporting, stalled, dropped)
