"""Prometheus metrics of the operator, served on /metrics.

Why prometheus-client: it is the reference implementation, well kept, and its exposition format
is what every Prometheus and ServiceMonitor expects; writing the format by hand buys nothing.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from trainjobs.kube import ApiError
from trainjobs.operator.clock import SYSTEM_CLOCK
from trainjobs.operator.progress_metrics import ProgressMetrics

__all__ = [
           "API_ERRORS",
           "GC_PAUSE",
           "JOBS",
           "LOOP_LAG",
           "LOOP_LAG_MAX",
           "PROGRESS",
           "PROGRESS_REPORTS",
           "QUEUE_DEPTH",
           "RECONCILES",
           "RECONCILE_DURATION",
           "REGISTRY",
           "WANTED_POD_DELETIONS",
           "count_api_error",
]

REGISTRY = CollectorRegistry()

JOBS = Gauge("trainjobs_jobs", "Jobs by kind and state.", ["kind", "state"], registry=REGISTRY)
RECONCILE_DURATION = Histogram(
    "trainjobs_reconcile_duration_seconds", "Time to reconcile one job.", ["kind"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY)
RECONCILES = Counter("trainjobs_reconciles_total", "Reconciles by result.", ["result"],
                     registry=REGISTRY)
QUEUE_DEPTH = Gauge("trainjobs_work_queue_depth", "Jobs waiting to be reconciled.",
                    registry=REGISTRY)
API_ERRORS = Counter("trainjobs_api_errors_total", "Failed API calls by verb and HTTP status "
                     "(0: no response).", ["verb", "code"], registry=REGISTRY)
WANTED_POD_DELETIONS = Counter(
    "trainjobs_wanted_pod_deletions_total", "Pods deleted while their job still wanted them "
    "(live replicas of its current attempt), by the planner's reason: NewAttempt, Rescaled, "
    "Suspended, Queued.", ["kind", "reason"], registry=REGISTRY)
GC_PAUSE = Histogram(
    "trainjobs_gc_pause_seconds", "Pauses of the Python garbage collector, by generation "
    "(the event loop waits for each).", ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
    registry=REGISTRY)
EVENTS_DROPPED = Counter(
    "trainjobs_events_dropped_total", "Kubernetes Events not posted because the poster's "
    "queue was full (the API server slower than the jobs' events for a while).",
    registry=REGISTRY)
LOOP_LAG = Histogram(
    "trainjobs_event_loop_lag_seconds", "How late the event loop woke a task that slept a fixed "
    "interval: the delay every ready task (reconciles, watches, /readyz) suffered meanwhile.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY)
LOOP_LAG_MAX = Gauge("trainjobs_event_loop_lag_max_seconds", "The longest event loop lag seen "
                     "since the operator started.", registry=REGISTRY)
LOOP_LAG_BUSY_MAX = Gauge(
    "trainjobs_event_loop_lag_busy_max_seconds", "The longest event loop lag counting only "
    "the time the process was on the CPU meanwhile (what the operator itself caused, not a "
    "machine busy with others).", registry=REGISTRY)
PROGRESS_REPORTS = Counter(
    "trainjobs_progress_reports_total", "Progress reports the operator's endpoint answered, by "
    "result: accepted, standby, unauthenticated, forbidden, throttled, invalid, too_large, "
    "unsupported_type, backwards, unavailable (a fixed set: docs/progress.md).", ["result"],
    registry=REGISTRY)

#: The jobs' reported progress (operator/progress_metrics.py): the progress gate calls
#: `PROGRESS.observe(namespace, name, kind, status.progress)` when it writes it and
#: `PROGRESS.forget(namespace, name)` when the job goes.
PROGRESS = ProgressMetrics(SYSTEM_CLOCK, registry=REGISTRY)


def count_api_error(verb: str, error: ApiError) -> None:
    """`Kube`'s error hook: one failed API call, by verb and HTTP status (0: no response)."""
    API_ERRORS.labels(verb=verb, code=str(error.status)).inc()
