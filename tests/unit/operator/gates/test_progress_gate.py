"""The progress gate (operator/gates/progress.py), through a controller on the fake API and
clock with the real ProgressStore: a report reaches status.progress; reports ask for a pass
at most once per interval; a stall's clock comes from the reports, and after an operator
restart from what the status kept; a deleted job's reports are forgotten."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager

from tests.unit.controller_harness import NS, TFJOBS, FakeClock, Harness, controller_on
from tests.unit.fake_kube import FakeKube
from trainjobs.core.progress import ProgressReport
from trainjobs.operator.gates import FACTORIES
from trainjobs.operator.gates.progress import PROGRESS, ProgressGate
from trainjobs.operator.progress_store import ProgressStore

INTERVAL = 30.0


def report(h: Harness, step: int, replica: str = "tf-worker-0",
           session: str = "s1") -> ProgressReport:
    uid = h.job()["metadata"]["uid"]
    return ProgressReport(namespace=NS, job="tf", uid=uid, replica=replica,
                          replica_type="Worker", replica_index=0, attempt=0, session=session,
                          seq=step, step=step, total=100, epoch=None, metrics={"loss": 0.5})


def progress_controller(kube: FakeKube, clock: FakeClock
                        ) -> AbstractAsyncContextManager[Harness]:
    """A controller with the progress gate served (a store of its own: a fresh process)."""
    return controller_on(kube, clock, [PROGRESS], progress=ProgressStore(clock),
                         progress_status_interval=INTERVAL)


def store(h: Harness) -> ProgressStore:
    gate = h.controller.gates.gates[0]
    assert isinstance(gate, ProgressGate)
    return gate.store


async def running_job(h: Harness, deadline: int | None = None, action: str = "Fail") -> None:
    h.submit("tf", Chief=1, Worker=1)
    if deadline is not None:
        doc = h.job()
        doc["spec"]["runPolicy"] = {"progressDeadlineSeconds": deadline,
                                    "progressDeadlineAction": action}
        h.kube.put(TFJOBS, doc)
    await h.reconcile("tf")
    for pod in h.pod_names():
        h.set_pod(pod, "Running")
    h.clock.advance(2)
    await h.reconcile("tf")
    h.clock.advance(2)
    await h.reconcile("tf")
    assert h.status()["state"] == "Running", h.status()


def test_the_gate_is_wired_and_served_only_with_a_store() -> None:
    assert PROGRESS in FACTORIES


async def test_a_report_reaches_the_status_and_passes_are_asked_once_per_interval() -> None:
    async with progress_controller(FakeKube(), FakeClock()) as h:
        await running_job(h)
        queue = h.controller.queue
        store(h).apply(report(h, 10), h.key("tf"))
        assert h.key("tf") in queue._queued  # the first report: a pass now
        await h.reconcile("tf")
        progress = h.status()["progress"]
        assert (progress["step"], progress["totalSteps"], progress["replica"]) == \
            (10, 100, "tf-worker-0")
        assert progress["summary"] == "10/100 (10%)" and progress["metrics"] == {"loss": 0.5}
        # Reports within the interval: one timer for the interval's end, no pass now.
        queue._queued.discard(h.key("tf"))
        h.clock.advance(5)
        store(h).apply(report(h, 11), h.key("tf"))
        store(h).apply(report(h, 12), h.key("tf"))
        assert h.key("tf") not in queue._queued
        assert h.key("tf") in queue._timers
        remaining = queue._timers[h.key("tf")].when() - asyncio.get_running_loop().time()
        assert INTERVAL - 6 < remaining <= INTERVAL - 5


async def test_a_stall_fails_the_job_and_an_operator_restart_keeps_its_clock() -> None:
    kube, clock = FakeKube(), FakeClock()
    async with progress_controller(kube, clock) as h:
        await running_job(h, deadline=120)
        store(h).apply(report(h, 10), h.key("tf"))
        await h.reconcile("tf")
        assert h.status()["progress"]["step"] == 10
        clock.advance(100)
        await h.reconcile("tf")
        assert h.status()["state"] == "Running"
    # A new operator: nothing reported to it yet; the status kept when training last moved.
    async with progress_controller(kube, clock) as h:
        assert store(h).snapshot(h.job()["metadata"]["uid"]) is None
        clock.advance(10)
        await h.reconcile("tf")
        assert h.status()["state"] == "Running"  # 110 s since step 10: not yet
        clock.advance(10)
        await h.reconcile("tf")
        status = h.status()
        assert status["state"] == "Failed", status
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "ProgressDeadlineExceeded"
        assert "step 10 last advanced at" in failed["message"]
        stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
        assert stalled["status"] == "True"


async def test_progress_keeps_the_stall_away_and_a_deleted_job_is_forgotten() -> None:
    async with progress_controller(FakeKube(), FakeClock()) as h:
        await running_job(h, deadline=120)
        uid = h.job()["metadata"]["uid"]
        for step in range(1, 5):
            h.clock.advance(100)
            store(h).apply(report(h, step), h.key("tf"))
            await h.reconcile("tf")
        assert h.status()["state"] == "Running"
        assert not any(c["type"] == "Stalled" for c in h.status()["conditions"])
        h.controller._forget(h.key("tf"))  # (the informer saw the job deleted)
        assert store(h).snapshot(uid) is None
