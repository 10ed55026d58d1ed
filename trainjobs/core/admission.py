"""Admission: what the gates (operator/gates; Kueue is one) decided about a job, as the planner
obeys it.

Why a value of its own: the planner must stay pure and know nothing of Kueue's objects. The
Kueue gate reads the job's Workload and the ResourceFlavors it names and reduces them to
this: may the job's replicas exist, and if not why (in Kueue's own words), must the running
ones stop without it counting as a failure (an eviction), and what each replica type's pods
get from the admission (the flavors' node labels and tolerations, the admission checks'
pod-set updates). `merge_into_pod` applies the latter to a rendered pod exactly as Kueue's
podset.Merge does (pkg/podset/podset.go at v0.19.2): a key the pod already has with another
value is a conflict, never silently overwritten.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainjobs.errors import TrainjobsError

__all__ = [
    "Admission",
    "Eviction",
    "PodSetChanges",
    "PodSetConflict",
    "Toleration",
    "merge_into_pod",
]


class PodSetConflict(TrainjobsError):
    """An admission asks to set a pod label, annotation or nodeSelector key the pod already
    has with another value. Kueue treats this as permanent (podset.IsPermanent): it finishes
    the Workload with reason FailedToStart; the job cannot start as admitted."""


@dataclass(frozen=True)
class Toleration:
    """A core/v1 Toleration; `operator` "" means Equal, as the API server defaults it."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def matches(self, other: Toleration) -> bool:
        """Kueue's utiltolerations.Equal: the same toleration, "" and Equal alike
        (core/v1 Toleration.MatchToleration compares key, operator, value and effect)."""
        return ((self.key, self.operator or "Equal", self.value, self.effect)
                == (other.key, other.operator or "Equal", other.value, other.effect))

    def manifest(self) -> dict[str, Any]:
        """The toleration as a pod spec writes it (empty fields left out)."""
        out: dict[str, Any] = {k: v for k, v in (("key", self.key), ("operator", self.operator),
                                                 ("value", self.value), ("effect", self.effect))
                               if v}
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Toleration:
        seconds = obj.get("tolerationSeconds")
        return cls(key=str(obj.get("key") or ""), operator=str(obj.get("operator") or ""),
                   value=str(obj.get("value") or ""), effect=str(obj.get("effect") or ""),
                   toleration_seconds=int(seconds) if seconds is not None else None)


@dataclass(frozen=True)
class PodSetChanges:
    """What an admission adds to the pods of one replica type (Kueue's PodSetInfo)."""

    count: int
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduling_gates: tuple[str, ...] = ()


@dataclass(frozen=True)
class Eviction:
    """The job must stop (its pods deleted, no restart counted, backoffLimit untouched) and
    wait to be admitted again. `reason` is the Workload's Evicted condition's: Preempted,
    PodsReadyTimeout, ClusterQueueStopped, LocalQueueStopped, AdmissionCheck, NodeFailures,
    Deactivated (or DeactivatedDueTo<cause>), ... or one of the job framework's own stop
    reasons (NotAdmitted, NoMatchingWorkload, WorkloadDeleted)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Admission:
    """Kueue's decision for one job.

    `admitted`: the job's replicas may exist (created with `pod_sets` applied). Otherwise
    none may: `reason`/`message` say why it waits (the Workload's QuotaReserved or Admitted
    condition, e.g. "couldn't assign flavors to pod set worker: insufficient unused quota for
    cpu in flavor default, 4 more needed"), and `eviction`, when set, says that pods that
    exist must be stopped and why. `pod_sets` is keyed by the replicaSpecs key.
    """

    admitted: bool
    reason: str = ""
    message: str = ""
    eviction: Eviction | None = None
    pod_sets: Mapping[str, PodSetChanges] = field(default_factory=dict)
    cluster_queue: str = ""
    workload: str = ""

    @classmethod
    def waiting(cls, reason: str, message: str, workload: str = "") -> Admission:
        return cls(admitted=False, reason=reason, message=message, workload=workload)


def _merge_map(target: dict[str, str], extra: Mapping[str, str], what: str) -> None:
    for key, value in extra.items():
        if key in target and target[key] != value:
            raise PodSetConflict(f"invalid admission check PodSetUpdate: conflict for {what}: "
                                 f"conflict for key={key}, value1={target[key]}, value2={value}")
    target.update(extra)


def merge_into_pod(pod: Mapping[str, Any], changes: PodSetChanges) -> dict[str, Any]:
    """A copy of `pod` with the admission's changes merged in (Kueue's podset.Merge):
    labels, annotations and nodeSelector added (a differing value is a `PodSetConflict`),
    tolerations and scheduling gates appended unless already present."""
    out = copy.deepcopy(dict(pod))
    meta = out.setdefault("metadata", {})
    spec = out.setdefault("spec", {})
    for key, extra, what in (("annotations", changes.annotations, "annotations"),
                             ("labels", changes.labels, "labels")):
        if extra:
            target = dict(meta.get(key) or {})
            _merge_map(target, extra, what)
            meta[key] = target
    if changes.node_selector:
        selector = dict(spec.get("nodeSelector") or {})
        _merge_map(selector, changes.node_selector, "nodeSelector")
        spec["nodeSelector"] = selector
    if changes.tolerations:
        present = list(spec.get("tolerations") or [])
        known = [Toleration.from_manifest(t) for t in present]
        for toleration in changes.tolerations:
            if not any(toleration.matches(k) for k in known):
                present.append(toleration.manifest())
                known.append(toleration)
        spec["tolerations"] = present
    if changes.scheduling_gates:
        gates = list(spec.get("schedulingGates") or [])
        names = {g.get("name") for g in gates}
        for gate in changes.scheduling_gates:
            if gate not in names:
                gates.append({"name": gate})
                names.add(gate)
        spec["schedulingGates"] = gates
    return out
