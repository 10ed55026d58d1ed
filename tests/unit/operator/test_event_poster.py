"""Events are posted off the reconcile (operator/events.py): a reconcile never waits for the
Events API, the queue is bounded (what does not fit is dropped and counted), and an Event's
time is the controller's clock's."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.controller_harness import T0, FakeClock, running_controller
from tests.unit.helpers import tfjob
from trainjobs.api.models import Job
from trainjobs.kube import Resource
from trainjobs.operator import metrics
from trainjobs.operator.events import EventRecorder


class StuckEvents:
    """An API whose Event creates never answer until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.bodies: list[dict[str, Any]] = []

    async def create(self, resource: Resource, namespace: str, body: dict[str, Any]) -> None:
        await self.release.wait()
        self.bodies.append(body)


def _job() -> Job:
    doc = tfjob("tf", Chief=1)
    doc["metadata"].update(namespace="team-a", uid="u-1")
    return Job.model_validate(doc)


async def test_post_never_waits_for_the_api_and_a_full_queue_drops_and_counts() -> None:
    kube = StuckEvents()
    recorder = EventRecorder(kube, FakeClock(), capacity=3, posters=1)  # type: ignore[arg-type]
    poster = asyncio.create_task(recorder.run())
    dropped = metrics.EVENTS_DROPPED._value.get()
    try:
        job = _job()
        for i in range(5):
            recorder.post(job, "Normal", f"R{i}", "m")  # returns at once, the API is stuck
        # Three queued, two dropped and counted.
        assert metrics.EVENTS_DROPPED._value.get() - dropped == 2
        await asyncio.sleep(0.01)  # the poster takes R0 and waits on the API
        recorder.post(job, "Normal", "R5", "m")  # room for one again
        recorder.post(job, "Normal", "R6", "m")
        assert metrics.EVENTS_DROPPED._value.get() - dropped == 3
        kube.release.set()
        await asyncio.wait_for(recorder.flush(), 5)
        assert [b["reason"] for b in kube.bodies] == ["R0", "R1", "R2", "R5"]
        assert kube.bodies[0]["firstTimestamp"] == T0.strftime("%Y-%m-%dT%H:%M:%SZ")
    finally:
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)


async def test_a_reconcile_does_not_wait_for_a_stuck_events_api() -> None:
    async with running_controller() as h:
        stuck = asyncio.Event()
        create = h.kube.create

        async def slow_events(resource: Resource, namespace: str, body: Any) -> None:
            if resource.kind == "Event":
                await stuck.wait()
            await create(resource, namespace, body)

        h.kube.create = slow_events  # type: ignore[method-assign]
        h.submit("tf")
        h.kube.deliver()
        await asyncio.sleep(0)
        await asyncio.wait_for(h.controller.reconcile(h.key("tf")), 5)
        assert h.pod_names(), "the pods were created while the Events API hung"
        assert not h.kube.of_events()
        stuck.set()
        await h.sync()
        assert any(e["reason"] == "Created" for e in h.kube.of_events())
