"""Failure rules for a replica whose pod the platform took (issue 39): kube-scheduler's
preemption, the Eviction API, the taint manager never leave a Failed pod on a real cluster;
they mark it (DisruptionTarget) and delete it. Such a loss is a failure that a rule
matching Preempted, Evicted or NodeLost decides, exactly as for a Failed disrupted pod
(`run._failed`); a loss no rule decides stays a loss, recorded as the default rule
`disruption` (Ignore), as a Failed disrupted pod is.

Why apart: the paths that meet a loss (a pod being deleted, a pod gone, a shard of an
attempt lost) each ask `_lost_by_rule` before they count the loss, and obey in one way."""

from __future__ import annotations

from trainjobs.api.failure_policy import FailureAction
from trainjobs.core.failure_rules import disruption_reason
from trainjobs.core.observed import ObservedPod, PodPhase
from trainjobs.plugin.types import Replica

from .rules import RESTARTS, _failure_words, _record, _restart_scope, _rule_for
from .state import _State


def _lost_by_rule(state: _State, replica: Replica, name: str, uid: str, cause: str,
                  pod: ObservedPod | None = None) -> bool:
    """Whether a rule decided the loss of replica `replica`'s pod `name` (uid `uid`, taken
    for `cause`): True when the caller must not count it as a loss (the job fails, or the
    loss counts as a failure and its rule's restart applies). A loss whose cause names no
    disruption of the platform's (a user's delete), or already counted, is the caller's."""
    reason = disruption_reason(cause)
    if reason is None or not uid or uid in state.counted:
        return False
    seen = pod or ObservedPod(name=name, uid=uid, replica_type_lower=replica.type.lower(),
                              index=replica.index, phase=PodPhase.FAILED, disrupted=True,
                              disruption=cause)
    decision = _rule_for(state, replica.type, seen, reason)
    if decision is None:
        if not any(r.pod_uid == uid for r in state.status.failures or ()):
            _record(state, seen, replica.type, reason, "disruption", FailureAction.IGNORE,
                    None, event=False)
        return False
    if decision.action is FailureAction.IGNORE or (
            state.kind.restart_together and decision.action is not FailureAction.FAIL_JOB):
        return False  # a loss, as before (replicas that restart together: a new attempt)
    what = f"replica {replica.type} {replica.index} (pod {name}) was lost: {cause}"
    state.counting.add(uid)
    state.started[replica.type].discard(replica.index)
    state.lost_names.add(name)
    if decision.action is FailureAction.FAIL_JOB:
        if state.failure is None:
            state.failure = ("FailurePolicy", f"{what}; {_failure_words(state, decision)}")
        return True
    state.recreations[replica.type] = state.recreations.get(replica.type, 0) + 1
    if decision.action in RESTARTS:
        _restart_scope(state, replica.type, decision.action)
    state.restarting = True
    return True
