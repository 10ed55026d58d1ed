"""What every path deletes: the one sweep over the job's pods (a deletion cut off half-way is
done again), and what goes with the replicas (the pods a plugin added, a PodGroup)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from datetime import timedelta

from trainjobs.core.deletions import DeleteReason
from trainjobs.core.observed import ObservedPod

from .inputs import PlannerSettings
from .state import _delete_pod, _requeue, _State


def _finish_unfinished_delete(state: _State, pod: ObservedPod,
                              settings: PlannerSettings) -> None:
    """Delete again a pod whose zero-grace deletion was cut off half-way (or wait for it)."""
    if pod.delete_due is None:
        return
    left = settings.unfinished_delete - (state.now - pod.delete_due)
    if left <= timedelta(0):
        _delete_pod(state, pod, DeleteReason.UNFINISHED_DELETE)
    else:
        _requeue(state.plan, left.total_seconds())


def _sweep(state: _State, pods: Sequence[ObservedPod], settings: PlannerSettings,
           goes: Callable[[ObservedPod], bool], reason: DeleteReason) -> None:
    """The one pass over the job's pods for what every path deletes: a pod whose deletion
    was cut off half-way is deleted again (`_finish_unfinished_delete`), any other pod being
    deleted is left to go, and a pod that is not is deleted when `goes(pod)` (a scaled-down
    replica, cleanPodPolicy, a suspended or queued job)."""
    for pod in pods:
        if pod.deleting:
            _finish_unfinished_delete(state, pod, settings)
        elif goes(pod):
            _delete_pod(state, pod, reason)


def _without_replicas(state: _State, pods: Sequence[ObservedPod], extras: AbstractSet[str],
                      settings: PlannerSettings) -> None:
    """The replicas are going: so do the pods plugins added for them (a managed Redis) and
    the objects that exist only with them (a PodGroup)."""
    state.plan.delete_pods.extend(_extra_pods(extras, pods, state.plan.delete_pods))
    state.plan.delete_extras.extend(_with_replicas(extras, settings))


def _extra_pods(extras: AbstractSet[str], pods: Sequence[ObservedPod],
                deleting: list[str]) -> list[str]:
    """Names of the pods among a plugin's extra objects, not already listed."""
    listed = {p.name for p in pods} | set(deleting)
    return sorted(name for kind, _, name in (ref.partition("/") for ref in extras)
                  if kind == "Pod" and name not in listed)


def _with_replicas(extras: AbstractSet[str], settings: PlannerSettings) -> list[str]:
    """The extra objects (not Pods) that go whenever the replicas go, e.g. a PodGroup."""
    return sorted(ref for ref in extras
                  if ref.partition("/")[0] in settings.with_replicas_kinds - {"Pod"})
