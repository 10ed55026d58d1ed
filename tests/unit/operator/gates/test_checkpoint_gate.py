"""The checkpoint gate (operator/gates/checkpoint.py), through a controller on the fake API and
clock with the real ProgressStore: a suspended TfJob's chief is asked on the progress channel
once the request is written, nothing is deleted until it answers, then the chief goes first;
without a progress endpoint the chief is asked by SIGTERM; a job without
checkpointTimeoutSeconds stops at once; a new operator hands the same request out again."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import replace

from tests.unit.controller_harness import NS, TFJOBS, FakeClock, Harness, controller_on
from tests.unit.fake_kube import FakeKube
from trainjobs.core.progress import CheckpointAck, ProgressReport
from trainjobs.operator.gates import FACTORIES
from trainjobs.operator.gates.checkpoint import CHECKPOINT
from trainjobs.operator.gates.progress import PROGRESS, ProgressGate
from trainjobs.operator.progress_store import ProgressStore

CHIEF = "tf-chief-0"


def controller(kube: FakeKube, clock: FakeClock, progress: bool = True
               ) -> AbstractAsyncContextManager[Harness]:
    if not progress:
        return controller_on(kube, clock, [CHECKPOINT])
    return controller_on(kube, clock, [PROGRESS, CHECKPOINT], progress=ProgressStore(clock))


def store(h: Harness) -> ProgressStore:
    gate = h.controller.gates.gates[0]
    assert isinstance(gate, ProgressGate)
    return gate.store


def chief_report(h: Harness, step: int) -> ProgressReport:
    return ProgressReport(namespace=NS, job="tf", uid=h.job()["metadata"]["uid"],
                          replica=CHIEF, replica_type="Chief", replica_index=0, attempt=0,
                          session="s1", seq=step, step=step, total=100, epoch=None,
                          metrics={})


async def running(h: Harness, timeout: int | None = 60) -> None:
    h.submit("tf", Chief=1, Worker=1, PS=1)
    if timeout is not None:
        doc = h.job()
        doc["spec"]["runPolicy"] = {"checkpointTimeoutSeconds": timeout}
        h.kube.put(TFJOBS, doc)  # (before the first pass: generation 1 is this spec)
    await h.reconcile("tf")
    for pod in h.pod_names():
        h.set_pod(pod, "Running")
    for _ in range(2):
        h.clock.advance(2)
        await h.reconcile("tf")
    assert h.status()["state"] == "Running", h.status()


def suspend(h: Harness) -> None:
    doc = h.job()
    doc["spec"].setdefault("runPolicy", {})["suspend"] = True
    doc["metadata"]["generation"] += 1  # (the API server's part)
    h.kube.put(TFJOBS, doc)


def test_the_gate_is_wired() -> None:
    assert CHECKPOINT in FACTORIES


async def test_the_chief_is_asked_on_the_channel_and_stops_first_once_it_answered() -> None:
    async with controller(FakeKube(), FakeClock()) as h:
        await running(h)
        key = h.key("tf")
        assert store(h).apply(chief_report(h, 10), key) is None
        suspend(h)
        await h.reconcile("tf")
        request = h.status()["checkpointRequest"]
        assert (request["method"], request["reason"], request["replica"]) == \
            ("Report", "Suspended", CHIEF)
        assert sorted(h.pod_names()) == ["tf-chief-0", "tf-ps-0", "tf-worker-0"]
        await h.reconcile("tf")  # the request is written: the gate hands it out
        assert store(h).apply(chief_report(h, 11), key) == {"id": request["id"]}
        h.clock.advance(10)
        await h.reconcile("tf")
        assert len(h.pod_names()) == 3  # nothing deleted while it saves
        answer = replace(chief_report(h, 12), checkpoint=CheckpointAck(request["id"], 12, "/c"))
        assert store(h).apply(answer, key) is None
        await h.reconcile("tf")
        status = h.status()
        assert status["lastCheckpoint"]["step"] == 12
        assert status["checkpointRequest"]["outcome"] == "Saved"
        assert sorted(h.pod_names()) == ["tf-ps-0", "tf-worker-0"]  # the chief first
        await h.reconcile("tf")
        assert h.pod_names() == []


async def test_a_new_operator_hands_the_same_request_out_and_keeps_its_deadline() -> None:
    kube, clock = FakeKube(), FakeClock()
    async with controller(kube, clock) as h:
        await running(h)
        store(h).apply(chief_report(h, 10), h.key("tf"))
        suspend(h)
        await h.reconcile("tf")
        request = h.status()["checkpointRequest"]
    async with controller(kube, clock) as h:
        clock.advance(30)
        await h.reconcile("tf")
        assert h.status()["checkpointRequest"] == request and len(h.pod_names()) == 3
        assert store(h).apply(chief_report(h, 11), h.key("tf")) == {"id": request["id"]}
        clock.advance(30)
        await h.reconcile("tf")
        status = h.status()
        assert status["checkpointRequest"]["outcome"] == "TimedOut"
        assert status["checkpointRequest"]["id"] == request["id"]


async def test_without_a_progress_endpoint_the_chief_is_asked_by_sigterm() -> None:
    async with controller(FakeKube(), FakeClock(), progress=False) as h:
        await running(h)
        suspend(h)
        await h.reconcile("tf")
        assert h.status()["checkpointRequest"]["method"] == "Signal"
        assert sorted(h.pod_names()) == ["tf-ps-0", "tf-worker-0"]  # SIGTERM: its deletion


async def test_a_job_without_the_timeout_stops_at_once() -> None:
    async with controller(FakeKube(), FakeClock()) as h:
        await running(h, timeout=None)
        store(h).apply(chief_report(h, 10), h.key("tf"))
        suspend(h)
        await h.reconcile("tf")
        assert h.pod_names() == [] and "checkpointRequest" not in h.status()
