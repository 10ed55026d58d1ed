"""Stalls: a Running job whose reported training step has not advanced for
`runPolicy.progressDeadlineSeconds` (Deployment's progressDeadlineSeconds is the model).

Why in the planner: the operator and `trainjobs run` must call the same job stalled at the same
moment and do the same about it. The clock starts when the job last became Running (a restart,
a resume or an admission starts it again), and moves on each time the job's furthest step
advances (`ProgressSeen.last_progress`). A job without a deadline is never called stalled,
whether it reports or not.

What a stall does: the `Stalled` condition (True, reason ProgressDeadlineExceeded, saying who
reported last and since when) and a Warning Event, once per stall; then
`progressDeadlineAction`: Report (nothing more), Restart (every replica starts again: a new
attempt where replicas restart together, otherwise every pod deleted and recreated; counted
against backoffLimit as one retryable failure of the replica that stopped reporting, by pod
uid, so never twice), or Fail (the job fails with the same reason). The condition goes False
when the step advances again (ProgressAdvanced), when the job runs again after a restart
(Restarted), or when the deadline is removed (ProgressDeadlineRemoved).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from trainjobs.api.failure_policy import FailureAction, FailureReason
from trainjobs.api.models import Condition, ConditionType, ProgressDeadlineAction
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.failure_rules import RuleDecision
from trainjobs.core.observed import ObservedPod
from trainjobs.core.status import current_condition, whole_seconds

from .inputs import Event, ProgressSeen
from .rules import _failure_words, _restart_scope, _rule_for
from .state import _after, _delete_pod, _requeue, _State

REASON = "ProgressDeadlineExceeded"


def _stall(state: _State, pods: Sequence[ObservedPod], progress: ProgressSeen | None) -> bool:
    """Decide on a stall this pass; whether every replica must start again (Restart), which
    the caller carries out (a new attempt, or `restart_stalled` per pod)."""
    policy = state.job.spec.run_policy
    deadline = policy.progress_deadline_seconds
    stalled = _stalled_condition(state)
    if deadline is None:  # (every job without a deadline: one look at its conditions)
        if stalled is not None:
            _set_stalled(state, "False", "ProgressDeadlineRemoved",
                         "runPolicy.progressDeadlineSeconds was removed")
        return False
    running = _running_since(state)
    if running is None:
        return False  # not Running (restarting, queued): the clock starts when it runs again
    last = progress.last_progress if progress is not None else None
    reference = max(running, whole_seconds(last)) if last is not None else running
    ends = _after(reference, deadline)
    if state.now < ends:
        if stalled is not None:
            advanced = last is not None and stalled.last_transition_time is not None and \
                last > stalled.last_transition_time
            _set_stalled(state, "False", *(
                ("ProgressAdvanced", f"step {progress.step if progress else '?'} reported "
                 f"at {_iso(last)}") if advanced and last is not None else
                ("Restarted", f"running again since {_iso(running)}")))
        _requeue(state.plan, (ends - state.now).total_seconds())
        return False
    message = _words(deadline, running, progress)
    action = policy.progress_deadline_action or ProgressDeadlineAction.REPORT
    newly = stalled is None or stalled.last_transition_time is None or \
        stalled.last_transition_time < reference
    if policy.failure_policy:
        quiet = counted_for_stall(pods, progress)
        key = _type_key(state, quiet)
        decision = _rule_for(state, key, quiet, FailureReason.STALLED) \
            if newly and quiet is not None and key is not None else None
        if decision is not None:
            return _obey_stall(state, message, quiet, key, decision)  # type: ignore[arg-type]
    if newly:
        _set_stalled(state, "True", REASON, message)
        if action is not ProgressDeadlineAction.FAIL:
            # (Fail: the job's failure Event, with the same reason, says it.)
            state.plan.events.append(Event("Warning", REASON, f"{message}; action "
                                           f"{action.value}"))
    if action is ProgressDeadlineAction.FAIL and state.failure is None:
        state.failure = (REASON, message)
    return action is ProgressDeadlineAction.RESTART


def _type_key(state: _State, pod: ObservedPod | None) -> str | None:
    if pod is None:
        return None
    return {k.lower(): k for k in state.job.spec.replica_specs}.get(pod.replica_type_lower)


def _obey_stall(state: _State, message: str, quiet: ObservedPod, key: str,
                decision: RuleDecision) -> bool:
    """A stall a failure rule matched (reason Stalled): the rule's action instead of
    progressDeadlineAction; whether every replica must start again."""
    _set_stalled(state, "True", REASON, message)
    words = _failure_words(state, decision)
    action = decision.action
    if action is FailureAction.FAIL_JOB:
        if state.failure is None:
            state.failure = (REASON, f"{message}; {words}")
        return False
    if action is FailureAction.IGNORE:
        return False
    if action is FailureAction.RESTART_JOB or state.kind.restart_together:
        return True  # counted once by the caller (`_count_stall`)
    if quiet.uid not in state.counted:
        state.recreations[key] = state.recreations.get(key, 0) + 1 + quiet.restarts
    state.counting.add(quiet.uid)
    if action is FailureAction.RESTART_REPLICA_TYPE:
        _restart_scope(state, key, action)
    else:
        state.restarting = True
        _delete_pod(state, quiet, DeleteReason.STALLED, f"{message}; {words}")
    return False


def _count_stall(state: _State, pods: Sequence[ObservedPod], progress: ProgressSeen | None
                 ) -> None:
    """Count the stall's restart once against backoffLimit, as a retryable failure of the
    replica that has gone longest without reporting (by its pod's uid: a pass repeated after
    an operator restart finds it counted)."""
    pod = counted_for_stall(pods, progress)
    if pod is None or pod.uid in state.counted:
        return
    key = {k.lower(): k for k in state.job.spec.replica_specs}.get(pod.replica_type_lower)
    if key is None:
        return
    state.recreations[key] = state.recreations.get(key, 0) + 1 + pod.restarts
    state.counting.add(pod.uid)


def counted_for_stall(pods: Sequence[ObservedPod], progress: ProgressSeen | None
                      ) -> ObservedPod | None:
    """The pod whose restart a stall counts against backoffLimit: the replica that has gone
    longest without reporting (by its pod name, as reports name their replica), else the
    first live pod by name."""
    live = sorted((p for p in pods if not p.deleting), key=lambda p: p.name)
    if progress is not None and progress.last_reports:
        quiet = min(progress.last_reports.items(), key=lambda kv: (kv[1], kv[0]))[0]
        for pod in live:
            if pod.name == quiet:
                return pod
    return live[0] if live else None


def _stalled_condition(state: _State) -> Condition | None:
    return next((c for c in state.status.conditions
                 if c.type is ConditionType.STALLED and c.status == "True"), None)


def _running_since(state: _State) -> datetime | None:
    """When the job last became Running, if it is Running (as last written)."""
    if current_condition(state.job.status) is not ConditionType.RUNNING:
        return None
    cond = next((c for c in state.job.status.conditions
                 if c.type is ConditionType.RUNNING and c.status == "True"), None)
    return cond.last_transition_time if cond is not None else None


def _set_stalled(state: _State, status: str, reason: str, message: str) -> None:
    conds = state.status.conditions
    new = Condition(type=ConditionType.STALLED, status=status,  # type: ignore[arg-type]
                    reason=reason, message=message[:1000],
                    last_transition_time=whole_seconds(state.now))
    for i, cond in enumerate(conds):
        if cond.type is ConditionType.STALLED:
            conds[i] = new
            return
    conds.append(new)


def _words(deadline: int, running: datetime, progress: ProgressSeen | None) -> str:
    """Who stopped and since when, in one line."""
    if progress is None or progress.last_progress is None:
        return (f"no progress reported for {deadline}s (progressDeadlineSeconds) since the job "
                f"started running at {_iso(running)}")
    said = (f"no progress for {deadline}s (progressDeadlineSeconds): step {progress.step} "
            f"last advanced at {_iso(progress.last_progress)}"
            + (f", reported by {progress.replica}" if progress.replica else ""))
    if progress.last_reports:
        quiet, at = min(progress.last_reports.items(), key=lambda kv: (kv[1], kv[0]))
        if quiet != progress.replica:
            said += f"; {quiet} last reported at {_iso(at)}"
    return said


def _iso(value: datetime) -> str:
    return whole_seconds(value).strftime("%Y-%m-%dT%H:%M:%SZ")
