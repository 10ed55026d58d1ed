"""A Workload's assignment: from its admission (the flavors, the pod-set updates) to what its
pods get, and why it waits while it has none.

Why a copy of Kueue's code: the pods must land where the quota was counted. Kueue's
getPodSetsInfoFromStatus (reconciler.go:1737) and podset.FromAssignment / FromUpdate / Merge
(pkg/podset/podset.go) at v0.19.2 decide what an admission adds to a podSet's pods; this
module does the same, with the feature gates at their v0.19.2 defaults
(TopologyAwareScheduling and AssignQueueLabelsForPods on).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from trainjobs.core.admission import PodSetChanges, PodSetConflict, Toleration
from trainjobs.kueue import constants as k
from trainjobs.kueue.model import (
    MissingObject,
    PodSetAssignment,
    ResourceFlavor,
    TolerationSpec,
    Workload,
)

__all__ = ["FlavorNotFound", "pod_set_changes", "waiting_reason", "workload_phase"]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class FlavorNotFound(MissingObject):
    """The admission names a ResourceFlavor the cache does not hold (yet): Kueue's
    FromAssignment returns the Get error and the reconcile is retried."""

    def __init__(self, name: str) -> None:
        super().__init__("resourceflavors", name,
                         f'resourceflavors.kueue.x-k8s.io "{name}" not found')


def _toleration(spec: TolerationSpec) -> Toleration:
    return Toleration(spec.key, spec.operator, spec.value, spec.effect, spec.toleration_seconds)


class _Info:
    """podset.PodSetInfo while it is being built."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.node_selector: dict[str, str] = {}
        self.tolerations: list[Toleration] = []
        self.labels: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.gates: list[str] = []

    def merge(self, labels: Mapping[str, str], annotations: Mapping[str, str],
              node_selector: Mapping[str, str], tolerations: list[Toleration],
              check: str) -> None:
        """PodSetInfo.Merge: conflicting keys refused, tolerations not duplicated."""
        for what, mine, theirs in (("annotations", self.annotations, annotations),
                                   ("labels", self.labels, labels),
                                   ("nodeSelector", self.node_selector, node_selector)):
            for key, value in theirs.items():
                if key in mine and mine[key] != value:
                    raise PodSetConflict(
                        f'in admission check "{check}": invalid admission check PodSetUpdate: '
                        f"conflict for {what}: conflict for key={key}, value1={mine[key]}, "
                        f"value2={value}")
        self.annotations.update(annotations)
        self.labels.update(labels)
        self.node_selector.update(node_selector)
        for toleration in tolerations:
            if not any(toleration.matches(t) for t in self.tolerations):
                self.tolerations.append(toleration)

    def freeze(self) -> PodSetChanges:
        return PodSetChanges(count=self.count, node_selector=self.node_selector,
                             tolerations=tuple(self.tolerations), labels=self.labels,
                             annotations=self.annotations, scheduling_gates=tuple(self.gates))


def _from_assignment(assignment: PodSetAssignment, count: int,
                     flavors: Mapping[str, ResourceFlavor]) -> _Info:
    """podset.FromAssignment: each flavor once, its nodeLabels and tolerations. Kueue walks
    the resource->flavor map in Go's random order; here resources are taken in name order."""
    info = _Info(assignment.count if assignment.count is not None else count)
    if assignment.topology_assignment is not None:
        # No topologyRequest in trainjobs' podSets: Kueue injects the unconstrained one.
        info.annotations[k.ANNOTATION_PODSET_UNCONSTRAINED_TOPOLOGY] = "true"
        info.gates.append(k.TOPOLOGY_SCHEDULING_GATE)
    seen: set[str] = set()
    for resource in sorted(assignment.flavors):
        name = assignment.flavors[resource]
        if name in seen:
            continue
        flavor = flavors.get(name)
        if flavor is None:
            raise FlavorNotFound(name)
        info.node_selector.update(flavor.spec.node_labels)
        info.tolerations.extend(_toleration(t) for t in flavor.spec.tolerations)
        seen.add(name)
    return info


def pod_set_changes(wl: Workload, flavors: Mapping[str, ResourceFlavor],
                    replica_types: Mapping[str, str]) -> dict[str, PodSetChanges]:
    """What each replica type's pods get from `wl`'s admission, keyed by replicaSpecs key
    (`replica_types` maps podSet names to keys). Empty without an admission. Raises
    `FlavorNotFound` (retry) or `PodSetConflict` (permanent: Kueue finishes the Workload
    with reason FailedToStart, reconciler.go:629)."""
    admission = wl.status.admission
    if admission is None:
        return {}
    out: dict[str, PodSetChanges] = {}
    for i, assignment in enumerate(admission.pod_set_assignments):
        # Kueue pairs assignments with spec.podSets by position (getPodSetsInfoFromStatus).
        count = wl.spec.pod_sets[i].count if i < len(wl.spec.pod_sets) else 0
        info = _from_assignment(assignment, count, flavors)
        info.annotations[k.ANNOTATION_WORKLOAD] = wl.metadata.name
        info.labels[k.LABEL_PODSET] = assignment.name
        if k.LABEL_MULTIKUEUE_ORIGIN in wl.metadata.labels:
            info.labels[k.LABEL_MULTIKUEUE_WORKER_POD] = "true"
        info.labels[k.LABEL_LOCAL_QUEUE] = wl.spec.queue_name
        if len(admission.cluster_queue) <= 63 and _DNS1123_LABEL.match(admission.cluster_queue):
            info.labels[k.LABEL_CLUSTER_QUEUE] = admission.cluster_queue
        for check in wl.status.admission_checks:
            for update in check.pod_set_updates:
                if update.name == assignment.name:
                    info.merge(update.labels, update.annotations, update.node_selector,
                               [_toleration(t) for t in update.tolerations], check.name)
                    break
        key = replica_types.get(assignment.name)
        if key is not None:
            out[key] = info.freeze()
    return out


def waiting_reason(wl: Workload) -> tuple[str, str]:
    """Why a Workload that is not admitted waits, in Kueue's words: its QuotaReserved
    condition when false (e.g. Pending, "couldn't assign flavors to pod set worker:
    insufficient unused quota for cpu in flavor default, 4 more needed"); with quota reserved,
    the admission checks still pending (recordAdmissionCheckUpdate's "name: message; ...")
    or the Admitted condition; with neither, that Kueue has not looked at it yet."""
    reserved = wl.condition(k.COND_QUOTA_RESERVED)
    if reserved is not None and reserved.status == "True":
        pending = "; ".join(f"{c.name}: {c.message}" for c in wl.status.admission_checks
                            if c.state == k.CHECK_STATE_PENDING and c.message)
        admitted = wl.condition(k.COND_ADMITTED)
        if pending:
            return "AdmissionChecksPending", pending
        if admitted is not None:
            return admitted.reason, admitted.message
        return "QuotaReserved", reserved.message
    if reserved is not None:
        return reserved.reason, reserved.message
    if not wl.active:
        return "Deactivated", "The workload is deactivated"
    return "Pending", f"Workload {wl.metadata.name} is waiting for Kueue to evaluate it"


def workload_phase(wl: Workload) -> tuple[str, str]:
    """The Workload's phase and message for the job's `status.ownedObjects` (what
    `trainjobs status` shows): Finished, Evicted, Admitted, QuotaReserved or Pending, in
    that order of precedence (workload.Status, pkg/workload/workload.go:97, plus Evicted)."""
    for ctype in (k.COND_FINISHED, k.COND_EVICTED):
        cond = wl.condition(ctype)
        if cond is not None and cond.status == "True":
            if ctype == k.COND_EVICTED and wl.is_true(k.COND_ADMITTED):
                break  # evicted but not stopped yet: still holds its admission
            return ctype, f"{cond.reason}: {cond.message}" if cond.reason else cond.message
    if wl.is_true(k.COND_ADMITTED):
        admission = wl.status.admission
        return k.COND_ADMITTED, (f"Admitted by ClusterQueue {admission.cluster_queue}"
                                 if admission else "")
    message = waiting_reason(wl)[1]
    if wl.is_true(k.COND_QUOTA_RESERVED):
        return k.COND_QUOTA_RESERVED, message
    return "Pending", message
