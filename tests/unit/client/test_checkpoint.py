"""A user's checkpoint request from the client (issue 38): the annotation it writes, the jobs
it refuses, when the operator's answer counts, what `trainjobs checkpoint` prints and exits
with, and the checkpoint section of `trainjobs status`. The API server is a stub that records
the PATCH; the watch is a list of versions (the real ones: tests/integration/test_client.py)."""

from __future__ import annotations

import argparse
import asyncio
import copy
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.helpers import PLUGINS
from trainjobs.api.models import CheckpointRequestStatus, Job
from trainjobs.cli import build_parser
from trainjobs.cli import main as cli_main
from trainjobs.client import commands
from trainjobs.client.aio import AsyncClient, job_from_api
from trainjobs.client.checkpoint import (
    answered,
    checkpoint_lines,
    declined,
    outcome_line,
    refusal,
    request_value,
)
from trainjobs.client.errors import CheckpointRefused, WaitTimeout
from trainjobs.kube import ApiNotFound, Resource
from trainjobs.labels import ANNOTATION_CHECKPOINT_REQUEST

NOW = datetime(2026, 11, 28, 9, 0, 0, 123456, tzinfo=UTC)
VALUE = "2026-11-28T09:00:00.123456Z"


class Clock:
    def monotonic(self) -> float:
        return 0.0

    def now(self) -> datetime:
        return NOW


def raw_job(name: str = "mnist", *, timeout: int | None = 60, state: str = "Running",
            status: dict[str, Any] | None = None, managed_by: str | None = None,
            **run_policy: Any) -> dict[str, Any]:
    tmpl = {"spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}}
    policy = {**({"checkpointTimeoutSeconds": timeout} if timeout else {}), **run_policy}
    return {"apiVersion": "trainjobs.io/v1alpha1", "kind": "TfJob",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "resourceVersion": "7", "creationTimestamp": "2026-11-28T08:00:00Z"},
            "spec": {"runPolicy": policy, **({"managedBy": managed_by} if managed_by else {}),
                     "replicaSpecs": {"Worker": {"replicas": 2, "template": tmpl}}},
            "status": {"state": state, **(status or {})}}


def request(rid: int = 1, outcome: str = "Pending", reason: str = "UserRequest"
            ) -> dict[str, Any]:
    return {"id": rid, "reason": reason, "replica": "mnist-worker-0", "method": "Report",
            "requestTime": "2026-11-28T09:00:01Z", "deadline": "2026-11-28T09:01:01Z",
            "outcome": outcome}


SAVED = {"id": 4, "step": 1200, "uri": "/ckpt/step-1200.pt", "time": "2026-11-28T09:00:05Z",
         "attempt": 1, "replica": "mnist-worker-0"}


def job(**kwargs: Any) -> Job:
    return job_from_api(raw_job(**kwargs), PLUGINS)


# -- the request and its answer -----------------------------------------------------------

def test_the_value_is_the_utc_time_in_rfc3339_with_microseconds() -> None:
    assert request_value(NOW) == VALUE
    assert request_value(NOW.astimezone(timezone_plus_two())) == VALUE


def timezone_plus_two() -> Any:
    from datetime import timezone
    return timezone(timedelta(hours=2))


def test_refusals_name_the_reason() -> None:
    assert refusal(job()) is None
    no_timeout = refusal(job(timeout=None))
    assert no_timeout is not None and "spec.runPolicy.checkpointTimeoutSeconds" in no_timeout
    finished = refusal(job(state="Succeeded"))
    assert finished is not None and "has finished (Succeeded)" in finished
    suspended = refusal(job(suspend=True))
    assert suspended is not None and "suspended" in suspended


def test_an_answer_counts_once_taken_up_and_ended() -> None:
    def with_status(**status: Any) -> Job:
        return job(status=status)

    assert not answered(with_status(), VALUE, None)
    # Taken up, the request still pending.
    assert not answered(with_status(observedCheckpointRequest=VALUE,
                                    checkpointRequest=request(1)), VALUE, None)
    assert answered(with_status(observedCheckpointRequest=VALUE,
                                checkpointRequest=request(1, "Saved")), VALUE, None)
    # An older value taken up: not this request's answer.
    assert not answered(with_status(observedCheckpointRequest="2026-01-01T00:00:00.000000Z",
                                    checkpointRequest=request(1, "Saved")), VALUE, None)
    # Taken up, but the request shown is still the one that had ended before it was asked.
    old = CheckpointRequestStatus.model_validate(request(1, "TimedOut"))
    assert not answered(with_status(observedCheckpointRequest=VALUE,
                                    checkpointRequest=request(1, "TimedOut")), VALUE, old)
    assert answered(with_status(observedCheckpointRequest=VALUE,
                                checkpointRequest=request(2, "TimedOut")), VALUE, old)
    # One pending when asked (a Suspended one, say) may be the one that answers.
    pending = CheckpointRequestStatus.model_validate(request(1, "Pending", "Suspended"))
    assert answered(with_status(observedCheckpointRequest=VALUE,
                                checkpointRequest=request(1, "Saved", "Suspended")),
                    VALUE, pending)


def test_taken_up_without_a_new_request_is_declined() -> None:
    def with_status(**status: Any) -> Job:
        return job(status=status)

    old = CheckpointRequestStatus.model_validate(request(1, "TimedOut"))
    # The operator took the value up and asked nobody (one status update writes both).
    assert declined(with_status(observedCheckpointRequest=VALUE), VALUE, None)
    assert declined(with_status(observedCheckpointRequest=VALUE,
                                checkpointRequest=request(1, "TimedOut")), VALUE, old)
    # Not taken up yet; or a new request recorded; or one pending when asked that may answer.
    assert not declined(with_status(), VALUE, None)
    assert not declined(with_status(observedCheckpointRequest=VALUE,
                                    checkpointRequest=request(2)), VALUE, old)
    pending = CheckpointRequestStatus.model_validate(request(1, "Pending", "Suspended"))
    assert not declined(with_status(observedCheckpointRequest=VALUE,
                                    checkpointRequest=request(1, "Pending", "Suspended")),
                        VALUE, pending)


def test_outcome_lines() -> None:
    saved = job(status={"checkpointRequest": request(4, "Saved"), "lastCheckpoint": SAVED})
    assert outcome_line(saved) == "tfjob/mnist: saved at step 1200 to /ckpt/step-1200.pt"
    timed_out = job(status={"checkpointRequest": request(4, "TimedOut")})
    assert outcome_line(timed_out) == ("tfjob/mnist: timed out: mnist-worker-0 did not say it "
                                       "saved within 60s")
    gone = job(status={"checkpointRequest": request(4, "ReplicaGone")})
    assert outcome_line(gone) == ("tfjob/mnist: checkpoint request 4 ended ReplicaGone "
                                  "(mnist-worker-0)")


def test_status_lines() -> None:
    now = datetime(2026, 11, 28, 9, 0, 31, tzinfo=UTC)
    assert checkpoint_lines(job(), now) == []
    both = job(status={"lastCheckpoint": SAVED, "checkpointRequest": request(5)})
    assert checkpoint_lines(both, now) == [
        "step 1200 saved to /ckpt/step-1200.pt 26s ago (attempt 1, by mnist-worker-0)",
        "request 5 (UserRequest) to mnist-worker-0 by Report: pending, 30s left"]
    ended = job(status={"checkpointRequest": request(5, "TimedOut", "Suspended")})
    assert checkpoint_lines(ended, now + timedelta(minutes=5)) == [
        "request 5 (Suspended) to mnist-worker-0 by Report 5m30s ago: TimedOut"]
    raw = raw_job()
    raw["metadata"]["annotations"] = {ANNOTATION_CHECKPOINT_REQUEST: VALUE}
    asked = job_from_api(raw, PLUGINS)
    assert checkpoint_lines(asked, now) == [
        f"asked at {VALUE} ({ANNOTATION_CHECKPOINT_REQUEST}); not taken up by the operator yet"]


# -- AsyncClient.checkpoint ---------------------------------------------------------------

class StubKube:
    """GET and the merge PATCH of one TfJob; no Workloads; no other kind installed."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.patches: list[tuple[str, Any, str]] = []

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        if resource.kind != "TfJob" or name != self.raw["metadata"]["name"]:
            raise ApiNotFound(404, "Not Found")
        return copy.deepcopy(self.raw)

    async def request(self, verb: str, url: str, body: Any = None, *,
                      content_type: str = "application/json", **_: Any) -> dict[str, Any]:
        self.patches.append((url, body, content_type))
        annotations = self.raw["metadata"].setdefault("annotations", {})
        annotations.update(body["metadata"]["annotations"])
        return copy.deepcopy(self.raw)

    async def list(self, resource: Resource, namespace: str | None, **_: Any
                   ) -> tuple[list[dict[str, Any]], str]:
        return [], "1"


def client_for(raw: dict[str, Any], versions: list[dict[str, Any]] | None = None
               ) -> tuple[AsyncClient, StubKube]:
    client = AsyncClient(namespace="ml", plugins=PLUGINS, clock=Clock())
    kube = StubKube(raw)
    client._kube = kube  # type: ignore[assignment]

    async def watch(name: str, kind: str | None = None, namespace: str | None = None
                    ) -> AsyncIterator[Job]:
        for version in versions or []:
            yield client.job_from_api(version)
        await asyncio.sleep(3600)  # nothing more happens

    client.watch = watch  # type: ignore[method-assign]
    return client, kube


def test_writes_the_annotation_by_merge_patch() -> None:
    client, kube = client_for(raw_job())
    written = asyncio.run(client.checkpoint("mnist"))
    assert kube.patches == [
        ("/apis/trainjobs.io/v1alpha1/namespaces/ml/tfjobs/mnist",
         {"metadata": {"annotations": {ANNOTATION_CHECKPOINT_REQUEST: VALUE}}},
         "application/merge-patch+json")]
    assert written.metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST] == VALUE


@pytest.mark.parametrize(("raw", "message"), [
    (raw_job(timeout=None), "no spec.runPolicy.checkpointTimeoutSeconds"),
    (raw_job(state="Failed"), "has finished (Failed)"),
    (raw_job(managed_by="kueue.x-k8s.io/multikueue"),
     "is managed by kueue.x-k8s.io/multikueue: its pods run in a worker cluster"),
])
def test_refused_jobs_are_not_patched(raw: dict[str, Any], message: str) -> None:
    client, kube = client_for(raw)
    with pytest.raises(CheckpointRefused, match=message.replace("(", r"\(").replace(")", r"\)")):
        asyncio.run(client.checkpoint("tfjob/mnist"))
    assert kube.patches == []


def test_waits_for_the_answer_to_this_request() -> None:
    before = raw_job(status={"checkpointRequest": request(3, "Saved")})
    taken = raw_job(status={"observedCheckpointRequest": VALUE,
                            "checkpointRequest": request(4)})
    saved = raw_job(status={"observedCheckpointRequest": VALUE,
                            "checkpointRequest": request(4, "Saved"), "lastCheckpoint": SAVED})
    # The first version is the old answer (request 3, Saved): not this request's.
    client, _ = client_for(before, [before, taken, saved])
    job = asyncio.run(client.checkpoint("mnist", wait=5))
    assert job.status.last_checkpoint is not None and job.status.last_checkpoint.step == 1200


def test_a_wait_that_times_out_says_how_long_and_what_it_saw() -> None:
    taken = raw_job(status={"observedCheckpointRequest": VALUE,
                            "checkpointRequest": request(4)})
    client, _ = client_for(raw_job(), [taken])
    with pytest.raises(WaitTimeout, match=r"after 0\.2s: request 4 \(UserRequest\) Pending"):
        asyncio.run(client.checkpoint("mnist", wait=0.2))
    client, _ = client_for(raw_job(), [raw_job()])
    with pytest.raises(WaitTimeout, match="the operator has not taken the request up"):
        asyncio.run(client.checkpoint("mnist", wait=0.2))


# -- the command ---------------------------------------------------------------------------

def test_the_wait_flag_takes_optional_seconds() -> None:
    parse = build_parser().parse_args
    assert parse(["checkpoint", "mnist"]).wait is False
    assert parse(["checkpoint", "mnist", "--wait"]).wait is True
    assert parse(["checkpoint", "mnist", "--wait", "90"]).wait == 90.0
    assert parse(["checkpoint", "mnist", "--kind", "tfjob", "-n", "ml"]).kind == "tfjob"


@pytest.mark.parametrize("bad", ["soon", "0", "-5", "inf"])
def test_a_bad_wait_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["checkpoint", "mnist", "--wait", bad])
    assert exited.value.code == 2
    assert "--wait: " in capsys.readouterr().err


class CommandClient:
    def __init__(self, answer: Job) -> None:
        self.answer = answer
        self.asked: list[tuple[Any, ...]] = []

    async def checkpoint(self, name: str, kind: str | None, namespace: str | None, *,
                         wait: bool | float) -> Job:
        self.asked.append((name, kind, namespace, wait))
        return self.answer


@pytest.mark.parametrize(("wait", "status", "code", "line"), [
    (False, {}, 0, "tfjob/mnist: asked for a checkpoint (trainjobs status mnist -n ml shows "
                   "the answer)"),
    (True, {"checkpointRequest": request(4, "Saved"), "lastCheckpoint": SAVED}, 0,
     "tfjob/mnist: saved at step 1200 to /ckpt/step-1200.pt"),
    (30.0, {"checkpointRequest": request(4, "TimedOut")}, 3,
     "tfjob/mnist: timed out: mnist-worker-0 did not say it saved within 60s"),
    (True, {"checkpointRequest": request(4, "ReplicaGone")}, 1,
     "tfjob/mnist: checkpoint request 4 ended ReplicaGone (mnist-worker-0)"),
])
def test_the_command_prints_one_line(wait: bool | float, status: dict[str, Any], code: int,
                                     line: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = CommandClient(job(status=status))
    args = argparse.Namespace(job="mnist", kind=None, namespace="ml", wait=wait)
    assert asyncio.run(commands.COMMANDS["checkpoint"](client, args)) == code  # type: ignore[arg-type]
    assert capsys.readouterr().out.splitlines() == [line]
    assert client.asked == [("mnist", None, "ml", wait)]


def test_a_refusal_is_one_line_and_exit_5(capsys: pytest.CaptureFixture[str]) -> None:
    class Refusing:
        async def checkpoint(self, *args: Any, **kwargs: Any) -> Job:
            raise CheckpointRefused("TfJob mnist has no spec.runPolicy.checkpointTimeoutSeconds")

    async def guarded() -> int:
        async def command(client: Any, args: argparse.Namespace) -> int:
            return await commands.COMMANDS["checkpoint"](Refusing(), args)  # type: ignore[arg-type]
        args = argparse.Namespace(job="mnist", kind=None, namespace="ml", wait=False,
                                  kubeconfig=None)
        return await commands._guarded(command, args)

    assert asyncio.run(guarded()) == commands.EXIT_REFUSED
    err = capsys.readouterr().err
    assert err == "error: TfJob mnist has no spec.runPolicy.checkpointTimeoutSeconds\n"


def test_status_shows_the_checkpoint_section(capsys: pytest.CaptureFixture[str]) -> None:
    recent = (datetime.now(UTC) - timedelta(seconds=90)).strftime("%Y-%m-%dT%H:%M:%SZ")
    shown = job(status={"lastCheckpoint": {**SAVED, "time": recent}})

    class StatusClient:
        async def get(self, name: str, namespace: str | None = None) -> Job:
            return shown

        async def pods(self, *args: Any) -> list[Any]:
            return []

        async def events(self, *args: Any) -> list[Any]:
            return []

    args = argparse.Namespace(job="mnist", namespace="ml")
    assert asyncio.run(commands.COMMANDS["status"](StatusClient(), args)) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    section = out.split("checkpoint:\n", 1)[1].split("replicas:", 1)[0].splitlines()
    assert section in ([f"  step 1200 saved to /ckpt/step-1200.pt 1m{s}s ago (attempt 1, by "
                        "mnist-worker-0)"] for s in ("30", "31"))  # (a second may pass)
