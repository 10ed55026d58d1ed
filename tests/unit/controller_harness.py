"""A controller on the fake transport and a fake clock, for its unit tests.

The controller's real informers list and watch the fake (tests/unit/fake_kube.py); a test
decides when the watches see a change (`sync`), reconciles a job itself (`reconcile`: no work
queue workers run, so nothing happens behind its back), and moves time with `clock.advance`.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from trainjobs.kube import PODS, Resource, job_resource
from trainjobs.kube.informer import Informer
from trainjobs.kueue.reconcile import KueueSettings
from trainjobs.operator.controller import Controller, ControllerSettings
from trainjobs.operator.gates import GateFactory, Gates
from trainjobs.operator.gates.kueue import NAMESPACES, Queueing
from trainjobs.operator.memory import JobMemory

from .fake_kube import FakeKube
from .helpers import PLUGINS, tfjob

NS = "team-a"
T0 = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    """Monotonic and wall time that move only when the test says so."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = T0

    def monotonic(self) -> float:
        return self.mono

    def now(self) -> datetime:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += timedelta(seconds=seconds)


def _tfjob_resource() -> Resource:
    fw = PLUGINS.framework_for("TfJob")
    assert fw is not None, "the TfJob plugin is not installed"
    return job_resource(fw.kind, fw.plural, fw.group, fw.version)


TFJOBS = _tfjob_resource()


@dataclass
class Harness:
    kube: FakeKube
    clock: FakeClock
    controller: Controller

    async def sync(self) -> None:
        """Let the watches see every change made so far, the handlers run, and the Events
        posted so far be written."""
        await self.controller.events.flush()
        self.kube.deliver()
        for _ in range(100):
            await asyncio.sleep(0)
            if not self.kube.pending_events():
                break
        await asyncio.sleep(0)

    @property
    def kueue(self) -> Queueing:
        """The controller's Kueue gate (`queueing_controller`)."""
        gate = next((g for g in self.controller.gates.gates if isinstance(g, Queueing)), None)
        assert gate is not None, "no Kueue gate: use queueing_controller"
        return gate

    async def reconcile(self, name: str) -> None:
        await self.sync()
        await self.controller.reconcile(self.key(name))
        await self.sync()

    def key(self, name: str) -> str:
        return f"TfJob/{NS}/{name}"

    def submit(self, name: str = "tf", restart: str | None = None, **counts: int) -> None:
        doc = tfjob(name, **(counts or {"Chief": 1, "Worker": 2}))
        if restart is not None:
            for rspec in doc["spec"]["replicaSpecs"].values():
                rspec["restartPolicy"] = restart
        doc["metadata"].update(namespace=NS, generation=1)
        self.kube.put(TFJOBS, doc)

    def job(self, name: str = "tf") -> dict[str, Any]:
        return self.kube.objects[(TFJOBS.plural, NS, name)]

    def status(self, name: str = "tf") -> dict[str, Any]:
        return dict(self.job(name).get("status") or {})

    def memory(self, name: str = "tf") -> JobMemory | None:
        return self.controller.memory.get(self.key(name))

    def pod_names(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.kube.of(PODS, NS)]

    def set_pod(self, name: str, phase: str, exit_code: int | None = None) -> None:
        """The kubelet reports a pod's phase (and its container's exit code)."""
        pod = copy.deepcopy(self.kube.objects[(PODS.plural, NS, name)])
        state: dict[str, Any] = {"running": {}}
        if exit_code is not None:
            state = {"terminated": {"exitCode": exit_code,
                                    "reason": "Completed" if exit_code == 0 else "Error"}}
        pod["status"] = {"phase": phase, "containerStatuses": [
            {"name": "tensorflow", "restartCount": 0, "state": state}]}
        self.kube.put(PODS, pod)

    def status_writes(self) -> int:
        return len(self.kube.made("PATCH", "TfJob"))


@asynccontextmanager
async def running_controller(**settings: Any) -> AsyncIterator[Harness]:
    """A controller of namespace NS with its informers synced, on a fake API and clock."""
    async with controller_on(FakeKube(), FakeClock(), **settings) as h:
        yield h


@asynccontextmanager
async def controller_on(kube: FakeKube, clock: FakeClock,
                        gate_factories: Sequence[GateFactory] | None = None, **settings: Any
                        ) -> AsyncIterator[Harness]:
    """A controller on an existing fake API and clock, its informers synced: another
    operator process (one started after an earlier one was killed remembers nothing and
    lists everything afresh). With `gate_factories`, those gates are started (each process
    its own: a store in `settings` is that process's)."""
    controller = Controller(kube, PLUGINS,  # type: ignore[arg-type]
                            ControllerSettings(namespaces=(NS,), **settings), clock,
                            **({} if gate_factories is None else
                               {"gate_factories": gate_factories}))
    if gate_factories is not None:
        await controller.start_gates()
    poster = asyncio.create_task(controller.events.run())
    try:
        async with synced(controller.informers):
            yield Harness(kube, clock, controller)
    finally:
        await controller.queue.close()
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)


@asynccontextmanager
async def queueing_controller(settings: KueueSettings | None = None,
                              ns_labels: dict[str, str] | None = None
                              ) -> AsyncIterator[Harness]:
    """`running_controller` with Kueue admission on (its Queueing's informers synced too);
    with `ns_labels`, the Namespace object NS carries them (manageJobsWithoutQueueName reads
    them)."""
    async with running_controller(**({} if settings is None else {"kueue": settings})) as h:
        c = h.controller
        if ns_labels is not None:
            h.kube.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": NS, "namespace": "",
                                                 "labels": ns_labels}})
        gate = Queueing(h.kube, [NS], c.events, c.queue.add,  # type: ignore[arg-type]
                        settings, on_namespace=c._namespace_changed, clock=h.clock)
        c.gates = Gates([gate])
        async with synced(gate.informers):
            yield h


@asynccontextmanager
async def synced(informers: Sequence[Informer[Any]]) -> AsyncIterator[None]:
    """The informers run (on the fake) while the block runs, entered once all have synced."""
    tasks = [asyncio.create_task(i.run()) for i in informers]
    try:
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in informers)), 5)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
