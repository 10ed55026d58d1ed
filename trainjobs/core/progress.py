"""Progress reports: what a receiver accepts, and a job's progress built from them.

Why in core and pure: `trainjobs run`'s receiver uses it now and the operator's (issue 37.3)
will use the same rules, so a report refused on a laptop is refused on a cluster. Nothing
here does I/O or reads a clock: times are passed in (the caller's injected clock).

The wire format is the one `trainjobs_progress` sends (progress/src/trainjobs_progress/
_wire.py, docs/progress.md); its limits are repeated here because the operator must not
import the client library.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainjobs.errors import TrainjobsError

__all__ = ["ENV_CHECKPOINT_STEP", "ENV_CHECKPOINT_URI", "MAX_BODY_BYTES", "MAX_CHECKPOINT_URI",
           "MAX_METRICS", "CheckpointAck", "JobProgress", "ProgressBoard", "ProgressEndpoint",
           "ProgressReport", "ReportRefused", "parse_report", "progress_env"]

VERSION = 1
MAX_BODY_BYTES = 64 * 1024
MAX_METRICS = 64
MAX_METRIC_NAME = 64
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
ETA_SAMPLES = 32  # (time, step) pairs the rate is measured over
MAX_CHECKPOINT_URI = 1024
MAX_CHECKPOINT_ID = 2**53  # an id any JSON reader keeps exact

# The environment contract (docs/api.md), set in every container of every replica.
ENV_URL = "TRAINJOBS_PROGRESS_URL"
ENV_INTERVAL = "TRAINJOBS_PROGRESS_INTERVAL"
# On a cluster (issue 37.3): the projected token to send, the CA to verify the endpoint with.
ENV_TOKEN_FILE = "TRAINJOBS_PROGRESS_TOKEN_FILE"
ENV_CA = "TRAINJOBS_PROGRESS_CA"
# Issue 38: the checkpoint a resumed run starts from (step and the URI its program reported).
ENV_CHECKPOINT_STEP = "TRAINJOBS_CHECKPOINT_STEP"
ENV_CHECKPOINT_URI = "TRAINJOBS_CHECKPOINT_URI"


class ReportRefused(TrainjobsError):
    """A report the receiver will not apply; `status` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ProgressEndpoint:
    """Where a job's replicas report, and how often at most (seconds per process).

    On a cluster also: the audience of the service-account token projected into every pod
    (at `token_file`), and the PEM of the CA that signed the endpoint's certificate (`ca`,
    inline; "" for the system's CAs). Locally all three stay empty: no token, no TLS."""

    url: str
    interval: float = 1.0
    audience: str = ""
    token_file: str = ""
    ca: str = ""


@dataclass(frozen=True)
class CheckpointAck:
    """A report's "checkpoint" field: the program saved, at `step`, to `uri` (its own
    words: a path, an s3:// URL...), answering the request `id`."""

    id: int
    step: int
    uri: str


@dataclass(frozen=True)
class ProgressReport:
    """One valid report."""

    namespace: str
    job: str
    uid: str
    replica: str
    replica_type: str
    replica_index: int
    attempt: int
    session: str
    seq: int
    step: int
    total: int | None
    epoch: int | None
    metrics: Mapping[str, float]
    checkpoint: CheckpointAck | None = None


def progress_env(url: str, interval: float, *, namespace: str, job: str, uid: str,
                 replica: str, replica_type: str, replica_index: int,
                 attempt: int, token_file: str = "", ca: str = "") -> dict[str, str]:
    """The variables that tell `trainjobs_progress` where to report and who it is (and, on a
    cluster, with which token and CA)."""
    secured = {ENV_TOKEN_FILE: token_file} if token_file else {}
    if ca:
        secured[ENV_CA] = ca
    return {
        ENV_URL: url,
        ENV_INTERVAL: f"{interval:g}",
        "TRAINJOBS_JOB_NAMESPACE": namespace,
        "TRAINJOBS_JOB_NAME": job,
        "TRAINJOBS_JOB_UID": uid,
        "TRAINJOBS_REPLICA_NAME": replica,
        "TRAINJOBS_REPLICA_TYPE": replica_type,
        "TRAINJOBS_REPLICA_INDEX": str(replica_index),
        "TRAINJOBS_ATTEMPT": str(attempt),
        **secured,
    }


def _refuse(message: str) -> ReportRefused:
    return ReportRefused(400, message)


def _count(doc: Mapping[str, Any], key: str, *, optional: bool = False,
           positive: bool = False) -> int | None:
    value = doc.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < (1 if positive else 0):
        kind = "a positive" if positive else "a non-negative"
        raise _refuse(f"{key}: must be {kind} integer, got {json.dumps(value)[:40]}")
    return value


def _text(doc: Mapping[str, Any], key: str, where: str, limit: int = 253) -> str:
    value = doc.get(key, "")
    if not isinstance(value, str) or len(value) > limit:
        raise _refuse(f"{where}.{key}: must be a string of at most {limit} characters")
    return value


def _object(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise _refuse(f"{key}: must be an object")
    return value


def _metrics(value: Any) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse("metrics: must be an object of name: number")
    if len(value) > MAX_METRICS:
        raise _refuse(f"metrics: {len(value)} metrics, at most {MAX_METRICS}")
    out: dict[str, float] = {}
    for name, number in value.items():
        if len(name) > MAX_METRIC_NAME or not METRIC_NAME.fullmatch(name):
            raise _refuse(f"metrics: {name[:80]!r} is not a metric name "
                          f"([A-Za-z_][A-Za-z0-9_./-]*, at most {MAX_METRIC_NAME} characters)")
        if isinstance(number, bool) or not isinstance(number, int | float) \
                or not math.isfinite(number):
            raise _refuse(f"metrics.{name}: must be a finite number, got "
                          f"{json.dumps(number)[:40]}")
        out[name] = float(number)
    return out


def _checkpoint(value: Any) -> CheckpointAck | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _refuse('checkpoint: must be an object {"id": ..., "step": ..., "uri": ...}')
    try:
        ident, step = _count(value, "id", positive=True), _count(value, "step")
    except ReportRefused as refused:
        raise _refuse(f"checkpoint.{refused.message}") from None
    if ident is not None and ident > MAX_CHECKPOINT_ID:
        raise _refuse(f"checkpoint.id: at most {MAX_CHECKPOINT_ID}")
    uri = value.get("uri")
    if not isinstance(uri, str) or not uri or len(uri) > MAX_CHECKPOINT_URI:
        raise _refuse(f"checkpoint.uri: must be a non-empty string of at most "
                      f"{MAX_CHECKPOINT_URI} characters")
    assert ident is not None and step is not None
    return CheckpointAck(ident, step, uri)


def _no_constants(name: str) -> float:
    raise _refuse(f"{name} is not a number JSON allows (NaN and infinities are refused)")


def parse_report(body: bytes) -> ProgressReport:
    """The report in `body`, or `ReportRefused` saying what is wrong with it (one line)."""
    if len(body) > MAX_BODY_BYTES:
        raise ReportRefused(413, f"body of {len(body)} bytes, at most {MAX_BODY_BYTES}")
    try:
        doc = json.loads(body, parse_constant=_no_constants)
    except ReportRefused:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise _refuse(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _refuse("a report must be a JSON object")
    if doc.get("version") != VERSION:
        raise _refuse(f"version: this receiver speaks version {VERSION}, got "
                      f"{json.dumps(doc.get('version'))[:20]}")
    job, replica = _object(doc, "job"), _object(doc, "replica")
    step = _count(doc, "step")
    assert step is not None
    return ProgressReport(
        namespace=_text(job, "namespace", "job"), job=_text(job, "name", "job"),
        uid=_text(job, "uid", "job", 64), replica=_text(replica, "name", "replica"),
        replica_type=_text(replica, "type", "replica", 63),
        replica_index=_count(replica, "index") or 0, attempt=_count(doc, "attempt") or 0,
        session=_text(doc, "session", "report", 64), seq=_count(doc, "seq") or 0,
        step=step, total=_count(doc, "total", optional=True, positive=True),
        epoch=_count(doc, "epoch", optional=True), metrics=_metrics(doc.get("metrics")),
        checkpoint=_checkpoint(doc.get("checkpoint")))


@dataclass
class ReplicaProgress:
    """The newest report of one replica's current process."""

    session: str
    step: int
    total: int | None
    epoch: int | None
    metrics: Mapping[str, float]
    at: float  # receiver's monotonic seconds
    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=ETA_SAMPLES))


@dataclass(frozen=True)
class JobProgress:
    """A job's progress as shown: its furthest replica's newest report."""

    step: int
    total: int | None
    epoch: int | None
    metrics: Mapping[str, float]
    replica: str
    reports: int
    rate: float | None  # steps per second, over the recent reports

    @property
    def percent(self) -> float | None:
        return None if not self.total else min(100.0, 100.0 * self.step / self.total)

    @property
    def eta_seconds(self) -> float | None:
        if not self.total or not self.rate or self.rate <= 0:
            return None
        return max(self.total - self.step, 0) / self.rate


class ProgressBoard:
    """The reports of one job (`uid`): every replica's newest state, checked in order.

    A step may not go backwards within one reporting process (`session`); a replica that
    restarts is a new session and starts again wherever its program does (a restart from
    scratch is not a refusal)."""

    def __init__(self, namespace: str, job: str, uid: str) -> None:
        self.namespace, self.job, self.uid = namespace, job, uid
        self.replicas: dict[str, ReplicaProgress] = {}
        self.reports = 0
        # When training last moved (monotonic): a replica's step went up, or a replica's
        # process reported for the first time (a restart starts wherever its program does).
        # The stall rule (core/planner/stall.py) measures from it.
        self.last_advance: float | None = None

    def check_job(self, report: ProgressReport) -> None:
        """Refuse (404) a report of another job, or of an earlier job of the same name."""
        if (report.namespace, report.job, report.uid) != (self.namespace, self.job, self.uid):
            raise ReportRefused(404, f"no job {report.namespace}/{report.job} (uid "
                                     f"{report.uid or '-'}) here; this receiver is for "
                                     f"{self.namespace}/{self.job} ({self.uid})")

    def apply(self, report: ProgressReport, now: float) -> None:
        """Take `report` (received at monotonic `now`) or raise `ReportRefused`."""
        self.check_job(report)
        current = self.replicas.get(report.replica)
        if current is not None and current.session == report.session:
            if report.step < current.step:
                raise ReportRefused(409, f"step went backwards: {report.step} after "
                                         f"{current.step} from {report.replica}")
            if report.step > current.step:
                self.last_advance = now
            current.step, current.total, current.epoch = report.step, report.total, \
                report.epoch
            current.metrics, current.at = dict(report.metrics), now
        else:
            current = self.replicas[report.replica] = ReplicaProgress(
                report.session, report.step, report.total, report.epoch,
                dict(report.metrics), now)
            self.last_advance = now
        if not current.samples or current.samples[-1][1] != report.step:
            current.samples.append((now, report.step))
        self.reports += 1

    def view(self) -> JobProgress | None:
        """The job's progress, or None before any report."""
        if not self.replicas:
            return None
        name, best = max(self.replicas.items(), key=lambda kv: (kv[1].step, kv[1].at))
        rate = None
        if len(best.samples) >= 2:
            (t0, s0), (t1, s1) = best.samples[0], best.samples[-1]
            rate = (s1 - s0) / (t1 - t0) if t1 > t0 else None
        return JobProgress(best.step, best.total, best.epoch, best.metrics, name,
                           self.reports, rate)
