"""The operator's progress endpoint: replicas POST their reports here (docs/progress.md).

Why its own listener: it faces every training pod of the cluster, not only Prometheus and the
kubelet's probes, so it has its own port, its own TLS and its own Service, and is absent
unless the chart turns it on (`--progress-listen`).

Every process serves it for its whole life, a standby too: a standby's store is inactive, so
it answers 503 with Retry-After (the client warns and drops that report; it is progress, the
next one goes to the leader once the Service routes there). Nothing is applied twice: only
the active store applies.

A request goes through, in order: the standby check (503), the bearer token (401: none, or
one the API server does not accept for our audience; 503 when the API server does not
answer), the report rate of the token's pod (429 with Retry-After), the content type (415),
size (413) and JSON (400), then whether the token's pod is the replica the report names, of
the job it names (403), then the store (409 a step backwards; 400, 404 from core's rules).
Each refusal changes nothing, is counted in `trainjobs_progress_reports_total{result}` and
logged at warning, at most once per reason per 10 s.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping

from aiohttp import web

from trainjobs.core.progress import MAX_BODY_BYTES, ProgressReport, ReportRefused
from trainjobs.kube import ApiError
from trainjobs.operator.cache import job_key
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.operator.metrics import PROGRESS_REPORTS
from trainjobs.operator.progress_limits import FloodLimit, RefusalLog
from trainjobs.operator.progress_store import ProgressStore
from trainjobs.operator.token_review import Forbidden, Identifier, PodIdentity, Unauthenticated
from trainjobs.progress_wire import read_report, reply

__all__ = ["PATH", "ProgressServer", "tls_context"]

log = logging.getLogger("trainjobs.operator.progress")

PATH = "/v1/progress"
STANDBY_RETRY_AFTER = 10
UNAVAILABLE_RETRY_AFTER = 5
RESULT_OF_STATUS = {400: "invalid", 404: "forbidden", 409: "backwards", 413: "too_large",
                    415: "unsupported_type", 503: "standby"}


class _Refusal(Exception):
    def __init__(self, status: int, result: str, message: str,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.result, self.message = status, result, message
        self.retry_after = retry_after


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context of the chart's certificate (TLS 1.2 at least)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class ProgressServer:
    """Serves POST /v1/progress on host:port, applying accepted reports to `store`.

    `kinds` maps each served kind's (apiVersion, kind), as a pod's ownerReference writes it,
    to the kind's name in the controller's job keys."""

    def __init__(self, store: ProgressStore, identifier: Identifier,
                 kinds: Mapping[tuple[str, str], str], host: str, port: int, *,
                 ssl_context: ssl.SSLContext | None = None, interval: float = 5.0,
                 clock: Clock = SYSTEM_CLOCK, flood: FloodLimit | None = None) -> None:
        self.store, self.identifier, self.kinds = store, identifier, dict(kinds)
        self.host, self.port, self.ssl_context = host, port, ssl_context
        self.interval = interval
        self.flood = flood or FloodLimit(clock)
        self.refusals = RefusalLog(log, clock)
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(PATH, self.handle)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        log.info("progress endpoint on %s://%s:%d%s", "https" if self.ssl_context else "http",
                 self.host, self.port, PATH)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def handle(self, request: web.Request) -> web.Response:
        try:
            report, key = await self._admit(request)
            try:
                ask = self.store.apply(report, key)
            except ReportRefused as refused:
                result = RESULT_OF_STATUS.get(refused.status, "invalid")
                retry = STANDBY_RETRY_AFTER if refused.status == 503 else None
                raise _Refusal(refused.status, result, f"{refused.message} "
                               f"[from {report.namespace}/{report.replica}]", retry) from None
        except _Refusal as refusal:
            PROGRESS_REPORTS.labels(result=refusal.result).inc()
            self.refusals.refused(refusal.result, refusal.status, refusal.message)
            return reply(refusal.status, {"accepted": False, "error": refusal.message},
                          refusal.retry_after)
        PROGRESS_REPORTS.labels(result="accepted").inc()
        answer: dict[str, object] = {"accepted": True, "interval": self.interval}
        if ask is not None:
            answer["checkpoint"] = ask
        return reply(200, answer)

    async def _admit(self, request: web.Request) -> tuple[ProgressReport, str]:
        """The report and its job's key, or the first `_Refusal` in the order above."""
        if not self.store.active:
            raise _Refusal(503, "standby", "not the leader: this operator replica is a "
                           "standby; the report was not applied", STANDBY_RETRY_AFTER)
        pod = await self._identify(request.headers.get("Authorization", ""))
        wait = self.flood.take(pod.pod_uid)
        if wait > 0:
            raise _Refusal(429, "throttled", f"too many reports from pod {pod.namespace}/"
                           f"{pod.pod} (at most {self.flood.rate:g}/s, bursts of "
                           f"{self.flood.burst:g})", wait)
        report = await self._parse(request)
        return report, self._job_of(report, pod)

    async def _identify(self, authorization: str) -> PodIdentity:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refusal(401, "unauthenticated", "no bearer token (the projected token in "
                           "TRAINJOBS_PROGRESS_TOKEN_FILE)")
        try:
            return await self.identifier.identify(token.strip())
        except Unauthenticated as exc:
            raise _Refusal(401, "unauthenticated", str(exc)) from None
        except Forbidden as exc:
            raise _Refusal(403, "forbidden", str(exc)) from None
        except ApiError as exc:
            raise _Refusal(503, "unavailable", f"cannot verify the token now (the API server "
                           f"did not answer: {exc})", UNAVAILABLE_RETRY_AFTER) from None

    async def _parse(self, request: web.Request) -> ProgressReport:
        try:
            return await read_report(request)
        except ReportRefused as refused:
            raise _Refusal(refused.status, RESULT_OF_STATUS.get(refused.status, "invalid"),
                           refused.message) from None

    def _job_of(self, report: ProgressReport, pod: PodIdentity) -> str:
        """The key of the job the token's pod belongs to, if it is the one the report names."""
        kind = self.kinds.get((pod.owner_api_version, pod.owner_kind))
        problem = None
        if kind is None:
            problem = (f"pod {pod.namespace}/{pod.pod} is owned by {pod.owner_kind} "
                       f"{pod.owner_name}, not by a job this operator runs")
        elif report.namespace != pod.namespace:
            problem = (f"pod {pod.namespace}/{pod.pod} may not report for namespace "
                       f"{report.namespace!r}")
        elif (report.job, report.uid) != (pod.owner_name, pod.owner_uid):
            problem = (f"pod {pod.namespace}/{pod.pod} belongs to job {pod.owner_name} "
                       f"({pod.owner_uid}), not {report.job} ({report.uid or '-'})")
        elif report.replica != pod.pod:
            problem = f"pod {pod.namespace}/{pod.pod} may not report as {report.replica!r}"
        if problem is not None:
            raise _Refusal(403, "forbidden", problem)
        assert kind is not None
        return job_key(kind, pod.namespace, pod.owner_name)
