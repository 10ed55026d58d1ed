"""Replicas that restart together (`KindRules.restart_together`): which attempt should run,
when the current one is broken, the barrier while a pod of an earlier one lives, and which
pods belong to an attempt that is over."""

from __future__ import annotations

from collections.abc import Sequence

from trainjobs.api.failure_policy import FailureAction
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.observed import GonePod, ObservedPod, PodPhase
from trainjobs.core.render import RenderedJob, replica_counts
from trainjobs.plugin.types import Replica, ReplicaOutcome, ReplicaPhase

from .counts import _lost
from .inputs import retryable
from .losses import _lost_by_rule
from .rules import _rule_for
from .state import _delete_pod, _State


def _attempt_of(pod: ObservedPod, current: int) -> int:
    """A pod without a known attempt (created a moment ago, not seen yet) is the current's."""
    return current if pod.attempt is None else pod.attempt


def _next_attempt(state: _State, desired: RenderedJob, pods: Sequence[ObservedPod],
                  owed: frozenset[str]) -> None:
    """Replicas that restart together: a retryable failure (or a disruption) of a pod of the
    current attempt starts the next one, once. Its peers fail too as their group breaks
    (Gloo aborts, exit 1 or 134): those failures are the same attempt's, never counted.

    An attempt number is never used again once one of its pods went: a pod of the attempt
    missing (not owed) or being deleted, or pods rendered for other replica counts, start a
    fresh attempt too; so does a pod that carries a later attempt than the status (the
    status is written before any pod of an attempt is created, so that one is not known)."""
    current = state.job.status.attempt
    state.attempt = current
    carried = max((p.attempt for p in pods if p.attempt is not None), default=current)
    if carried > current:
        state.attempt = carried + 1
        state.attempt_cause = f"pods of attempt {carried} exist, later than the status's"
        return
    for pod in sorted(pods, key=lambda p: (not p.disrupted, p.replica_type_lower, p.index)):
        if pod.deleting or pod.phase is not PodPhase.FAILED or pod.name not in desired.pods or \
                _attempt_of(pod, current) != current:
            continue
        rtype = desired.replicas[pod.name].type
        policy = state.job.spec.replica_specs[rtype].restart_policy
        decision = _rule_for(state, rtype, pod)
        again = (pod.disrupted or retryable(policy, pod)) if decision is None else \
            decision.action is not FailureAction.FAIL_JOB
        if again:
            state.attempt = current + 1
            state.ends_attempt = pod.name
            state.attempt_cause = f"pod {pod.name} " + (
                f"was disrupted: {pod.disruption}" if pod.disrupted else
                f"failed with exit code {pod.exit_code}")
            return
    # A started shard whose pod went without a failure (preempted, evicted, deleted by
    # someone else) breaks the group as surely: counted as lost, then a new attempt.
    by_name = {p.name: p for p in pods}
    counted = state.counted
    for name, replica in desired.replicas.items():
        seen = by_name.get(name)
        hint = _hint(state, name)
        if seen is not None and seen.deleting and seen.uid in counted:
            continue  # counted while it terminates
        gone = seen is None and hint is not None and hint.uid not in counted
        if gone or (replica.index in state.started[replica.type] and
                    (seen is None or seen.deleting)):
            cause = (seen.disruption if seen else "") or (hint.cause if hint else "") or \
                "its pod disappeared (deleted, preempted or evicted by someone other than " \
                "the operator)"
            uid = seen.uid if seen else hint.uid if hint else ""
            if _lost_by_rule(state, replica, name, uid, cause, seen):
                return  # a rule fails the job: no new attempt
            _lost(state, replica, name, cause, seen.uid if seen else "")
            state.attempt = current + 1
            state.attempt_cause = f"replica {replica.type} {replica.index} (pod {name}) " \
                f"was lost: {cause}"
    broken = _broken(state, desired, pods, owed) if state.attempt == current else ""
    if broken:
        state.attempt = current + 1
        state.attempt_cause = f"attempt {current} is broken: {broken}"


def _broken(state: _State, desired: RenderedJob, pods: Sequence[ObservedPod],
            owed: frozenset[str]) -> str:
    """Whether the current attempt, some of whose pods exist, lost one before it ran or was
    never completed (an operator restart cut its creates off), or must change its replica
    counts: in each case some of its pods would be created again beside the others. Said in
    words ("" when it is not broken)."""
    current = state.job.status.attempt
    mine = {p.name: p for p in pods
            if p.name in desired.pods and _attempt_of(p, current) == current}
    if not mine:
        return ""  # a fresh attempt: nothing of it exists yet
    counts = replica_counts(state.job)
    for name, replica in desired.replicas.items():
        pod = mine.get(name)
        if pod is None and name not in owed and \
                replica.index not in state.completed[replica.type]:
            return f"pod {name} is missing and not owed by this operator"
        if pod is not None and pod.deleting:
            return f"pod {name} is being deleted"
        if pod is not None and pod.replicas_rendered and pod.replicas_rendered != counts:
            return f"pod {name} was rendered for other replica counts"
    return ""


def _earlier_alive(state: _State, desired: RenderedJob, pods: Sequence[ObservedPod]) -> bool:
    """Whether a pod of an earlier attempt still runs or may run (pending or running, even
    while it is being deleted), or holds a name the current attempt needs."""
    current = state.job.status.attempt
    return any(_attempt_of(p, current) < current and
               (p.name in desired.pods or p.phase in (PodPhase.PENDING, PodPhase.RUNNING,
                                                      PodPhase.UNKNOWN))
               for p in pods)


def _hint(state: _State, name: str) -> GonePod | None:
    """What the backend saw of pod `name` going, unless that pod belonged to an attempt that
    is over (the operator deleted it, perhaps an operator that has since been restarted)."""
    hint = state.lost_causes.get(name)
    if hint is not None and hint.attempt is not None and \
            hint.attempt != state.job.status.attempt:
        return None
    return hint


def _stale(state: _State, pod: ObservedPod) -> bool:
    """A pod of an attempt that is over (the pod that ended it is handled as a failure)."""
    if state.attempt is None or pod.deleting or pod.name == state.ends_attempt:
        return False
    return _attempt_of(pod, state.job.status.attempt) != state.attempt


def _restart_with_attempt(state: _State, replica: Replica, pod: ObservedPod) -> ReplicaOutcome:
    state.started[replica.type].discard(replica.index)
    state.restarting = True
    _delete_pod(state, pod, DeleteReason.NEW_ATTEMPT,
                f"attempt {state.attempt} begins: {state.attempt_cause}")
    return ReplicaOutcome(replica, ReplicaPhase.PENDING)
