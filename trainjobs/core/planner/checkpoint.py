"""Checkpoint, then stop (issue 38): before a running job's pods stop for any reason but the
job's own end, its checkpointing replica is asked to save, and the stop waits for it.

Why in the planner, as a step after every path: each path decides its stop as it always did
(suspend, Kueue's eviction, a new attempt, a stall's restart, new replica counts), and this
step only holds the deletions back while a checkpoint is pending, so `trainjobs run` and the
operator stop in the same order, and a job that does not ask for checkpoints
(`runPolicy.checkpointTimeoutSeconds` unset) or has no checkpointing replica running stops
exactly as before. The request lives in `status.checkpointRequest`, with its deadline: an
operator that restarts mid-wait reads it there and neither asks anew nor waits longer.

The order of a stop with a checkpoint:

1. **Ask.** A replica that reports progress (trainjobs_progress) is asked in the reply to
   its reports (method Report): nothing is deleted until it answers or the deadline passes.
   One that never reported is asked by SIGTERM (method Signal): its pod is deleted first.
2. **The checkpointing replica stops first.** Every other pod of the stop, and the Services
   and objects that go with the replicas (a TfJob's PS, an MxJob's scheduler and servers),
   stay until its pod is gone or the deadline passes; then the stop goes on as it would
   have.

Also asked without a stop: a user's request (the `trainjobs.io/checkpoint-request`
annotation, once per value) and `checkpointBeforeDeadlineSeconds` before
`activeDeadlineSeconds` (default: the timeout), so the save lands before the job fails.
"""

from __future__ import annotations

from datetime import timedelta

from trainjobs.api.models import (
    CheckpointMethod,
    CheckpointOutcome,
    CheckpointRequestStatus,
    CheckpointStatus,
    ConditionType,
)
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.observed import ObservedPod, PodPhase
from trainjobs.core.status import state_of, whole_seconds
from trainjobs.labels import ANNOTATION_CHECKPOINT_REQUEST

from .inputs import CheckpointSeen, Event, PlanInputs
from .state import _after, _requeue, _State

#: The deletions a checkpoint comes before: a stop of running pods that the job will miss.
STOPS = frozenset({DeleteReason.SUSPENDED, DeleteReason.QUEUED, DeleteReason.NEW_ATTEMPT,
                   DeleteReason.STALLED, DeleteReason.RESCALED})
_STOP_REASONS = frozenset(r.value for r in STOPS)
USER_REQUEST = "UserRequest"
ACTIVE_DEADLINE = "ActiveDeadline"
_FINISHED = frozenset({ConditionType.SUCCEEDED.value, ConditionType.FAILED.value})
_WHY = {"Suspended": "the job is suspended", "Queued": "Kueue stops the job (evicted or "
        "preempted)", "NewAttempt": "the replicas restart together", "Stalled": "a stall "
        "restarts the replicas", "Rescaled": "new replica counts recreate the replicas",
        USER_REQUEST: "a user asked", ACTIVE_DEADLINE: "activeDeadlineSeconds is near"}


def _checkpoint_first(state: _State, inputs: PlanInputs) -> None:
    """Settle, ask and hold (see the module docstring); a no-op for a job without
    `checkpointTimeoutSeconds` or whose kind names no checkpointing replica."""
    timeout = state.job.spec.run_policy.checkpoint_timeout_seconds
    seen = inputs.checkpoint
    if timeout is None or seen is None or not seen.replica:
        return
    by_name = {p.name: p for p in inputs.pods}
    saving = by_name.get(seen.replica)
    request = state.status.checkpoint_request
    if request is not None and request.outcome is CheckpointOutcome.PENDING:
        request = _settle(state, request, saving, seen)
    stopping = [n for n in state.plan.delete_pods if _stop_of(state, n)]
    reason = _reason_to_ask(state, request, saving, stopping, seen.reporting)
    if reason is not None and saving is not None:
        request = _ask(state, request, saving, seen, reason, timeout)
    if request is not None and stopping:
        _hold(state, request, saving, stopping)


def _live(pod: ObservedPod | None) -> bool:
    return pod is not None and not pod.deleting and pod.phase is PodPhase.RUNNING


def _stop_of(state: _State, name: str) -> bool:
    deletion = state.plan.deletions.get(name)
    return deletion is not None and deletion.reason in STOPS


def _settle(state: _State, request: CheckpointRequestStatus, saving: ObservedPod | None,
            seen: CheckpointSeen) -> CheckpointRequestStatus:
    """The pending `request` answered, timed out, or left without its replica; else as is."""
    saved = seen.saved
    now, status = state.now, state.status
    own = saving is not None and saving.uid == request.pod_uid
    if saved is not None and saved.id == request.id:
        status.last_checkpoint = CheckpointStatus(
            id=saved.id, step=saved.step, uri=saved.uri, time=whole_seconds(saved.at),
            attempt=saved.attempt, replica=saved.replica)
        event = Event("Normal", "CheckpointSaved", f"{saved.replica} saved step {saved.step} "
                      f"to {saved.uri} (asked because {_WHY.get(request.reason, request.reason)})")
        outcome = CheckpointOutcome.SAVED
    elif request.method is CheckpointMethod.SIGNAL and not own:
        event = Event("Normal", "CheckpointStopped", f"{request.replica} stopped after "
                      "SIGTERM (it does not report: what it saved, if anything, is its own)")
        outcome = CheckpointOutcome.STOPPED
    elif request.method is CheckpointMethod.REPORT and not (own and _live(saving)):
        event = Event("Warning", "CheckpointReplicaGone", f"{request.replica} stopped before "
                      f"it saved: {_lost_since(state)} is lost")
        outcome = CheckpointOutcome.REPLICA_GONE
    elif now >= request.deadline:
        seconds = state.job.spec.run_policy.checkpoint_timeout_seconds
        event = Event("Warning", "CheckpointTimedOut", f"{request.replica} did not save within "
                      f"{seconds}s (checkpointTimeoutSeconds): {_lost_since(state)} is lost")
        outcome = CheckpointOutcome.TIMED_OUT
    else:
        return request
    state.plan.events.append(event)
    status.checkpoint_request = request.model_copy(update={"outcome": outcome})
    return status.checkpoint_request


def _lost_since(state: _State) -> str:
    last = state.status.last_checkpoint
    return "what it trained since its start" if last is None else \
        f"what it trained since the checkpoint of step {last.step}"


def _reason_to_ask(state: _State, request: CheckpointRequestStatus | None,
                   saving: ObservedPod | None, stopping: list[str], reporting: bool
                   ) -> str | None:
    """Why to ask for a checkpoint now (None: not now). Never while one is pending, of a
    replica not running, or for a finished job; a stop asks once per checkpointing pod.
    Without a stop only a replica that reports can be asked (SIGTERM would stop it)."""
    job, status = state.job, state.status
    asked = job.metadata.annotations.get(ANNOTATION_CHECKPOINT_REQUEST)
    user = bool(asked) and asked != status.observed_checkpoint_request
    if user:
        status.observed_checkpoint_request = asked
    if request is not None and request.outcome is CheckpointOutcome.PENDING:
        return None
    if state_of(status.conditions) in _FINISHED or saving is None or not _live(saving):
        if user:
            state.plan.events.append(Event("Warning", "CheckpointNotAsked", "a checkpoint "
                                           "was requested, but the checkpointing replica "
                                           f"{saving.name if saving else ''} is not running"))
        return None
    same_pod = request is not None and request.pod_uid == saving.uid
    if stopping and not (same_pod and request is not None and
                         request.reason in _STOP_REASONS):
        first = state.plan.deletions[stopping[0]]
        return first.reason.value
    if user and not reporting:
        state.plan.events.append(Event("Warning", "CheckpointNotAsked", "a checkpoint was "
                                       f"requested, but {saving.name} does not report progress "
                                       "(trainjobs_progress): it can only be asked by SIGTERM, "
                                       "when its pod stops"))
        return None
    if user:
        return USER_REQUEST
    if reporting and _deadline_near(state) and not (same_pod and request is not None and
                                      request.reason == ACTIVE_DEADLINE):
        return ACTIVE_DEADLINE
    return None


def _deadline_near(state: _State) -> bool:
    """Whether `checkpointBeforeDeadlineSeconds` before `activeDeadlineSeconds` has come
    (asking the plan to come back then, when it has not)."""
    policy = state.job.spec.run_policy
    started = state.status.start_time
    if policy.active_deadline_seconds is None or started is None:
        return False
    margin = policy.checkpoint_before_deadline_seconds or policy.checkpoint_timeout_seconds or 0
    ask_at = _after(started, max(policy.active_deadline_seconds - margin, 0))
    if state.now < ask_at:
        _requeue(state.plan, (ask_at - state.now).total_seconds())
        return False
    return state.now < _after(started, policy.active_deadline_seconds)


def _ask(state: _State, request: CheckpointRequestStatus | None, saving: ObservedPod,
         seen: CheckpointSeen, reason: str, timeout: int) -> CheckpointRequestStatus:
    """A new request of `saving`, recorded in the status (written at once: its deadline
    must outlive an operator restart); the backend asks once it has been written."""
    now = whole_seconds(state.now)
    # The status keeps whole seconds: the deadline is rounded up, never cutting the bound.
    ends = now + timedelta(seconds=timeout + (1 if state.now > now else 0))
    method = CheckpointMethod.REPORT if seen.reporting else CheckpointMethod.SIGNAL
    new = CheckpointRequestStatus(
        id=(request.id if request is not None else 0) + 1, reason=reason, replica=saving.name,
        pod_uid=saving.uid,
        attempt=saving.attempt if saving.attempt is not None else state.job.status.attempt,
        method=method, request_time=now, deadline=ends)
    state.status.checkpoint_request = new
    how = ("in the reply to its progress reports" if method is CheckpointMethod.REPORT else
           "by SIGTERM (it does not report progress)")
    stops = reason in _STOP_REASONS
    state.plan.events.append(Event("Normal", "CheckpointRequested", f"asked {saving.name} to "
                                   f"save {how}: {_WHY.get(reason, reason)}" +
                                   (f"; the pods stop once it has, or in {timeout}s"
                                    if stops else f"; waiting up to {timeout}s")))
    _requeue(state.plan, 0.0)  # the next pass, after the write, hands the request out
    return new


def _hold(state: _State, request: CheckpointRequestStatus, saving: ObservedPod | None,
          stopping: list[str]) -> None:
    """Keep back the stop's deletions the checkpoint still needs: while it is pending (the
    checkpointing pod too, when it is asked by report), and until the checkpointing pod of
    a stop's request is gone, at most until the deadline."""
    if state.now >= request.deadline:
        return
    pending = request.outcome is CheckpointOutcome.PENDING
    own = saving is not None and saving.uid == request.pod_uid
    if not pending and not (own and request.reason in _STOP_REASONS):
        return
    keep_saving = pending and request.method is CheckpointMethod.REPORT
    plan = state.plan
    held = {n for n in stopping if keep_saving or n != request.replica}
    if not held:
        return
    plan.delete_pods = [n for n in plan.delete_pods if n not in held]
    for name in held:
        plan.deletions.pop(name, None)
    plan.delete_services.clear()
    plan.delete_extras.clear()
    _requeue(plan, (request.deadline - state.now).total_seconds())


def stale_for_stall(request: CheckpointRequestStatus | None, pod: ObservedPod | None
                    ) -> bool:
    """Whether `pod` is one a stall's restart still has to delete once its checkpoint is
    done (replicas that do not restart together: the stall's decision is not repeated while
    the pods wait, so the request remembers it): created before the request."""
    return request is not None and pod is not None and \
        request.reason == DeleteReason.STALLED.value and pod.created is not None and \
        pod.created < request.request_time

