"""The controller's gates (operator/gates): a second gate is one factory, and the controller
obeys it without knowing it; Gates adds their verdicts up; Result merges a pass's wishes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tests.unit.controller_harness import NS, FakeClock, Harness, synced
from tests.unit.fake_kube import FakeKube
from tests.unit.helpers import PLUGINS
from trainjobs.api.models import Job, JobStatus
from trainjobs.core.admission import Admission
from trainjobs.core.observed import ObservedPod
from trainjobs.core.render import RenderedJob
from trainjobs.kube.informer import Informer
from trainjobs.operator.controller import Controller, ControllerSettings
from trainjobs.operator.controller_settings import ControllerSettings as Settings
from trainjobs.operator.gates import FACTORIES, GateContext, Gates, Verdict
from trainjobs.operator.result import DONE, Result
from trainjobs.operator.watches import watches
from trainjobs.plugin.types import Framework


class HoldGate:
    """A gate that holds every job until told to let it run: what a checkpoint in flight or
    a stall would be, written as a test would write a new gate."""

    name = "hold"

    def __init__(self) -> None:
        self.open = False
        self.decided: list[str] = []
        self.gone: list[str] = []

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return []

    def watches_managed_by(self, manager: str) -> bool:
        return False

    async def decide(self, key: str, job: Job, framework: Framework, desired: RenderedJob,
                     pods: Sequence[ObservedPod]) -> Verdict:
        self.decided.append(key)
        if self.open:
            return Verdict(Admission(admitted=True))
        return Verdict(Admission.waiting("HeldByTest", "the test holds this job"),
                       Result.after(30))

    def annotate(self, key: str, uid: str, status: JobStatus) -> JobStatus:
        return status

    async def job_gone(self, key: str) -> Result:
        self.gone.append(key)
        return DONE

    def forget(self, key: str) -> None:
        pass


class HoldFactory:
    name = "hold"

    def __init__(self) -> None:
        self.gate = HoldGate()

    def watches(self, namespaces: Sequence[str | None], settings: Settings) -> int:
        return 0

    async def start(self, context: GateContext) -> HoldGate:
        return self.gate


async def test_a_second_gate_is_one_factory_and_the_controller_obeys_it() -> None:
    kube, clock, factory = FakeKube(), FakeClock(), HoldFactory()
    controller = Controller(kube, PLUGINS,  # type: ignore[arg-type]
                            ControllerSettings(namespaces=(NS,)), clock,
                            gate_factories=[factory])
    await controller.start_gates()
    assert controller.gates.gates == (factory.gate,)
    poster = asyncio.create_task(controller.events.run())
    try:
        async with synced(controller.informers):
            h = Harness(kube, clock, controller)
            h.submit("tf")
            await h.sync()
            result = await controller.reconcile(h.key("tf"))
            await h.sync()
            assert factory.gate.decided == [h.key("tf")]
            assert not h.pod_names(), "a held job gets no pod"
            status = h.status()
            assert status["state"] == "Queued"
            assert "HeldByTest" in str(status["conditions"])
            # The gate's wish to look again travels in the pass's result.
            assert result.requeue_after is not None and result.requeue_after <= 30

            factory.gate.open = True
            await h.reconcile("tf")
            assert h.pod_names(), "the gate let the job run: its pods are created"
            clock.advance(2)  # (past the status write's coalescing)
            await h.reconcile("tf")
            assert h.status()["state"] == "Created"

            controller.memory.clear()  # (as when the job is gone from the cache)
            assert await controller.reconcile(h.key("tf")) == DONE
            assert factory.gate.gone == [h.key("tf")]
    finally:
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)


async def test_no_gate_served_every_job_runs_as_without_gates() -> None:
    gates = Gates()
    assert not gates
    verdict = await gates.decide("k", None, None, None, [])  # type: ignore[arg-type]
    assert verdict == Verdict()


class Fixed:
    """A gate of a fixed verdict."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.informers: list[Informer[Any]] = []

    async def decide(self, *_: Any) -> Verdict:
        return self.verdict


async def test_gates_add_up_the_first_refusal_wins_and_results_merge() -> None:
    yes = Admission(admitted=True, cluster_queue="cq")
    no = Admission.waiting("Full", "no room")
    later = Admission.waiting("Later", "not yet")
    fixed: list[Any] = [Fixed(Verdict(None)), Fixed(Verdict(yes, Result.after(5))),
                        Fixed(Verdict(no, Result(backoff=True))),
                        Fixed(Verdict(later, Result.after(1)))]
    gates = Gates(fixed)
    verdict = await gates.decide("k", None, None, None, [])  # type: ignore[arg-type]
    assert verdict.admission is no
    assert verdict.result == Result(requeue_after=1, backoff=True)
    only_yes = Gates([Fixed(Verdict(None)), Fixed(Verdict(yes))])  # type: ignore[list-item]
    assert (await only_yes.decide("k", None, None, None, [])).admission is yes  # type: ignore[arg-type]


def test_result_merge_keeps_the_sooner_look_any_backoff_and_the_longer_hold() -> None:
    assert DONE.merge(DONE) == DONE
    assert Result.after(3).merge(DONE) == Result.after(3)
    assert DONE.merge(Result(hold=0.2)) == Result(hold=0.2)
    assert Result.after(3).merge(Result.after(1)) == Result.after(1)
    assert Result.after(3).merge(Result(backoff=True, hold=0.5)) == \
        Result(requeue_after=3, backoff=True, hold=0.5)
    assert Result.after(-2) == Result.after(0), "a wait already over is a look now"


def test_watches_count_each_factorys_watches() -> None:
    settings = ControllerSettings(namespaces=("a", "b"))
    assert watches(PLUGINS, settings, [HoldFactory()]) == watches(PLUGINS, settings, [])
    assert watches(PLUGINS, settings, FACTORIES) > watches(PLUGINS, settings, [])
