"""The operator's progress endpoint (trainjobs/operator/progress_server.py) over real HTTP
(aiohttp's test server) with a fake API server behind the token checks: every refusal has its
status and one-line reason, changes nothing, is counted, and other jobs are unaffected."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.unit.controller_harness import FakeClock
from tests.unit.operator.progress_fakes import NS, FakeApi, pod
from trainjobs.core.progress import MAX_BODY_BYTES
from trainjobs.kube import Kube
from trainjobs.operator.metrics import PROGRESS_REPORTS
from trainjobs.operator.progress_limits import FloodLimit
from trainjobs.operator.progress_server import PATH, ProgressServer
from trainjobs.operator.progress_store import ProgressStore
from trainjobs.operator.token_review import TokenReviewer

KINDS = {("trainjobs.io/v1alpha1", "MxJob"): "MxJob"}


def body(job: str = "mnist", uid: str = "j1", replica: str = "mnist-worker-0",
         namespace: str = NS, **fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1, "job": {"namespace": namespace, "name": job, "uid": uid},
        "replica": {"name": replica, "type": "Worker", "index": 0}, "attempt": 0,
        "session": "s1", "seq": 1, "step": 10, "total": 100, "metrics": {"loss": 0.5}}
    doc.update(fields)
    return doc


@dataclass
class Endpoint:
    client: TestClient[Any, Any]
    store: ProgressStore
    api: FakeApi
    clock: FakeClock
    keys: list[str]

    async def post(self, doc: Any = None, token: str | None = "t-mnist-0", *,
                   data: bytes | None = None, content_type: str = "application/json"
                   ) -> tuple[int, dict[str, Any], Any]:
        headers = {"Content-Type": content_type}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        payload = data if data is not None else json.dumps(doc or body()).encode()
        resp = await self.client.post(PATH, data=payload, headers=headers)
        return resp.status, await resp.json(), resp.headers


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    api, clock = FakeApi(), FakeClock()
    api.bind("t-mnist-0", pod("mnist-worker-0", "p1", "mnist", "j1"))
    api.bind("t-other-0", pod("other-worker-0", "p2", "other", "j2"))
    api.bind("t-elsewhere", pod("mnist-worker-0", "p3", "mnist", "j3", namespace="team-b"))
    api.bind("t-deploy", pod("web-1", "p4", "web", "rs1", kind="ReplicaSet",
                             api_version="apps/v1"))
    store, keys = ProgressStore(clock), list[str]()
    store.activate(lambda key, answered: keys.append(key))
    server = ProgressServer(store, TokenReviewer(cast(Kube, api), clock), KINDS, "127.0.0.1",
                            0, clock=clock, flood=FloodLimit(clock, rate=5, burst=10))
    client = TestClient(TestServer(server.app()))
    await client.start_server()
    try:
        yield Endpoint(client, store, api, clock, keys)
    finally:
        await client.close()


def counted(result: str) -> float:
    return PROGRESS_REPORTS.labels(result=result)._value.get()  # type: ignore[attr-defined]


async def test_an_authenticated_report_of_its_own_job_is_applied(endpoint: Endpoint) -> None:
    before = counted("accepted")
    status, reply, _ = await endpoint.post()
    assert (status, reply) == (200, {"accepted": True, "interval": 5.0})
    snap = endpoint.store.snapshot("j1")
    assert snap is not None and snap.view.step == 10
    assert endpoint.keys == [f"MxJob/{NS}/mnist"]
    assert counted("accepted") == before + 1


@pytest.mark.parametrize("token, doc, status, words, result", [
    (None, body(), 401, "no bearer token", "unauthenticated"),
    ("forged", body(), 401, "invalid bearer token", "unauthenticated"),
    ("t-other-0", body(), 403, "belongs to job other", "forbidden"),
    ("t-mnist-0", body(job="other", uid="j2", replica="other-worker-0"), 403,
     "belongs to job mnist", "forbidden"),
    ("t-elsewhere", body(uid="j3"), 403, "may not report for namespace", "forbidden"),
    ("t-mnist-0", body(replica="mnist-worker-1"), 403, "may not report as", "forbidden"),
    ("t-deploy", body(job="web", uid="rs1", replica="web-1"), 403, "not by a job",
     "forbidden"),
])
async def test_reports_of_another_job_namespace_or_without_a_token_are_refused(
        endpoint: Endpoint, token: str | None, doc: dict[str, Any], status: int, words: str,
        result: str) -> None:
    before = counted(result)
    got, reply, _ = await endpoint.post(doc, token)
    assert got == status and reply["accepted"] is False and words in reply["error"]
    assert endpoint.store.snapshot("j1") is None and endpoint.store.snapshot("j2") is None
    assert endpoint.keys == []
    assert counted(result) == before + 1


@pytest.mark.parametrize("data, content_type, status, words", [
    (b"{not json", "application/json", 400, "not JSON"),
    (b'{"version": 1, "step": NaN}', "application/json", 400, "NaN"),
    (json.dumps(body(metrics={f"m{i}": 1.0 for i in range(10_000)})).encode(),
     "application/json", 413, "at most"),
    (json.dumps(body(metrics={f"m{i}": 1.0 for i in range(65)})).encode(),
     "application/json", 400, "at most 64"),
    (b"x" * (MAX_BODY_BYTES + 1), "application/json", 413, "at most"),
    (b"{}", "text/plain", 415, "application/json"),
])
async def test_malformed_reports_are_refused(endpoint: Endpoint, data: bytes,
                                             content_type: str, status: int,
                                             words: str) -> None:
    got, reply, _ = await endpoint.post(data=data, content_type=content_type)
    assert got == status and words in reply["error"], reply
    assert endpoint.store.snapshot("j1") is None


async def test_a_step_going_backwards_is_a_409_and_changes_nothing(endpoint: Endpoint) -> None:
    assert (await endpoint.post(body(step=50)))[0] == 200
    status, reply, _ = await endpoint.post(body(step=40))
    assert status == 409 and "went backwards" in reply["error"]
    snap = endpoint.store.snapshot("j1")
    assert snap is not None and snap.view.step == 50 and snap.view.reports == 1


async def test_a_standby_answers_503_with_retry_after_and_applies_nothing(
        endpoint: Endpoint) -> None:
    endpoint.store.deactivate()
    reviews = endpoint.api.reviews
    status, reply, headers = await endpoint.post()
    assert status == 503 and "not the leader" in reply["error"]
    assert int(headers["Retry-After"]) > 0
    assert endpoint.api.reviews == reviews  # a standby spends no API call on it
    endpoint.store.activate(lambda key, answered: endpoint.keys.append(key))
    assert (await endpoint.post())[0] == 200


async def test_an_unreachable_api_server_is_a_503_not_a_401(endpoint: Endpoint) -> None:
    endpoint.api.down = True
    status, reply, headers = await endpoint.post()
    assert status == 503 and "cannot verify" in reply["error"] and "Retry-After" in headers


async def test_a_flood_from_one_pod_is_throttled_and_other_jobs_are_not(
        endpoint: Endpoint) -> None:
    statuses = [(await endpoint.post(body(step=i)))[0] for i in range(1, 16)]
    assert statuses == [200] * 10 + [429] * 5  # burst 10, no time passed
    status, reply, headers = await endpoint.post(body(step=99))
    assert status == 429 and "too many reports" in reply["error"]
    assert int(headers["Retry-After"]) >= 1
    other = body(job="other", uid="j2", replica="other-worker-0")
    assert (await endpoint.post(other, "t-other-0"))[0] == 200
    endpoint.clock.advance(1)  # 5 more a second
    assert (await endpoint.post(body(step=100)))[0] == 200
    snap = endpoint.store.snapshot("j1")
    assert snap is not None and snap.view.step == 100 and snap.view.reports == 11
    assert endpoint.api.reviews == 2  # one per token, cached


async def test_refusals_are_logged_at_most_once_per_reason_per_window(
        endpoint: Endpoint, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trainjobs.operator.progress"):
        for _ in range(30):
            await endpoint.post(token=None)
        endpoint.clock.advance(11)
        await endpoint.post(token=None)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "401 unauthenticated" in lines[0] and "29 more" in lines[1]
