"""The receiving side of progress: the rules every report is checked against (a clear 4xx,
nothing else changed), the job's progress built from reports, the environment the local
backend injects (and the Kubernetes backend does not), the console's progress output, and the
local receiver over real HTTP with the real client library."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import aiohttp
import pytest
from trainjobs_progress import from_environment

from tests.unit.helpers import PLUGINS, caffe2job, framework_of, mxjob, parse
from trainjobs.core.progress import (
    MAX_BODY_BYTES,
    MAX_METRICS,
    ProgressBoard,
    ProgressEndpoint,
    ReportRefused,
    parse_report,
)
from trainjobs.core.render import render_job
from trainjobs.local.output import Console, format_duration, format_progress
from trainjobs.local.receiver import ProgressReceiver


def body(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1, "job": {"namespace": "local", "name": "mnist", "uid": "u1"},
        "replica": {"name": "mnist-worker-0", "type": "Worker", "index": 0}, "attempt": 0,
        "session": "s1", "seq": 1, "step": 10, "total": 100, "epoch": 0,
        "metrics": {"loss": 0.5}}
    doc.update(fields)
    return doc


def raw(**fields: Any) -> bytes:
    return json.dumps(body(**fields)).encode()


def refusal(data: bytes) -> ReportRefused:
    with pytest.raises(ReportRefused) as caught:
        parse_report(data)
    return caught.value


def test_a_valid_report_parses() -> None:
    report = parse_report(raw())
    assert (report.job, report.replica, report.step, report.total) == \
        ("mnist", "mnist-worker-0", 10, 100)
    assert report.metrics == {"loss": 0.5}


@pytest.mark.parametrize("data, status, words", [
    (b"{not json", 400, "not JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b"x" * (MAX_BODY_BYTES + 1), 413, "at most"),
    (raw(version=2), 400, "version"),
    (raw(step=-1), 400, "step: must be a non-negative integer"),
    (raw(step=1.5), 400, "step"),
    (raw(step=True), 400, "step"),
    (raw(total=0), 400, "total: must be a positive integer"),
    (raw(job="mnist"), 400, "job: must be an object"),
    (raw(metrics={f"m{i}": 1 for i in range(MAX_METRICS + 1)}), 400, "at most 64"),
    (raw(metrics={"loss": "low"}), 400, "metrics.loss: must be a finite number"),
    (raw(metrics={"bad name": 1}), 400, "not a metric name"),
    (raw().replace(b'"loss": 0.5', b'"loss": NaN'), 400, "NaN"),
    (raw().replace(b'"loss": 0.5', b'"loss": Infinity'), 400, "Infinity"),
])
def test_bad_reports_are_refused_with_one_line(data: bytes, status: int, words: str) -> None:
    refused = refusal(data)
    assert refused.status == status and words in refused.message
    assert "\n" not in refused.message


def test_a_step_going_backwards_within_a_process_is_refused_and_changes_nothing() -> None:
    board = ProgressBoard("local", "mnist", "u1")
    board.apply(parse_report(raw(step=50)), now=1.0)
    with pytest.raises(ReportRefused) as caught:
        board.apply(parse_report(raw(step=40, metrics={"loss": 9.0})), now=2.0)
    assert caught.value.status == 409 and "40 after 50" in caught.value.message
    view = board.view()
    assert view is not None and view.step == 50 and view.metrics == {"loss": 0.5}
    # A restarted replica is a new session: it may start again from the beginning.
    board.apply(parse_report(raw(step=1, session="s2")), now=3.0)
    assert board.replicas["mnist-worker-0"].step == 1


def test_a_report_for_another_job_is_refused() -> None:
    board = ProgressBoard("local", "mnist", "u1")
    with pytest.raises(ReportRefused) as caught:
        board.apply(parse_report(raw(job={"namespace": "local", "name": "mnist",
                                          "uid": "old"})), now=1.0)
    assert caught.value.status == 404 and board.view() is None


def test_the_view_follows_the_furthest_replica_with_rate_and_eta() -> None:
    board = ProgressBoard("local", "mnist", "u1")
    board.apply(parse_report(raw(step=10)), now=0.0)
    board.apply(parse_report(raw(step=12, replica={"name": "mnist-worker-1", "type": "Worker",
                                                   "index": 1}, session="x")), now=0.5)
    board.apply(parse_report(raw(step=30, metrics={"loss": 0.25})), now=2.0)
    view = board.view()
    assert view is not None
    assert (view.replica, view.step, view.reports) == ("mnist-worker-0", 30, 3)
    assert view.rate == 10.0 and view.eta_seconds == 7.0 and view.percent == 30.0
    assert format_progress(view) == ("step 30/100 (30%), epoch 0, ETA 7s, loss=0.25 "
                                     "[from mnist-worker-0]")


def test_durations() -> None:
    assert [format_duration(s) for s in (4.4, 65, 7380)] == ["4s", "1m05s", "2h03m"]


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> Any:
        raise NotImplementedError


def test_plain_output_prints_progress_now_and_then_and_the_last_step_once() -> None:
    stream, clock = io.StringIO(), FakeClock()
    console = Console(stream, colour=False, live=False, clock=clock)
    board = ProgressBoard("local", "mnist", "u1")
    for i, step in enumerate(range(10, 101, 10)):
        clock.t = i * 1.0
        board.apply(parse_report(raw(step=step)), now=clock.t)
        console.progress(board.view())  # type: ignore[arg-type]
    board.apply(parse_report(raw(step=100, session="s2", replica={
        "name": "mnist-worker-1", "type": "Worker", "index": 1})), now=9.5)
    console.progress(board.view())  # type: ignore[arg-type]
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "[trainjobs] progress: step 10/100 (10%)", "[trainjobs] progress: step 60/100 (60%)",
        "[trainjobs] progress: step 100/100 (100%)"]


def test_live_output_keeps_one_line_below_the_logs() -> None:
    stream = io.StringIO()
    console = Console(stream, colour=False, live=True)
    board = ProgressBoard("local", "mnist", "u1")
    board.apply(parse_report(raw(step=10)), now=0.0)
    console.progress(board.view())  # type: ignore[arg-type]
    console.line("mnist-worker-0", "hello")
    text = stream.getvalue()
    status = "[trainjobs] step 10/100 (10%), epoch 0, loss=0.5 [from mnist-worker-0]"
    assert text == (f"{status}\r\033[Kmnist-worker-0 | hello\n{status}")
    console.summary("mnist", "Succeeded", 1.0, "", [], "/tmp/x", board.view())
    assert "  last metrics: loss=0.5\n" in stream.getvalue()


def test_local_render_gives_every_container_the_progress_environment() -> None:
    doc = mxjob("mnist", scheduler=1, server=1, worker=2)
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox"})
    job = parse(doc)
    framework = framework_of(job.kind)
    endpoint = ProgressEndpoint("http://127.0.0.1:1234/v1/progress", 1.0)
    rendered = render_job(job, framework, PLUGINS, backend="local", progress=endpoint)
    for name, pod in rendered.pods.items():
        for container in pod["spec"]["containers"]:
            env = {v["name"]: v.get("value") for v in container["env"]}
            assert env["TRAINJOBS_PROGRESS_URL"] == endpoint.url
            assert env["TRAINJOBS_REPLICA_NAME"] == name
            assert env["TRAINJOBS_JOB_NAME"] == "mnist"
    worker = rendered.pods["mnist-worker-1"]["spec"]["containers"][0]["env"]
    values = {v["name"]: v.get("value") for v in worker}
    assert (values["TRAINJOBS_REPLICA_TYPE"], values["TRAINJOBS_REPLICA_INDEX"],
            values["TRAINJOBS_PROGRESS_INTERVAL"], values["TRAINJOBS_ATTEMPT"]) == \
        ("Worker", "1", "1", "0")


def test_the_kubernetes_backend_is_unchanged_and_refuses_progress() -> None:
    job = parse(caffe2job("c2", workers=2))
    framework = framework_of(job.kind)
    rendered = render_job(job, framework, PLUGINS)
    for pod in rendered.pods.values():
        for container in pod["spec"]["containers"]:
            assert not any(v["name"].startswith(("TRAINJOBS_PROGRESS", "TRAINJOBS_JOB",
                                                 "TRAINJOBS_REPLICA"))
                           for v in container.get("env", []))
    with pytest.raises(ValueError, match="needs a token audience"):
        render_job(job, framework, PLUGINS, progress=ProgressEndpoint("http://x", 1.0))


async def test_the_local_receiver_over_http_with_the_real_client() -> None:
    board = ProgressBoard("local", "mnist", "u1")
    seen: list[int] = []
    receiver = ProgressReceiver(board, lambda: seen.append(1), interval=0.05)
    await receiver.start()
    try:
        url = receiver.endpoint.url
        async with aiohttp.ClientSession() as http:
            async def post(data: bytes, ctype: str = "application/json") -> tuple[int, Any]:
                async with http.post(url, data=data, headers={"Content-Type": ctype}) as r:
                    return r.status, await r.json()

            assert await post(raw(step=5)) == (200, {"accepted": True, "interval": 0.05})
            assert (await post(b"{oops"))[0] == 400
            assert (await post(b"x" * (MAX_BODY_BYTES + 10)))[0] == 413
            assert (await post(raw(step=1)))[0] == 409
            assert (await post(raw(), "text/plain"))[0] == 415
            status, reply = await post(raw(step=6, metrics={"loss": 1, **{
                f"m{i}": i for i in range(100)}}))
            assert status == 400 and "at most 64" in reply["error"]
        view = board.view()
        assert view is not None and view.step == 5 and receiver.refused == 5
        client = from_environment({
            "TRAINJOBS_PROGRESS_URL": url, "TRAINJOBS_PROGRESS_INTERVAL": "0.05",
            "TRAINJOBS_JOB_NAMESPACE": "local", "TRAINJOBS_JOB_NAME": "mnist",
            "TRAINJOBS_JOB_UID": "u1", "TRAINJOBS_REPLICA_NAME": "mnist-worker-1"})
        for step in range(1, 41):
            client.report(step, total=40, accuracy=step / 40, bad=float("nan"))
        assert await asyncio.to_thread(client.flush, 3.0)
        client.close(0.1)
        view = board.view()
        assert view is not None
        assert (view.replica, view.step, view.total) == ("mnist-worker-1", 40, 40)
        assert view.metrics == {"accuracy": 1.0}
    finally:
        await receiver.stop()
