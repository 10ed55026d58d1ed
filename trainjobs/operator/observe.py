"""The planner's view of a job, from the caches and what this operator itself just did.

Why apart: the caches lag behind our own creates and deletes (expectations), and a pod that
went without our delete must be remembered until the next pass (`note_gone`); these small
rules decide which pods the planner counts, and a mistake in them starts attempts without a
cause (issue 36), so they are read and tested on their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from trainjobs.core.observed import GonePod, ObservedPod, PodPhase
from trainjobs.core.render import RenderedJob
from trainjobs.operator.cache import OwnedEntry
from trainjobs.operator.memory import JobMemory

__all__ = ["note_gone", "observed", "still_owed"]


def observed(entries: Iterable[OwnedEntry], mem: JobMemory, desired: RenderedJob,
             now: datetime) -> tuple[list[ObservedPod], set[str], set[str]]:
    """The job's pods, replica Services and extra objects as the planner must see them:
    `entries` (the owner index's, for the job) of this job (not an earlier one of the same
    name), a pod this operator is deleting marked as deleting though the cache does not show
    it yet, and what it created but the cache does not show yet as existing (a pod as just
    created, Pending at `now`)."""
    uid = mem.entry.uid
    creating, deleting = mem.expectations.pending()
    pods: dict[str, ObservedPod] = {}
    services: set[str] = set()
    extras: set[str] = set()
    for entry in entries:
        if entry.owner_uid != uid:
            continue  # left over from an earlier job of the same name; GC removes it
        ref = f"{entry.kind}/{entry.name}"
        if entry.pod is not None:
            pod = entry.pod
            if ref in deleting and not pod.deleting and \
                    mem.expectations.deleting(ref, pod.uid):
                pod = _replace_deleting(pod)
            pods[entry.name] = pod
        elif entry.kind == "Service" and entry.replica:
            services.add(entry.name)
        elif ref not in deleting:  # (a finished job's managed pod being deleted: gone)
            extras.add(ref)
    for ref in creating:
        kind, name = ref.split("/", 1)
        if kind == "Pod" and name in desired.pods and name not in pods:
            replica = desired.replicas[name]
            pods[name] = ObservedPod(name, "", replica.type_lower, replica.index,
                                     PodPhase.PENDING, created=now)
        elif kind == "Service" and name in desired.services:
            services.add(name)
        else:
            extras.add(ref)
    return list(pods.values()), services, extras


def note_gone(mem: JobMemory, entry: OwnedEntry) -> None:
    """A replica pod that had started went and this operator did not delete it: keep what it
    last showed of why (a DisruptionTarget condition) for the planner's ReplicaLost event.
    Only a hint: whether it was lost the planner decides from the status.

    A pod last seen Pending never ran: its going is no loss (docs/api.md), it is recreated
    silently. kube-scheduler deletes a preemption victim by name, with no uid precondition,
    and may do so again after the victim is gone (a second preemptor that chose the same
    victim): that DELETE takes the victim's replacement, which waits Pending."""
    if mem.entry.uid != entry.owner_uid or entry.pod is None or \
            entry.pod.phase is PodPhase.PENDING:
        return
    cause = entry.pod.disruption or "deleted by someone other than the operator"
    if mem.gone is None:
        mem.gone = {}
    mem.gone[entry.name] = GonePod(entry.pod.uid, cause, entry.pod.attempt)


def still_owed(mem: JobMemory, attempt: int, pods: list[ObservedPod]) -> frozenset[str]:
    """The pods of `attempt` this operator decided to create and has not seen yet."""
    owed_attempt, names = mem.owed or (-1, frozenset())
    if owed_attempt != attempt:
        return frozenset()
    return names - {p.name for p in pods}


def _replace_deleting(pod: ObservedPod) -> ObservedPod:
    return replace(pod, deleting=True)
