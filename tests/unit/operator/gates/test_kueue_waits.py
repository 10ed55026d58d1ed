"""A queued job whose Workload names a priority class or flavor that does not exist backs off
on the work queue (as Kueue's reconciler returning an error) instead of running every second,
and runs again as soon as the missing object appears (its informer's event).

The controller runs on the fake API (tests/unit/fake_kube.py) with Kueue's side wired as in
`Controller.run`; passes are run by the test (`_handle`, the work queue's handler), and the
back-off is read from the queue's timers against the event loop's clock: nothing sleeps.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager

from tests.unit.controller_harness import NS, TFJOBS, Harness, queueing_controller
from trainjobs.kube import Resource
from trainjobs.kueue import constants as k
from trainjobs.operator.gates.kueue import (
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
)


def with_kueue() -> AbstractAsyncContextManager[Harness]:
    return queueing_controller()


def submit_queued(h: Harness, priority_class: str = "") -> None:
    h.submit("tf", Worker=2)
    doc = h.job()
    doc["metadata"]["labels"] = {k.LABEL_QUEUE_NAME: "queue",
                                 **({k.LABEL_PRIORITY_CLASS: priority_class}
                                    if priority_class else {})}
    h.kube.put(TFJOBS, doc)


def scheduled_in(h: Harness, key: str) -> float | None:
    """Seconds the work queue was asked to wait before it runs `key` again (None: no timer).

    The delay asked for, as the timer was set, not the time left on it: on a loaded machine
    milliseconds pass between setting the timer and reading it, and the time left read 0.04
    for a 0.05 s back-off."""
    timer = h.controller.queue._timers.get(key)
    if timer is None:
        return None
    when = timer.when()
    asked = [round(d, 2) for k, d, at in _ASKED if k == key and abs(at + d - when) < 1e-3]
    assert asked, f"the timer of {key} was not set through add_after"
    return asked[-1]


#: (key, delay, loop time) of every add_after the queue was asked (see `recording`).
_ASKED: list[tuple[str, float, float]] = []


def recording(h: Harness) -> None:
    """Record the delays the controller asks of its work queue (`scheduled_in`)."""
    queue = h.controller.queue
    add_after = queue.add_after

    def recorded(key: str, delay: float) -> None:
        _ASKED.append((key, delay, asyncio.get_running_loop().time()))
        add_after(key, delay)

    queue.add_after = recorded  # type: ignore[method-assign]


def put_cluster_object(h: Harness, resource: Resource, obj: dict[str, object]) -> None:
    h.kube.put(resource, {"apiVersion": k.API_VERSION, **obj})


async def test_a_missing_priority_class_backs_off_then_runs_when_it_appears() -> None:
    async with with_kueue() as h:
        recording(h)
        submit_queued(h, priority_class="gold")
        await h.sync()
        key = h.key("tf")
        delays = []
        for _ in range(6):
            await h.controller._handle(key)
            delays.append(scheduled_in(h, key))
            h.controller.queue._timers.pop(key).cancel()  # (as if it fired)
        # The queue's per-key back-off (base 0.05 s, doubling), not a pass every second.
        assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
        assert not h.kube.made("POST", "Workload")
        status = h.status()
        assert status["state"] == "Queued"
        assert 'workloadpriorityclasses.kueue.x-k8s.io "gold" not found' in str(status)

        put_cluster_object(h, WORKLOAD_PRIORITY_CLASSES, {
            "kind": "WorkloadPriorityClass", "metadata": {"name": "gold", "namespace": ""},
            "value": 500})
        await h.sync()
        # The class's event queues the job at once, without waiting for its back-off.
        assert key in h.controller.queue._queued
        await h.controller._handle(key)
        created = h.kube.made("POST", "Workload")
        assert len(created) == 1 and created[0].body is not None
        assert created[0].body["spec"]["priority"] == 500
        assert key not in h.controller.queue._failures  # the back-off starts over
        assert not h.kueue._waiting


async def test_a_missing_flavor_waits_for_the_flavor() -> None:
    async with with_kueue() as h:
        recording(h)
        submit_queued(h)
        await h.sync()
        key = h.key("tf")
        await h.controller._handle(key)  # creates the Workload
        await h.sync()
        wl = h.kube.of(WORKLOADS, NS)[0]
        wl["status"] = {
            "conditions": [
                {"type": c, "status": "True", "reason": c, "message": "",
                 "lastTransitionTime": "2024-01-01T12:00:00Z"}
                for c in (k.COND_QUOTA_RESERVED, k.COND_ADMITTED)],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "worker", "count": 2, "flavors": {"cpu": "spot"}}]}}
        h.kube.put(WORKLOADS, wl)
        await h.sync()
        h.controller.queue._queued.discard(key)
        await h.controller._handle(key)
        assert scheduled_in(h, key) == 0.05  # (the first back-off)
        h.controller.queue._timers.pop(key).cancel()
        h.clock.advance(1.0)  # (past the status write's coalescing)
        await h.controller._handle(key)
        assert scheduled_in(h, key) == 0.1
        assert not h.pod_names()  # no pod before the flavor's node labels are known
        assert "FlavorNotFound" in str(h.status())

        put_cluster_object(h, RESOURCE_FLAVORS, {
            "kind": "ResourceFlavor",
            "metadata": {"name": "spot", "namespace": ""},
            "spec": {"nodeLabels": {"pool": "spot"}}})
        await h.sync()
        assert key in h.controller.queue._queued
        await h.controller._handle(key)
        assert key not in h.controller.queue._failures
        assert h.pod_names() and all(
            h.kube.objects[("pods", NS, name)]["spec"]["nodeSelector"] == {"pool": "spot"}
            for name in h.pod_names())
