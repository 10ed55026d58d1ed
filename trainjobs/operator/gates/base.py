"""Gates: the systems that decide whether a job's pods may run, must stop, or must wait.

Why a protocol and not a branch (controller-runtime composes its reconcilers the same way):
Kueue admission is one such system; a progress stall or a checkpoint in flight are others.
The controller knows none of them. Each pass it asks every started gate for a `Verdict`
about the job (`Gate.decide`: the gate may do its own I/O, e.g. write a Workload), hands the
planner the `Admission` they add up to, lets each gate add its part to the status
(`Gate.annotate`) and tells them when a job is gone (`job_gone`, `forget`). "Nothing
served" is the empty `Gates`: every job runs exactly as without any gate.

Adding a gate is one module with a `GateFactory` and one line in `gates.FACTORIES`. A factory is
asked at start whether its gate is served here (`start`, None: not) and, before there is a
client, how many watches its gate will hold (`watches`: the operator sizes its connection
pool from it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from trainjobs.api.models import Job, JobStatus
from trainjobs.core.admission import Admission
from trainjobs.core.observed import ObservedPod
from trainjobs.core.planner import PlanInputs
from trainjobs.core.render import RenderedJob
from trainjobs.kube import Kube
from trainjobs.kube.informer import Informer
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.events import EventRecorder
from trainjobs.operator.result import DONE, Result
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Framework

__all__ = ["GATE_INPUTS", "Gate", "GateContext", "GateFactory", "Gates", "Verdict"]


#: The planner's inputs a gate may give (`Verdict.inputs`): every `PlanInputs` field but
#: those the controller fills from its own caches.
GATE_INPUTS = frozenset(f.name for f in fields(PlanInputs)) - {
    "pods", "services", "extras", "lost_causes", "create_refused", "creates_held", "owed",
    "admission", "now"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one gate decided about a job this pass. `admission` None: this gate does not hold
    the job (it does not manage it); otherwise the planner obeys it (not admitted: nothing is
    created, and running pods stop without a failure when it says evicted). `result`: when the
    gate wants the job looked at again (e.g. its own write was refused on stale data: with
    back-off). `inputs`: what the gate knows that the planner reads (`PlanInputs` fields by
    name, one of `GATE_INPUTS`: the progress gate's `progress`, the checkpoint gate's
    `checkpoint`); the first gate that gives a field wins. A new gate with a new input is a
    new `PlanInputs` field and the gate's module: nothing here or in the controller."""

    admission: Admission | None = None
    result: Result = DONE
    inputs: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.inputs) - GATE_INPUTS
        if unknown:
            raise TypeError(f"a gate may not give the planner input(s) {sorted(unknown)}; "
                            f"it may give {sorted(GATE_INPUTS)}")


@dataclass(frozen=True)
class GateContext:
    """What a gate may use: the API, the watched namespaces (None: all), the controller's
    settings, where Events go, how to ask for a job's (or a namespace's jobs') next pass when
    something the gate watches changes (now, or after some seconds: an earlier request for
    the job wins), the controller's clock and the plugins (what the kinds declare)."""

    kube: Kube
    namespaces: Sequence[str | None]
    settings: ControllerSettings
    events: EventRecorder
    enqueue: Callable[[str], None]
    enqueue_namespace: Callable[[str], None]
    enqueue_after: Callable[[str, float], None]
    clock: Clock = SYSTEM_CLOCK
    plugins: PluginManager | None = None


class Gate(Protocol):
    """One started gate (see the module docstring)."""

    #: The gate's name in logs.
    name: str

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        """The caches the gate needs, started and synced with the controller's own."""
        ...

    def watches_managed_by(self, manager: str) -> bool:
        """Whether the gate still decides for a job another controller manages
        (`spec.managedBy` is `manager`): such a job's pods are never the operator's, but its
        gate may have objects to keep (MultiKueue's Workload in a manager cluster)."""
        ...

    async def decide(self, key: str, job: Job, framework: Framework, desired: RenderedJob,
                     pods: Sequence[ObservedPod]) -> Verdict:
        """This pass's verdict on `job` (its own writes done)."""
        ...

    def annotate(self, key: str, uid: str, status: JobStatus) -> JobStatus:
        """`status` with what the gate shows on the job (e.g. its Workload in
        `ownedObjects`); unchanged when it has nothing to add."""
        ...

    async def job_gone(self, key: str) -> Result:
        """The job of `key` is gone (a pass found no job): clean up what the gate made for
        it; the result says whether to look again."""
        ...

    def forget(self, key: str) -> None:
        """Drop what the gate remembers about `key` (the job is gone from the cache)."""
        ...


class GateFactory(Protocol):
    """Starts one kind of gate when it is served here."""

    name: str

    def watches(self, namespaces: Sequence[str | None], settings: ControllerSettings) -> int:
        """How many watches the gate will hold open if it starts."""
        ...

    async def start(self, context: GateContext) -> Gate | None:
        """The gate, or None when it is not served here (said in the log, once)."""
        ...


class Gates:
    """The started gates, asked in order as one. A job may run only if none holds it back:
    the first gate whose admission does not admit decides (its reason is the job's); when
    every gate that manages the job admits, the first one's admission (its pod-set changes)
    is the planner's."""

    name = "gates"

    def __init__(self, gates: Sequence[Gate] = ()) -> None:
        self.gates: tuple[Gate, ...] = tuple(gates)

    def __bool__(self) -> bool:
        return bool(self.gates)

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return [i for gate in self.gates for i in gate.informers]

    def watches_managed_by(self, manager: str) -> bool:
        return any(g.watches_managed_by(manager) for g in self.gates)

    async def decide(self, key: str, job: Job, framework: Framework, desired: RenderedJob,
                     pods: Sequence[ObservedPod]) -> Verdict:
        admitted: Admission | None = None
        refusing: Admission | None = None
        inputs: dict[str, object] = {}
        result = DONE
        for gate in self.gates:
            verdict = await gate.decide(key, job, framework, desired, pods)
            result = result.merge(verdict.result)
            for name, value in verdict.inputs.items():
                if value is not None:
                    inputs.setdefault(name, value)
            if verdict.admission is None:
                continue
            if not verdict.admission.admitted:
                refusing = refusing or verdict.admission
            else:
                admitted = admitted or verdict.admission
        return Verdict(refusing or admitted, result, inputs)

    def annotate(self, key: str, uid: str, status: JobStatus) -> JobStatus:
        for gate in self.gates:
            status = gate.annotate(key, uid, status)
        return status

    async def job_gone(self, key: str) -> Result:
        result = DONE
        for gate in self.gates:
            result = result.merge(await gate.job_gone(key))
        return result

    def forget(self, key: str) -> None:
        for gate in self.gates:
            gate.forget(key)
