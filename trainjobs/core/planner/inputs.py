"""What the planner is given and gives back: the backend's settings (`PlannerSettings`), the
job's kind's rules (`KindRules`), what the backend knows of the job (`PlanInputs`), the `Plan`
with its `Event`s, and `retryable`, whether a failed pod may be recreated. Plain values in one
module, so that a backend imports them without importing any path of the planner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from trainjobs.api.models import JobStatus, RestartPolicy
from trainjobs.core.admission import Admission
from trainjobs.core.checkpoint import SavedCheckpoint
from trainjobs.core.deletions import PodDeletion
from trainjobs.core.observed import GonePod, ObservedPod


@dataclass(frozen=True)
class PlannerSettings:
    # How long a container may wait on an image pull or config error before the job fails.
    unrunnable_grace: timedelta = timedelta(seconds=120)
    # Kinds of extra objects (besides Pods) that exist only while the replicas do: deleted on
    # suspend and by a finished job's cleanup, recreated on resume (a gang PodGroup).
    with_replicas_kinds: frozenset[str] = frozenset()
    # A pod marked for deletion with grace period 0 is removed by the API server in the same
    # request; one still there this long after was left half-deleted (the request cut off
    # between setting deletionTimestamp and removing the object: seen when the operator was
    # killed mid-DELETE under etcd load). Nothing else finishes it where no kubelet runs the
    # pod, so the planner deletes it again (a DELETE of a pod already due is immediate).
    unfinished_delete: timedelta = timedelta(seconds=10)


@dataclass(frozen=True)
class KindRules:
    """What the job's kind (its `Framework`) tells the planner, as one value, so that a new
    per-kind rule is one field here, not a parameter on every path (a pass carries it on its
    state, `_State.kind`). `restart_together`: `Framework.replicas_restart_together`;
    `suspend_style`: `Framework.suspend_style` ("batch" as batch/v1 Jobs, "kubeflow" as
    training-operator)."""

    restart_together: bool = False
    suspend_style: str = "batch"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event (or a local log line) the backend should emit."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Plan:
    """What the backend should do now. Empty lists and an unchanged status mean: nothing."""

    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    create_services: list[dict[str, Any]] = field(default_factory=list)
    delete_services: list[str] = field(default_factory=list)
    create_extras: list[dict[str, Any]] = field(default_factory=list)
    delete_extras: list[str] = field(default_factory=list)  # `Kind/name`, never Pods
    status: JobStatus = field(default_factory=JobStatus)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    # Replicas that restart together: the pods of the attempt the backend is to create, now
    # or once its creates are no longer held, and those it still owes (`PlanInputs.owed` of
    # the next pass, less the pods it has seen by then).
    owe: frozenset[str] = frozenset()
    # Why each pod of `delete_pods` goes (pods a plugin added for the replicas: not listed).
    deletions: dict[str, PodDeletion] = field(default_factory=dict)

    @property
    def actions(self) -> int:
        return (len(self.create_pods) + len(self.delete_pods) + len(self.create_services)
                + len(self.delete_services) + len(self.create_extras) + len(self.delete_extras)
                + int(self.delete_job))


@dataclass(frozen=True)
class ProgressSeen:
    """What the backend knows of the job's training progress (its replicas' reports):
    `last_progress`, when the job's furthest step last advanced (None: never reported), that
    `step` and the `replica` that reported it, and when each reporting replica last reported
    (`last_reports`, replica name -> time). The stall rule (`stall.py`) reads it."""

    last_progress: datetime | None = None
    step: int | None = None
    replica: str = ""
    last_reports: Mapping[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointSeen:
    """What the backend knows of the job's checkpointing (runPolicy.checkpointTimeoutSeconds;
    `checkpoint.py`): `replica`, the pod name of the replica its kind declares
    (`trainjobs_checkpoint_replica`; "" none); `reporting`, whether that replica's current
    process reports progress (then it is asked in the reply to its reports, else by SIGTERM);
    `saved`, the acknowledgement the receiver holds (it answers request `saved.id`)."""

    replica: str = ""
    reporting: bool = False
    saved: SavedCheckpoint | None = None


@dataclass(frozen=True)
class PlanInputs:
    """What the backend knows of a job besides its spec and rendering: what exists, what it
    saw, and what holds it back. One type, so that a new input (an admission system's
    decision) is one new field, not a new parameter on every path.

    `pods`: the job's pods (including those the backend just created or deleted but its
    cache has not shown yet); `services` and `extras`: the names of the Services and extra
    objects (`Kind/name`) that exist. `lost_causes`: what the backend saw of pods that
    disappeared without the operator deleting them after they had started (pod name ->
    cause, e.g. the DisruptionTarget reason): lost, with that cause in the ReplicaLost event.
    Without it a loss is still seen from the status alone (a started index whose pod is
    gone), so an operator restart forgets none (the status may lag a pod's start by its
    write coalescing). `create_refused`: why the backend's creates for this job wait
    ("QuotaExceeded: ..."): the Created condition's reason and the pending replicas'
    pendingReason tell it. `creates_held`: seconds before the backend may create for this
    job again (a quota's back-off): the plan creates nothing and comes back then. `owed`
    (replicas that restart together): the pods of the current attempt this backend decided
    to create and has not seen created yet (a create that failed is retried); any other pod
    of the attempt that is missing was deleted, or its create was cut off by an operator
    restart: the attempt is broken and a fresh one starts (see `_next_attempt`).
    `admission`: what Kueue decided (None: the job is not queued). Not admitted: no replica
    may exist (`_queue`); admitted: the pods get the admission's flavors (`_admitted`).
    `progress`: what the replicas reported of training (None: nothing known; see
    `ProgressSeen`). `checkpoint`: what the backend knows of its checkpointing (None:
    nothing; see `CheckpointSeen`). `now`: the backend's clock (default: the system's).
    """

    pods: Sequence[ObservedPod] = ()
    services: AbstractSet[str] = frozenset()
    extras: AbstractSet[str] = frozenset()
    lost_causes: Mapping[str, GonePod] = field(default_factory=dict)
    create_refused: str = ""
    creates_held: float = 0.0
    owed: frozenset[str] = frozenset()
    admission: Admission | None = None
    progress: ProgressSeen | None = None
    checkpoint: CheckpointSeen | None = None
    now: datetime | None = None


def retryable(policy: RestartPolicy, pod: ObservedPod) -> bool:
    """Whether a Failed pod may be recreated (counted against backoffLimit)."""
    if policy is RestartPolicy.NEVER:
        return False
    if policy is RestartPolicy.EXIT_CODE:
        return pod.exit_code is None or pod.exit_code >= 128
    return True  # OnFailure/Always: a pod-level failure (the kubelet restarts in place)
