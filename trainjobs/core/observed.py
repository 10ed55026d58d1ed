"""What the core knows of a job's pods, reduced to the facts the planner decides on.

Why a reduced view: the planner must be a pure function that both backends can feed. The
Kubernetes backend builds an `ObservedPod` from a core/v1 Pod (`from_pod`); the local backend
builds one from a process. The caches keep only these fields, which is what makes 20,000 pods
cheap to hold.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from trainjobs.core.render import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_REPLICAS,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)

__all__ = ["DISRUPTION_REASONS", "UNRUNNABLE_REASONS", "GonePod", "ObservedPod", "PodPhase",
           "attempt_of", "from_pod", "loss_reason"]

# Long scheduler messages are cut: they end up in the job's status.
MESSAGE_LIMIT = 300


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


# A pod that ended for one of these reasons was taken by the cluster (preemption, eviction,
# node loss), not failed by the program: it is recreated and not counted against backoffLimit.
DISRUPTION_REASONS = frozenset({
    "Evicted", "Preempting", "Preempted", "NodeLost", "NodeShutdown", "Shutdown", "Terminated",
    "UnexpectedAdmissionError", "OutOfcpu", "OutOfmemory", "NodeAffinity",
})
# Containers waiting for one of these reasons may never start; past a grace period the job
# fails with the reason rather than hanging forever.
UNRUNNABLE_REASONS = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError",
})


@dataclass(frozen=True, slots=True)
class ObservedPod:
    """One pod of a job as last seen."""

    name: str
    uid: str
    replica_type_lower: str
    index: int
    phase: PodPhase
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    restarts: int = 0
    deleting: bool = False
    disrupted: bool = False
    waiting_reason: str = ""
    created: datetime | None = None
    # The last in-place restart's exit (OnFailure/Always): what a backoffLimit message names.
    last_exit_code: int | None = None
    last_reason: str = ""
    # The job's attempt the pod was made for (replicas that restart together); None: unknown.
    attempt: int | None = None
    # Why the scheduler cannot place it (the PodScheduled condition's message), if it cannot.
    unschedulable: str = ""
    # Why the cluster takes it (the DisruptionTarget condition: "PreemptionByScheduler:
    # ..."), or the disruption reason of its status, if it is taken.
    disruption: str = ""
    # The replica counts its environment was rendered for (render's ANNOTATION_REPLICAS);
    # empty when unknown (a pod from an older version, the local runtime).
    replicas_rendered: str = ""
    # Since when it is marked for deletion with no grace period left (deletionTimestamp with
    # deletionGracePeriodSeconds 0): such a pod should be gone at once; one still seen later
    # had its deletion cut off half-way (see planner.PlannerSettings.unfinished_delete).
    delete_due: datetime | None = None

    @property
    def active(self) -> bool:
        return not self.deleting and self.phase in (PodPhase.PENDING, PodPhase.RUNNING,
                                                    PodPhase.UNKNOWN)


@dataclass(frozen=True, slots=True)
class GonePod:
    """A started pod that went without the operator deleting it, as the backend last saw
    it: its uid (a loss already counted while it terminated is not counted again) and why."""

    uid: str
    cause: str
    # The job's attempt the pod was made for (replicas that restart together): a pod of an
    # attempt that is over going is no loss of the current one. None: not known.
    attempt: int | None = None


_REASON_FIRST = re.compile(r"([A-Z][A-Za-z]+)(?::|$)")


def loss_reason(cause: str) -> str:
    """The reason a lost replica's status names, from the cause its ReplicaLost event gives:
    the API's own word where it said one (the DisruptionTarget condition's reason:
    PreemptionByScheduler, EvictionByEvictionAPI, TerminationByKubelet,
    DeletionByTaintManager, DeletionByPodGC; or a Failed pod's status reason: Evicted,
    NodeLost, ...), else Deleted (the operator saw the pod deleted, by a user or a
    controller that says nothing) or Disappeared (it did not see it go: gone while it was
    not running, e.g. restarting)."""
    found = _REASON_FIRST.match(cause)
    if found:
        return found.group(1)
    return "Disappeared" if cause.startswith("its pod disappeared") else "Deleted"


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


def from_pod(pod: dict[str, Any], container_name: str) -> ObservedPod | None:
    """The observed view of a core/v1 Pod (as JSON), or None when it is not a replica pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        index = int(labels[LABEL_REPLICA_INDEX])
        rtype = labels[LABEL_REPLICA_TYPE]
    except (KeyError, ValueError):
        return None
    status = pod.get("status") or {}
    statuses = list(status.get("containerStatuses") or [])
    main = next((s for s in statuses if s.get("name") == container_name),
                statuses[0] if statuses else None)
    exit_code: int | None = None
    reason = status.get("reason") or ""
    message = status.get("message") or ""
    waiting = ""
    for cs in ([main] if main else []) + [s for s in statuses if s is not main]:
        state = cs.get("state") or {}
        term = state.get("terminated")
        if term is not None and exit_code is None and (cs is main or term.get("exitCode")):
            exit_code = int(term.get("exitCode", 0))
            if not reason:
                reason = term.get("reason") or ""
            if not message:
                message = term.get("message") or ""
        wait = state.get("waiting")
        if wait and not waiting:
            waiting = wait.get("reason") or ""
            if waiting in UNRUNNABLE_REASONS and not message:
                message = wait.get("message") or ""
    last_exit_code: int | None = None
    last_reason = ""
    for cs in ([main] if main else []) + [s for s in statuses if s is not main]:
        last = (cs.get("lastState") or {}).get("terminated")
        if last is not None:
            last_exit_code = int(last.get("exitCode", 0))
            last_reason = last.get("reason") or ""
            break
    unschedulable, disruption = _conditions(status.get("conditions") or [])
    if not disruption and reason in DISRUPTION_REASONS:
        disruption = f"{reason}: {message}" if message else reason
    disrupted = bool(disruption)
    return ObservedPod(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        replica_type_lower=_shared(rtype),
        index=index,
        phase=PodPhase(status.get("phase") or "Pending"),
        exit_code=exit_code,
        reason=_shared(reason),
        message=message,
        restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
        deleting=bool(meta.get("deletionTimestamp")),
        disrupted=disrupted,
        waiting_reason=_shared(waiting),
        created=_parse_time(meta.get("creationTimestamp")),
        last_exit_code=last_exit_code,
        last_reason=_shared(last_reason),
        attempt=attempt_of(meta),
        unschedulable=unschedulable,
        disruption=disruption[:MESSAGE_LIMIT],
        replicas_rendered=_shared(str((meta.get("annotations") or {}).get(ANNOTATION_REPLICAS,
                                                                          ""))),
        delete_due=_parse_time(meta.get("deletionTimestamp"))
        if meta.get("deletionGracePeriodSeconds") == 0 else None,
    )


def _shared(value: str) -> str:
    """One copy of a string many pods hold (a replica type, a reason, the replica counts),
    instead of one per cached pod (20,000 of them at scale)."""
    return sys.intern(value) if isinstance(value, str) else value


def attempt_of(meta: dict[str, Any]) -> int | None:
    """The attempt a pod's metadata records, if any (and if it is a number)."""
    value = (meta.get("annotations") or {}).get(ANNOTATION_ATTEMPT)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _conditions(conditions: list[dict[str, Any]]) -> tuple[str, str]:
    """(why it cannot be scheduled, why the cluster takes it) from a pod's conditions."""
    unschedulable = disruption = ""
    for cond in conditions:
        kind, true = cond.get("type"), cond.get("status") == "True"
        text = str(cond.get("message") or "")
        if kind == "PodScheduled" and not true and cond.get("reason") == "Unschedulable":
            unschedulable = (text or "Unschedulable")[:MESSAGE_LIMIT]
        elif kind == "DisruptionTarget" and true:
            why = str(cond.get("reason") or "DisruptionTarget")
            disruption = f"{why}: {text}" if text else why
    return unschedulable, disruption
