"""Failure rules in a pass (`runPolicy.failurePolicy`; the rules themselves are
core/failure_rules.py): the decision about a failed pod, made once (by uid) and recorded in
the status with its rule's use, and the restart of a replica type or of the whole job that
a rule asks for.

Why here and not in each path: the running path (`run._failed`), the attempts of replicas
that restart together (`attempts._next_attempt`) and the stall rule (`stall._stall`) each
meet failures; they ask `_rule_for` and obey, and every decision — a rule's or the default
rules' (the replica's restartPolicy) — is written the same way (`_record`: the status's
`failures`, an Event)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from trainjobs.api.failure_policy import FailureAction, FailureReason
from trainjobs.api.models import MAX_FAILURE_RECORDS, FailureRecord
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.failure_rules import (
    Failure,
    RuleDecision,
    classify,
    decide,
    describe_budget,
)
from trainjobs.core.observed import ObservedPod, PodPhase
from trainjobs.core.status import whole_seconds
from trainjobs.labels import LABEL_REPLICA_TYPE

from .inputs import Event
from .state import _delete_pod, _requeue, _State

#: Actions that start every replica of the rule's scope again.
RESTARTS = frozenset({FailureAction.RESTART_JOB, FailureAction.RESTART_REPLICA_TYPE})
#: What leaves a process the kubelet restarted in place as it is (it counts toward
#: backoffLimit as every in-place restart does).
IN_PLACE = frozenset({FailureAction.RESTART_IN_PLACE, FailureAction.IGNORE})


def _rule_for(state: _State, replica_type: str, pod: ObservedPod,
              reason: FailureReason | None = None) -> RuleDecision | None:
    """What the job's failurePolicy decides about `pod`'s failure (None: no rule matches,
    or the job has none: its restartPolicy decides). Decided once per pod: a pod counted in
    an earlier pass gets that pass's decision back from the status, its rule's budget
    untouched."""
    rules = state.job.spec.run_policy.failure_policy
    if not rules:
        return None
    if pod.uid in state.decisions:
        return state.decisions[pod.uid]
    decision: RuleDecision | None
    if pod.uid in state.counted:
        decision = _decided_before(state, pod)
    else:
        decision = _decide(state, pod, replica_type, reason or classify(pod))
    state.decisions[pod.uid] = decision
    return decision


def _decide(state: _State, pod: ObservedPod, replica_type: str,
            reason: FailureReason) -> RuleDecision | None:
    """Ask the rules about `pod`'s failure; a decision is kept in the status with its rule's
    use (`failureRuleUses`) and recorded (`_record`)."""
    rules = state.job.spec.run_policy.failure_policy or []
    failure = Failure(pod.name, pod.uid, replica_type, reason, pod.exit_code)
    decision = decide(rules, failure, state.status.failure_rule_uses or {},
                      whole_seconds(state.now))
    if decision is not None:
        state.status.failure_rule_uses = {k: list(v) for k, v in decision.uses.items()
                                          if v} or None
        _record(state, pod, replica_type, reason, decision.rule, decision.action,
                decision.budget_left, decision.escalated_from)
    return decision


def _in_place(state: _State, replica_type: str, pod: ObservedPod) -> RuleDecision | None:
    """The kubelet restarted `pod`'s process in place (restartPolicy OnFailure/Always) since
    the rules last looked: what they decide about it, judged by its last exit (None: no rule
    matches, or nothing new: it counts toward backoffLimit as every in-place restart does).
    Each restart is judged once (`status.restartsSeen`, by pod uid)."""
    rules = state.job.spec.run_policy.failure_policy
    seen = state.status.restarts_seen or {}
    if not rules or pod.restarts <= seen.get(pod.uid, 0):
        return None
    state.status.restarts_seen = {**seen, pod.uid: pod.restarts}
    reason = FailureReason.OOM_KILLED if pod.last_reason == "OOMKilled" else \
        FailureReason.ERROR
    return _decide(state, replace(pod, exit_code=pod.last_exit_code), replica_type, reason)


def _prune_seen(state: _State, pods: Sequence[ObservedPod]) -> None:
    """Forget the judged restarts of pods that are gone."""
    seen = state.status.restarts_seen
    if seen:
        alive = {p.uid for p in pods}
        state.status.restarts_seen = {u: n for u, n in seen.items() if u in alive} or None


def _decided_before(state: _State, pod: ObservedPod) -> RuleDecision | None:
    """The decision recorded for a pod already counted (None: the default rules' or not
    kept: it is handled as it was, without a rule)."""
    names = {r.name for r in state.job.spec.run_policy.failure_policy or ()}
    for record in reversed(state.status.failures or ()):
        if record.pod_uid == pod.uid and record.rule in names:
            return RuleDecision(record.rule, FailureAction(record.action), record.budget_left)
    return None


def _record(state: _State, pod: ObservedPod, replica_type: str, reason: FailureReason,
            rule: str, action: FailureAction, budget_left: int | None,
            escalated_from: tuple[str, ...] = (), event: bool = True) -> None:
    """Keep the decision in the status (the newest ten) and say it in an Event."""
    record = FailureRecord(time=whole_seconds(state.now), replica=pod.name, pod_uid=pod.uid,
                           replica_type=replica_type, exit_code=pod.exit_code,
                           reason=reason.value, rule=rule, action=action.value,
                           budget_left=budget_left,
                           escalated_from=list(escalated_from) or None)
    state.status.failures = [*(state.status.failures or ()), record][-MAX_FAILURE_RECORDS:]
    if not event:
        return
    code = "" if pod.exit_code is None else f" with exit code {pod.exit_code}"
    spent = "".join(f"rule {name}'s budget is spent; " for name in escalated_from)
    left = "" if budget_left is None else f" ({budget_left} left)"
    state.plan.events.append(Event(
        "Warning" if action is FailureAction.FAIL_JOB else "Normal", "FailureRule",
        f"{replica_type} pod {pod.name} failed{code} ({reason.value}): {spent}rule {rule}: "
        f"{action.value}{left}"))


def _restart_scope(state: _State, replica_type: str, action: FailureAction) -> None:
    """A rule restarts `replica_type` (RestartReplicaType) or every type (RestartJob): their
    pods created before now are recreated (`_marked`), now and in the next passes."""
    now = whole_seconds(state.now)
    keys = list(state.job.spec.replica_specs) if action is FailureAction.RESTART_JOB \
        else [replica_type]
    for key in keys:
        state.restart_marks[key] = now
    state.restarting = True


def _marked(state: _State, replica_type: str, pod: ObservedPod | None) -> bool:
    """Whether `pod` is one a rule's restart of its type has still to recreate: created
    (whole seconds, as the API keeps it) no later than the mark, as no pod of the type is
    created within the mark's second (`_hold_in_mark_second`)."""
    mark = state.restart_marks.get(replica_type)
    return mark is not None and pod is not None and not pod.deleting and \
        pod.created is not None and pod.created <= mark and pod.phase is not PodPhase.SUCCEEDED


def _hold_in_mark_second(state: _State) -> None:
    """No pod of a type a rule restarts is created within the second of its mark: such a
    pod's creationTimestamp (whole seconds) would equal the mark, and `_marked` could not
    tell it from the pods created before the decision in that second (pods that fail at
    once; seen on the real control plane), which the restart must recreate. Held a moment."""
    now = whole_seconds(state.now)
    held = {k.lower() for k, mark in state.restart_marks.items() if mark >= now}
    if not held:
        return
    creates = state.plan.create_pods
    kept = [b for b in creates if b["metadata"]["labels"].get(LABEL_REPLICA_TYPE) not in held]
    if len(kept) < len(creates):
        state.plan.create_pods = kept
        state.restarting = True
        _requeue(state.plan, (now + timedelta(seconds=1) - state.now).total_seconds())


def _restart_marked(state: _State, replica_type: str, index: int, pod: ObservedPod) -> None:
    state.started[replica_type].discard(index)
    state.restarting = True
    _delete_pod(state, pod, DeleteReason.NEW_ATTEMPT,
                f"a failure rule restarts the job's {replica_type} replicas")


def _failure_words(state: _State, decision: RuleDecision) -> str:
    rules = state.job.spec.run_policy.failure_policy or []
    rule = next((r for r in rules if r.name == decision.rule), None)
    if decision.spent and rule is not None and rule.budget is not None:
        return f"failurePolicy rule {rule.name}: its budget ({describe_budget(rule)}) is spent"
    return f"failurePolicy rule {decision.rule}: {decision.action.value}"

