"""The path of a job that may run (`_run`): create what is missing, judge each replica's pod
(`_outcome`), count failures and losses, recreate the replicas when their counts change, and
end the job when its kind's success rule, a failure, backoffLimit or the deadline says so."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainjobs.api.failure_policy import FailureAction, FailureReason
from trainjobs.api.models import ConditionType, Job, JobStatus, RestartPolicy
from trainjobs.core.admission import Admission, PodSetConflict, merge_into_pod
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.failure_rules import RuleDecision, classify
from trainjobs.core.observed import UNRUNNABLE_REASONS, ObservedPod, PodPhase, loss_reason
from trainjobs.core.render import RenderedJob, replica_counts
from trainjobs.core.status import current_condition, whole_seconds
from trainjobs.plugin.types import Replica, ReplicaOutcome, ReplicaPhase

from .attempts import _earlier_alive, _hint, _next_attempt, _restart_with_attempt, _stale
from .checkpoint import stale_for_stall
from .counts import _created_reason, _lost, _replica_statuses, _restarts, _summary
from .inputs import Event, PlanInputs, PlannerSettings, retryable
from .losses import _lost_by_rule
from .rules import (
    IN_PLACE,
    RESTARTS,
    _failure_words,
    _hold_in_mark_second,
    _in_place,
    _marked,
    _prune_seen,
    _record,
    _restart_marked,
    _restart_scope,
    _rule_for,
)
from .stall import _count_stall, _stall
from .state import (
    _NO_REPLICAS,
    _after,
    _clear_exclusive,
    _conclude,
    _delete_pod,
    _ensure_condition,
    _requeue,
    _set_exclusive,
    _State,
)
from .stop import _suspend_words
from .sweep import _sweep


def _run(
    state: _State,
    desired: RenderedJob,
    inputs: PlanInputs,
    succeeded: Callable[[Sequence[ReplicaOutcome]], bool],
    settings: PlannerSettings,
) -> None:
    """A job that may run: create what is missing, count failures and losses, end it when
    its kind's success rule, a failure, backoffLimit or the deadline says so."""
    job, now, old, pods = state.job, state.now, state.job.status, inputs.pods
    admission, restart_together = inputs.admission, state.kind.restart_together
    if current_condition(old) is ConditionType.QUEUED:
        _clear_exclusive(state, ConditionType.QUEUED, "Admitted", "admitted by Kueue"
                         + (f" (ClusterQueue {admission.cluster_queue})"
                            if admission is not None and admission.cluster_queue else ""))
        state.plan.events.append(Event("Normal", "Admitted", "admitted: creating pods"))
    if current_condition(old) is ConditionType.SUSPENDED:
        reason, message = _suspend_words(state, "Resumed", "JobResumed",
                                         f"{job.kind} {job.name} is resumed")
        _clear_exclusive(state, ConditionType.SUSPENDED, reason, message)
        state.plan.events.append(Event("Normal", reason, "resumed: recreating pods"))
        # The clock starts again (training-operator's resume sets startTime to now; a
        # batch-style suspension cleared it already).
        state.status.start_time = whole_seconds(now)

    by_name = {p.name: p for p in pods}
    spec_types = {k.lower(): k for k in job.spec.replica_specs}
    if state.status.start_time is None:
        state.status.start_time = whole_seconds(now)
    _ensure_condition(state, ConditionType.CREATED, "JobCreated",
                      f"{job.kind} {job.name} is created")

    outcomes: list[ReplicaOutcome] = []
    if restart_together:
        _next_attempt(state, desired, pods, inputs.owed)
        if state.attempt != old.attempt:
            _forget_indexes(state)  # a new attempt runs every replica again
    restart_all = _stall(state, pods, inputs.progress)
    if restart_all and (not restart_together or state.attempt == old.attempt):
        _count_stall(state, pods, inputs.progress)
        if restart_together:
            state.attempt = old.attempt + 1
            state.attempt_cause = "no progress for progressDeadlineSeconds"
    else:
        restart_all = False
    _rescale(state, desired, pods)
    for name in desired.pods:  # (a manifest is read only to create it: see PackedRender)
        replica = desired.replicas[name]
        policy = job.spec.replica_specs[replica.type].restart_policy
        pod = by_name.get(name)
        if pod is not None and pod.name not in state.rescaled and _stale(state, pod):
            outcomes.append(_restart_with_attempt(state, replica, pod))
            continue
        if _marked(state, replica.type, pod) and pod is not None:
            _restart_marked(state, replica.type, replica.index, pod)
            outcomes.append(ReplicaOutcome(replica, ReplicaPhase.PENDING))
            continue
        if (restart_all or stale_for_stall(state.status.checkpoint_request, pod)) and \
                not restart_together and pod is not None and not pod.deleting \
                and pod.phase is not PodPhase.SUCCEEDED:
            outcomes.append(_restart_stalled(state, replica, pod))
            continue
        outcomes.append(_outcome(state, replica, pod, policy,
                                 functools.partial(desired.pods.__getitem__, name), settings))
    _hold_in_mark_second(state)
    if restart_together and state.plan.create_pods and _earlier_alive(state, desired, pods):
        # The barrier between attempts: none of this attempt's pods while one of an earlier
        # attempt still runs (or holds a name), so that all start from one later decision.
        state.plan.create_pods.clear()
        state.restarting = True
    if state.attempt is not None and state.attempt != old.attempt:
        # `desired` was rendered for the attempt that just ended: create nothing from it.
        state.plan.create_pods.clear()
        state.status.attempt = state.attempt
        state.plan.events.append(Event("Normal", "RestartingTogether", f"replicas of "
                                       f"{job.kind} restart together: starting attempt "
                                       f"{state.attempt} with every replica"))
    if admission is not None:
        _admitted(state, desired, admission)
    # Pods whose replica no longer exists (scaled down, or a type removed): delete them.
    _sweep(state, pods, settings, lambda pod: pod.name not in desired.pods,
           DeleteReason.SCALED_DOWN)
    for name in desired.services:
        if name not in inputs.services:
            state.plan.create_services.append(desired.services[name])
    state.plan.delete_services.extend(sorted(inputs.services - set(desired.services)))
    for obj in desired.extras:
        if f"{obj['kind']}/{obj['metadata']['name']}" not in inputs.extras:
            state.plan.create_extras.append(obj)

    restarts = _restarts(state, pods, spec_types)
    total_restarts = sum(r for r, _ in restarts.values())
    backoff_limit = job.spec.run_policy.backoff_limit
    if state.failure is None and total_restarts > backoff_limit:
        state.failure = ("BackoffLimitExceeded",
                         f"{total_restarts} restarts exceed backoffLimit {backoff_limit}"
                         + _last_failure_note(pods, spec_types))
    deadline = job.spec.run_policy.active_deadline_seconds
    started = state.status.start_time
    if state.failure is None and deadline is not None and started is not None:
        ends = _after(started, deadline)
        if now >= ends:
            state.failure = ("DeadlineExceeded", f"the job ran longer than "
                             f"activeDeadlineSeconds ({deadline}s)")
        else:
            _requeue(state.plan, (ends - now).total_seconds())

    _prune_seen(state, pods)
    state.status.counted_failures = sorted(state.counting | state.lost_uids)
    done = state.failure is None and succeeded(outcomes)
    finished = state.failure is not None or done
    if finished:
        # A finished job creates nothing more, so it waits for no quota: its Created
        # condition and pendingReasons must not go on saying it does.
        state.create_refused = ""
    _created_reason(state)
    _replica_statuses(state, pods, outcomes, restarts, spec_types)
    if finished:
        # A finished job's pods are cleanPodPolicy's to delete (next pass), not recreation's:
        # keep the failed pods that were to be recreated (cleanPodPolicy None keeps them all),
        # and do not announce recreations that will not happen.
        state.plan.delete_pods = [n for n in state.plan.delete_pods if n not in desired.pods]
        state.plan.events = [e for e in state.plan.events if e.reason not in
                             ("ReplicaRestarting", "ReplicaLost", "RestartingTogether")]
        state.status.attempt = old.attempt
    if state.failure is not None:
        _conclude(state, ConditionType.FAILED, *state.failure)
        state.plan.events.append(Event("Warning", state.failure[0], state.failure[1]))
        # Nothing more is created for a failed job; cleanup happens on the next pass.
        state.plan.create_pods.clear()
        state.plan.create_services.clear()
        state.plan.create_extras.clear()
        state.plan.requeue_after = 0.0
    elif done:
        _conclude(state, ConditionType.SUCCEEDED, "JobSucceeded",
                  f"{job.kind} {job.name} succeeded")
        state.plan.events.append(Event("Normal", "JobSucceeded",
                                       f"{job.kind} {job.name} succeeded"))
        state.plan.create_pods.clear()
        state.plan.requeue_after = 0.0
    else:
        _progress(state, outcomes)
    if finished:
        state.status.replica_summary = _summary(job, state.status.replica_statuses,
                                                finished=True)


def _progress(state: _State, outcomes: Sequence[ReplicaOutcome]) -> None:
    """The exclusive condition of a job that has not finished."""
    job = state.job
    waiting = _waiting_note(state)
    if state.restarting:
        _set_exclusive(state, ConditionType.RESTARTING, "JobRestarting",
                       "replicas are being restarted")
    elif state.rescaled:
        _set_exclusive(state, ConditionType.RESTARTING, "JobRescaled",
                       f"replica counts changed to {replica_counts(job)}: recreating the "
                       "replicas, whose environment lists every peer")
    elif all(o.phase in (ReplicaPhase.RUNNING, ReplicaPhase.SUCCEEDED) for o in outcomes):
        _set_exclusive(state, ConditionType.RUNNING, "JobRunning",
                       f"{job.kind} {job.name} is running")
    elif (elastic := _elastic_running(job, outcomes)) is not None:
        # Enough elastic workers run (at start, or after losing some): the job goes on.
        _set_exclusive(state, ConditionType.RUNNING, "JobRunning", elastic + waiting)
    elif state.disrupted or current_condition(job.status) in (ConditionType.RUNNING,
                                                      ConditionType.RESTARTING):
        # It ran, and now a replica it needs does not run (lost to preemption, eviction or a
        # deletion, its replacement waiting): Restarting until it is back.
        reason = "ReplicasLost" if state.disrupted or current_condition(job.status) is \
            ConditionType.RUNNING else _reason_of(job.status, ConditionType.RESTARTING)
        _set_exclusive(state, ConditionType.RESTARTING, reason,
                       f"waiting for replicas to run again: {_running_summary(state)}"
                       + waiting)


def _reason_of(status: JobStatus, ctype: ConditionType) -> str:
    return next((c.reason for c in status.conditions if c.type is ctype), "") or "ReplicasLost"


def _running_summary(state: _State) -> str:
    statuses = state.status.replica_statuses
    return ", ".join(f"{k} {statuses.get(k, _NO_REPLICAS).running}/{r.replicas} running"
                     for k, r in state.job.spec.replica_specs.items())


def _waiting_note(state: _State) -> str:
    """"; Worker waits: Unschedulable: ..." for the first type whose pending replicas say why."""
    for key, rstatus in state.status.replica_statuses.items():
        if rstatus.pending_reason:
            return f"; {key} waits: {rstatus.pending_reason}"
    return ""


def _rescale(state: _State, desired: RenderedJob, pods: Sequence[ObservedPod]) -> None:
    """Pods rendered for other replica counts are stale: every built-in kind lists its peers
    in each pod's environment (DMLC_NUM_WORKER, TF_CONFIG, NUM_SHARDS), so changing a count
    recreates every replica, and what already succeeded runs again with the new cluster."""
    counts = replica_counts(state.job)
    stale = [p for p in pods if p.replicas_rendered and p.replicas_rendered != counts
             and p.name in desired.pods and not p.deleting]
    if not stale:
        return
    _forget_indexes(state)
    state.rescaled = sorted(p.name for p in stale)
    for pod in sorted(stale, key=lambda p: p.name):
        _delete_pod(state, pod, DeleteReason.RESCALED, f"replica counts changed to {counts}")
    state.plan.events.append(Event(
        "Normal", "JobRescaled", f"replica counts changed to {counts}: recreating "
        f"{len(stale)} pod{'s' if len(stale) != 1 else ''} rendered for other counts"))


def _forget_indexes(state: _State) -> None:
    """Every replica runs again (a new cluster): no index counts as started or succeeded."""
    for key in state.job.spec.replica_specs:
        state.started[key].clear()
        state.completed[key].clear()


def _outcome(
    state: _State,
    replica: Replica,
    pod: ObservedPod | None,
    policy: RestartPolicy,
    manifest: Callable[[], dict[str, Any]],
    settings: PlannerSettings,
) -> ReplicaOutcome:
    """What one replica is doing (its pod `pod`, None when it has none); what to do about
    it goes into `state`. A pod being deleted is `_sweep`'s."""
    started, counted = state.started[replica.type], state.counted
    if pod is None:
        if replica.index in state.completed[replica.type]:
            return ReplicaOutcome(replica, ReplicaPhase.SUCCEEDED, 0)  # never run again
        body = manifest()
        name = body["metadata"]["name"]
        hint = _hint(state, name)
        if (replica.index in started or (hint is not None and hint.uid not in counted and
                                         name not in state.lost_names)) and not (
                hint is not None and _lost_by_rule(state, replica, name, hint.uid, hint.cause)):
            _lost(state, replica, name, hint.cause if hint else "its pod disappeared "
                  "(deleted, preempted or evicted by someone other than the operator)")
        state.plan.create_pods.append(body)
        return ReplicaOutcome(replica, ReplicaPhase.PENDING)
    if pod.deleting:
        if pod.uid in counted:
            state.counting.add(pod.uid)  # counted as lost while it terminates: once
        elif replica.index in started and pod.name not in state.rescaled and \
                not _lost_by_rule(state, replica, pod.name, pod.uid, pod.disruption, pod):
            _lost(state, replica, pod.name, pod.disruption or "its pod is being deleted by "
                  "someone other than the operator", pod.uid)
        return ReplicaOutcome(replica, ReplicaPhase.PENDING)
    if pod.name in state.rescaled:
        return ReplicaOutcome(replica, ReplicaPhase.PENDING)
    if pod.phase is PodPhase.SUCCEEDED:
        started.discard(replica.index)
        state.completed[replica.type].add(replica.index)
        return ReplicaOutcome(replica, ReplicaPhase.SUCCEEDED, pod.exit_code)
    if pod.phase is PodPhase.FAILED:
        started.discard(replica.index)
        return _failed(state, replica, pod, policy)
    restarted = _in_place(state, replica.type, pod) if pod.restarts else None
    if restarted is not None and restarted.action not in IN_PLACE:
        return _obey(state, replica, pod, restarted, f"replica {replica.type} {replica.index} "
                     f"(pod {pod.name}) restarted in place after exit code "
                     f"{pod.last_exit_code}" + (f" ({pod.last_reason})" if pod.last_reason
                                                else ""))
    if pod.phase is PodPhase.RUNNING:
        started.add(replica.index)
    if pod.waiting_reason in UNRUNNABLE_REASONS and pod.created is not None and \
            state.now - pod.created >= settings.unrunnable_grace:
        what = (f"replica {replica.type} {replica.index} (pod {pod.name}) cannot start: "
                f"{pod.waiting_reason}" + (f": {pod.message}" if pod.message else ""))
        decision = _rule_for(state, replica.type, pod, FailureReason.IMAGE_PULL_FAILED)
        if decision is not None:
            return _obey(state, replica, pod, decision, what)
        state.failure = (pod.waiting_reason, what)
    elif pod.waiting_reason in UNRUNNABLE_REASONS and pod.created is not None:
        remaining = settings.unrunnable_grace - (state.now - pod.created)
        _requeue(state.plan, remaining.total_seconds())
    phase = ReplicaPhase.RUNNING if pod.phase is PodPhase.RUNNING else ReplicaPhase.PENDING
    return ReplicaOutcome(replica, phase)


def _failed(
    state: _State,
    replica: Replica,
    pod: ObservedPod,
    policy: RestartPolicy,
) -> ReplicaOutcome:
    counted = state.counted
    code = "unknown" if pod.exit_code is None else str(pod.exit_code)
    what = (f"replica {replica.type} {replica.index} (pod {pod.name}) failed with exit code "
            f"{code}" + (f" ({pod.reason})" if pod.reason else ""))
    decision = _rule_for(state, replica.type, pod)
    if decision is not None and not (decision.action is FailureAction.IGNORE and
                                     pod.disrupted):
        return _obey(state, replica, pod, decision, what)
    if pod.disrupted:
        # Counted once, by uid, like a failure; but as lost, never toward backoffLimit.
        if pod.uid not in counted and decision is None:
            _record(state, pod, replica.type, classify(pod), "disruption",
                    FailureAction.IGNORE, None, event=False)
        if pod.uid not in counted:
            _lost(state, replica, pod.name, f"{what}: {pod.disruption or 'taken by the cluster'}",
                  reason=loss_reason(pod.disruption or pod.reason))
        state.counting.add(pod.uid)
        state.disrupted = True
        _delete_pod(state, pod, DeleteReason.DISRUPTED, pod.disruption)
        return ReplicaOutcome(replica, ReplicaPhase.PENDING, pod.exit_code)
    if not retryable(policy, pod):
        state.failure = ("ReplicaFailed", f"{what}; restartPolicy {policy.value}"
                         + (" (exit codes 1-127 are permanent)"
                            if policy is RestartPolicy.EXIT_CODE else ""))
        if not any(r.pod_uid == pod.uid for r in state.status.failures or ()):
            _record(state, pod, replica.type, classify(pod), f"restartPolicy/{policy.value}",
                    FailureAction.FAIL_JOB, None, event=False)
        return ReplicaOutcome(replica, ReplicaPhase.FAILED, pod.exit_code)
    # Retryable: count it once (by pod uid, so a repeated pass never counts it twice), then
    # delete the pod; the next pass recreates it under the same name.
    if pod.uid not in counted:
        state.recreations[replica.type] = state.recreations.get(replica.type, 0) + 1 + \
            pod.restarts
        state.plan.events.append(Event("Warning", "ReplicaRestarting",
                                       f"{what}; restarting it"))
        left = state.job.spec.run_policy.backoff_limit - sum(state.recreations.values())
        _record(state, pod, replica.type, classify(pod), f"restartPolicy/{policy.value}",
                FailureAction.RESTART_JOB if state.kind.restart_together
                else FailureAction.RECREATE_POD, max(left, 0), event=False)
    state.counting.add(pod.uid)
    state.restarting = True
    _delete_pod(state, pod, DeleteReason.FAILED, what)
    return ReplicaOutcome(replica, ReplicaPhase.PENDING, pod.exit_code)


def _obey(state: _State, replica: Replica, pod: ObservedPod, decision: RuleDecision,
          what: str) -> ReplicaOutcome:
    """A failed pod as its failure rule says: the job fails, or the pod (its type, the
    job) starts again, counted against backoffLimit once (by pod uid) unless ignored."""
    if decision.action is FailureAction.FAIL_JOB:
        if state.failure is None:
            state.failure = ("FailurePolicy", f"{what}; {_failure_words(state, decision)}")
        return ReplicaOutcome(replica, ReplicaPhase.FAILED, pod.exit_code)
    if decision.action is FailureAction.IGNORE:
        state.ignored.add(pod.uid)
    elif pod.uid not in state.counted:
        state.recreations[replica.type] = state.recreations.get(replica.type, 0) + 1 + \
            pod.restarts
    if pod.uid not in state.counted and decision.action in RESTARTS and \
            not state.kind.restart_together:
        _restart_scope(state, replica.type, decision.action)
    state.counting.add(pod.uid)
    state.restarting = True
    state.started[replica.type].discard(replica.index)
    _delete_pod(state, pod, DeleteReason.FAILED, f"{what}; {_failure_words(state, decision)}")
    return ReplicaOutcome(replica, ReplicaPhase.PENDING, pod.exit_code)


def _restart_stalled(state: _State, replica: Replica, pod: ObservedPod) -> ReplicaOutcome:
    """Every replica that has not succeeded starts again after a stall (replicas that do not
    restart together): the pod is deleted and recreated on the next pass, as after a
    retryable failure."""
    state.started[replica.type].discard(replica.index)
    state.restarting = True
    _delete_pod(state, pod, DeleteReason.STALLED, "no progress for progressDeadlineSeconds")
    return ReplicaOutcome(replica, ReplicaPhase.PENDING)


def _last_failure_note(pods: Sequence[ObservedPod], spec_types: Mapping[str, str]) -> str:
    failed = [p for p in pods if p.phase is PodPhase.FAILED and not p.disrupted]
    if failed:
        last = failed[-1]
        return f"; last failure: pod {last.name} exit code {last.exit_code}" + (
            f" ({last.reason})" if last.reason else "")
    # Restarts in place (OnFailure/Always): name the replicas that restarted most.
    restarted = sorted((p for p in pods if p.restarts and not p.deleting),
                       key=lambda p: (-p.restarts, p.name))[:3]
    if not restarted:
        return ""
    return "; restarted in place: " + ", ".join(
        f"replica {spec_types.get(p.replica_type_lower, p.replica_type_lower)} {p.index} "
        f"(pod {p.name}) {p.restarts} time{'s' if p.restarts != 1 else ''}"
        + (f", last exit code {p.last_exit_code}" if p.last_exit_code is not None else "")
        + (f" ({p.last_reason})" if p.last_reason else "")
        for p in restarted)


def _elastic_running(job: Job, outcomes: Sequence[ReplicaOutcome]) -> str | None:
    """With an elasticPolicy: the Running message when every other replica runs (or has
    succeeded) and at least minReplicas of the elastic type do; else None."""
    for key, rspec in job.spec.replica_specs.items():
        if rspec.elastic_policy is None:
            continue
        ok = (ReplicaPhase.RUNNING, ReplicaPhase.SUCCEEDED)
        running = sum(1 for o in outcomes if o.replica.type == key and o.phase in ok)
        if running < rspec.elastic_policy.min_replicas or running == 0:
            return None
        if not all(o.phase in ok for o in outcomes if o.replica.type != key):
            return None
        return (f"running with {running} of {rspec.replicas} {key}s (elasticPolicy "
                f"minReplicas {rspec.elastic_policy.min_replicas})")
    return None


def _admitted(state: _State, desired: RenderedJob, admission: Admission) -> None:
    """The pods created now get the admission's changes (the flavors' node labels and
    tolerations, Kueue's labels, admission checks' updates), merged as Kueue's podset.Merge
    does; a conflict with the pod is a failure (Kueue's FailedToStart)."""
    merged = []
    for pod in state.plan.create_pods:
        replica = desired.replicas.get(pod["metadata"]["name"])
        changes = admission.pod_sets.get(replica.type) if replica is not None else None
        if changes is None:
            merged.append(pod)
            continue
        try:
            merged.append(merge_into_pod(pod, changes))
        except PodSetConflict as exc:
            if state.failure is None:
                state.failure = ("CreateFailed", f"the admission conflicts with the pods of "
                                 f"{replica.type if replica else '?'}: {exc}")
            merged.append(pod)
    state.plan.create_pods[:] = merged
