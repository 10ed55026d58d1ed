"""The reconcile decision: from a job and what exists, what to create, delete and report.

Why a pure function: it is the one place where restart, success, failure, suspension, deadline
and cleanup semantics live, shared by the Kubernetes backend and the local runtime, and it can
be tested exhaustively without I/O (tests/unit/test_planner.py, including hypothesis-generated
states). It never performs an action; the backend does, then calls it again with the new state.
Calling it again on the state its own plan produced must ask for nothing new (idempotence).

One pass takes one of four paths (`_finish`, `_suspend`, `_queue`, `_run`); what holds on
every path is written once: the sweep over the job's pods (`_sweep`: what goes, and a
deletion cut off half-way done again), what goes with the replicas (`_without_replicas`),
and the status, edited typed (`_Status`) and built into a `JobStatus` once, at the end.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from trainjobs.api.models import (
    CleanPodPolicy,
    Condition,
    ConditionType,
    Job,
    JobStatus,
    OwnedObjectStatus,
    ReplicaStatus,
    RestartPolicy,
)
from trainjobs.core.admission import Admission, PodSetConflict, merge_into_pod
from trainjobs.core.deletions import DeleteReason, PodDeletion, deletion
from trainjobs.core.indexes import format_indexes, parse_indexes
from trainjobs.core.observed import (
    UNRUNNABLE_REASONS,
    GonePod,
    ObservedPod,
    PodPhase,
    loss_reason,
)
from trainjobs.core.render import RenderedJob, replica_counts
from trainjobs.core.status import (
    EXCLUSIVE_CONDITIONS,
    current_condition,
    is_finished,
    set_exclusive,
    state_of,
    whole_seconds,
)
from trainjobs.plugin.types import Replica, ReplicaOutcome, ReplicaPhase

__all__ = ["EXCLUSIVE_CONDITIONS", "Event", "Plan", "PlanInputs", "PlannerSettings", "plan",
           "retryable"]



@dataclass(frozen=True)
class PlannerSettings:
    # How long a container may wait on an image pull or config error before the job fails.
    unrunnable_grace: timedelta = timedelta(seconds=120)
    # Kinds of extra objects (besides Pods) that exist only while the replicas do: deleted on
    # suspend and by a finished job's cleanup, recreated on resume (a gang PodGroup).
    with_replicas_kinds: frozenset[str] = frozenset()
    # A pod marked for deletion with grace period 0 is removed by the API server in the same
    # request; one still there this long after was left half-deleted (the request cut off
    # between setting deletionTimestamp and removing the object: seen when the operator was
    # killed mid-DELETE under etcd load). Nothing else finishes it where no kubelet runs the
    # pod, so the planner deletes it again (a DELETE of a pod already due is immediate).
    unfinished_delete: timedelta = timedelta(seconds=10)


@dataclass(frozen=True)
class KindRules:
    """What the job's kind (its `Framework`) tells the planner, as one value, so that a new
    per-kind rule is one field here, not a parameter on every path. `restart_together`:
    `Framework.replicas_restart_together`; `suspend_style`: `Framework.suspend_style`
    ("batch" as batch/v1 Jobs, "kubeflow" as training-operator)."""

    restart_together: bool = False
    suspend_style: str = "batch"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event (or a local log line) the backend should emit."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Plan:
    """What the backend should do now. Empty lists and an unchanged status mean: nothing."""

    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    create_services: list[dict[str, Any]] = field(default_factory=list)
    delete_services: list[str] = field(default_factory=list)
    create_extras: list[dict[str, Any]] = field(default_factory=list)
    delete_extras: list[str] = field(default_factory=list)  # `Kind/name`, never Pods
    status: JobStatus = field(default_factory=JobStatus)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    # Replicas that restart together: the pods of the attempt the backend is to create, now
    # or once its creates are no longer held, and those it still owes (`PlanInputs.owed` of
    # the next pass, less the pods it has seen by then).
    owe: frozenset[str] = frozenset()
    # Why each pod of `delete_pods` goes (pods a plugin added for the replicas: not listed).
    deletions: dict[str, PodDeletion] = field(default_factory=dict)

    @property
    def actions(self) -> int:
        return (len(self.create_pods) + len(self.delete_pods) + len(self.create_services)
                + len(self.delete_services) + len(self.create_extras) + len(self.delete_extras)
                + int(self.delete_job))


@dataclass(frozen=True)
class PlanInputs:
    """What the backend knows of a job besides its spec and rendering: what exists, what it
    saw, and what holds it back. One type, so that a new input (an admission system's
    decision) is one new field, not a new parameter on every path.

    `pods`: the job's pods (including those the backend just created or deleted but its
    cache has not shown yet); `services` and `extras`: the names of the Services and extra
    objects (`Kind/name`) that exist. `lost_causes`: what the backend saw of pods that
    disappeared without the operator deleting them after they had started (pod name ->
    cause, e.g. the DisruptionTarget reason): lost, with that cause in the ReplicaLost event.
    Without it a loss is still seen from the status alone (a started index whose pod is
    gone), so an operator restart forgets none (the status may lag a pod's start by its
    write coalescing). `create_refused`: why the backend's creates for this job wait
    ("QuotaExceeded: ..."): the Created condition's reason and the pending replicas'
    pendingReason tell it. `creates_held`: seconds before the backend may create for this
    job again (a quota's back-off): the plan creates nothing and comes back then. `owed`
    (replicas that restart together): the pods of the current attempt this backend decided
    to create and has not seen created yet (a create that failed is retried); any other pod
    of the attempt that is missing was deleted, or its create was cut off by an operator
    restart: the attempt is broken and a fresh one starts (see `_next_attempt`).
    `admission`: what Kueue decided (None: the job is not queued). Not admitted: no replica
    may exist (`_queue`); admitted: the pods get the admission's flavors (`_admitted`).
    `now`: the backend's clock (default: the system's).
    """

    pods: Sequence[ObservedPod] = ()
    services: AbstractSet[str] = frozenset()
    extras: AbstractSet[str] = frozenset()
    lost_causes: Mapping[str, GonePod] = field(default_factory=dict)
    create_refused: str = ""
    creates_held: float = 0.0
    owed: frozenset[str] = frozenset()
    admission: Admission | None = None
    now: datetime | None = None


def retryable(policy: RestartPolicy, pod: ObservedPod) -> bool:
    """Whether a Failed pod may be recreated (counted against backoffLimit)."""
    if policy is RestartPolicy.NEVER:
        return False
    if policy is RestartPolicy.EXIT_CODE:
        return pod.exit_code is None or pod.exit_code >= 128
    return True  # OnFailure/Always: a pod-level failure (the kubelet restarts in place)


@dataclass
class _Status:
    """The status one pass builds: typed, in place, and made a `JobStatus` once, at the end
    (`built`); the backend serialises it when it writes it. Timestamps are whole seconds in
    UTC, as the API keeps them, so that a pass that changes nothing yields an equal status."""

    conditions: list[Condition]
    replica_statuses: dict[str, ReplicaStatus]
    replica_summary: str
    start_time: datetime | None
    completion_time: datetime | None
    counted_failures: list[str]
    attempt: int
    owned_objects: list[OwnedObjectStatus] | None  # reported by plugins: kept as it is

    @classmethod
    def of(cls, status: JobStatus) -> _Status:
        return cls(conditions=list(status.conditions),
                   replica_statuses=dict(status.replica_statuses),
                   replica_summary=status.replica_summary,
                   start_time=_whole(status.start_time),
                   completion_time=_whole(status.completion_time),
                   counted_failures=list(status.counted_failures), attempt=status.attempt,
                   owned_objects=status.owned_objects or None)

    def built(self, old: JobStatus, generation: int | None) -> JobStatus:
        """The status to report: `old` itself when nothing changed (the backend writes
        nothing then)."""
        new = JobStatus(state=state_of(self.conditions), replica_summary=self.replica_summary,
                        conditions=self.conditions, replica_statuses=self.replica_statuses,
                        start_time=self.start_time, completion_time=self.completion_time,
                        observed_generation=generation or None,
                        counted_failures=self.counted_failures, attempt=self.attempt,
                        owned_objects=self.owned_objects)
        return old if new == old else new


_NO_REPLICAS = ReplicaStatus()


def _whole(value: datetime | None) -> datetime | None:
    return None if value is None else whole_seconds(value)


@dataclass
class _State:
    """Working state of one planning pass."""

    job: Job
    now: datetime
    plan: Plan
    status: _Status
    failure: tuple[str, str] | None = None  # (reason, message)
    restarting: bool = False
    disrupted: bool = False
    # Replicas that restart together: the attempt that should run, and the failed pod that
    # ends the previous one (None: no new attempt this pass).
    attempt: int | None = None
    ends_attempt: str | None = None
    attempt_cause: str = ""  # why that attempt begins, in words (PodDeletion.detail)
    # Per replicaSpecs key: indexes whose current pod has started / that succeeded (durable
    # in the status), and replicas lost in this pass.
    started: dict[str, set[int]] = field(default_factory=dict)
    completed: dict[str, set[int]] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    lost_causes: Mapping[str, GonePod] = field(default_factory=dict)
    lost_names: set[str] = field(default_factory=set)  # counted in this pass
    lost_uids: set[str] = field(default_factory=set)
    lost_reason: dict[str, str] = field(default_factory=dict)  # type -> loss_reason
    # Framework.suspend_style: "batch" (as batch/v1 Jobs) or "kubeflow" (training-operator's).
    suspend_style: str = "batch"
    # Pods recreated because the replica counts changed (their environment lists every peer).
    rescaled: list[str] = field(default_factory=list)
    create_refused: str = ""
    # Failed or lost pods already counted (by uid, durable in countedFailures), those counted
    # as of this pass, and the failure recreations per replica type (see `_restarts`).
    counted: frozenset[str] = frozenset()
    counting: set[str] = field(default_factory=set)
    recreations: dict[str, int] = field(default_factory=dict)


def plan(
    job: Job,
    desired: RenderedJob,
    inputs: PlanInputs,
    succeeded: Callable[[Sequence[ReplicaOutcome]], bool],
    settings: PlannerSettings = PlannerSettings(),
    kind: KindRules = KindRules(),
) -> Plan:
    """Decide the next actions and the status for `job`.

    `desired` is the job rendered by the plugins; `inputs` what the backend knows of it (see
    `PlanInputs`); `succeeded` the kind's success rule; `kind` its other rules (`KindRules`).
    """
    decision = _decide(job, desired, inputs, succeeded, settings, kind)
    if kind.restart_together:
        decision.owe = inputs.owed | {p["metadata"]["name"] for p in decision.create_pods}
    if inputs.creates_held > 0 and (decision.create_pods or decision.create_services or
                                    decision.create_extras):
        # Creates refused a moment ago (a full quota): not again before the back-off ends.
        decision.create_pods, decision.create_services, decision.create_extras = [], [], []
        _requeue(decision, inputs.creates_held)
    return decision


def _decide(
    job: Job,
    desired: RenderedJob,
    inputs: PlanInputs,
    succeeded: Callable[[Sequence[ReplicaOutcome]], bool],
    settings: PlannerSettings,
    kind: KindRules,
) -> Plan:
    """The plan, as if every create the backend is asked for could be made now: one of four
    paths (finished, suspended, queued, running) fills it, and its status is built once."""
    old = job.status
    if job.metadata.deletion_timestamp is not None:
        return Plan(status=old)
    state = _State(job, inputs.now or datetime.now(UTC), Plan(), _Status.of(old),
                   lost_causes=inputs.lost_causes, create_refused=inputs.create_refused,
                   suspend_style=kind.suspend_style,
                   counted=frozenset(old.counted_failures),
                   recreations=_restart_totals(old))
    for key in job.spec.replica_specs:
        rstatus = old.replica_statuses.get(key)
        state.started[key] = parse_indexes(rstatus.started_indexes) if rstatus else set()
        state.completed[key] = parse_indexes(rstatus.completed_indexes) if rstatus else set()
        state.lost[key] = 0
    if is_finished(old):
        _finish(state, inputs, settings)
    elif job.spec.run_policy.suspend:
        _suspend(state, inputs, kind.restart_together, settings)
    elif inputs.admission is not None and not inputs.admission.admitted:
        _queue(state, inputs, inputs.admission, kind.restart_together, settings)
    else:
        _run(state, desired, inputs, succeeded, settings, kind.restart_together)
    state.plan.status = state.status.built(old, job.metadata.generation)
    return state.plan


def _run(
    state: _State,
    desired: RenderedJob,
    inputs: PlanInputs,
    succeeded: Callable[[Sequence[ReplicaOutcome]], bool],
    settings: PlannerSettings,
    restart_together: bool,
) -> None:
    """A job that may run: create what is missing, count failures and losses, end it when
    its kind's success rule, a failure, backoffLimit or the deadline says so."""
    job, now, old, pods = state.job, state.now, state.job.status, inputs.pods
    admission = inputs.admission
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
    _rescale(state, desired, pods)
    for name in desired.pods:  # (a manifest is read only to create it: see PackedRender)
        replica = desired.replicas[name]
        policy = job.spec.replica_specs[replica.type].restart_policy
        pod = by_name.get(name)
        if pod is not None and pod.name not in state.rescaled and _stale(state, pod):
            outcomes.append(_restart_with_attempt(state, replica, pod))
            continue
        outcomes.append(_outcome(state, replica, pod, policy,
                                 functools.partial(desired.pods.__getitem__, name), settings))
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


def _created_reason(state: _State) -> None:
    """While a quota refuses the job's pods, Created says so (reason QuotaExceeded, True: the
    job is accepted and waits, as Kueue-style tools read it); then it says JobCreated again."""
    conditions = state.status.conditions
    for i, cond in enumerate(conditions):
        if cond.type is not ConditionType.CREATED:
            continue
        reason, _, message = state.create_refused.partition(": ")
        if state.create_refused and (cond.reason, cond.message) != (reason, message):
            # (still True: no transition)
            conditions[i] = cond.model_copy(update={"reason": reason, "message": message})
        elif not state.create_refused and cond.reason != "JobCreated":
            conditions[i] = cond.model_copy(update={
                "reason": "JobCreated", "message": f"{state.job.kind} {state.job.name} is "
                "created"})


def _forget_indexes(state: _State) -> None:
    """Every replica runs again (a new cluster): no index counts as started or succeeded."""
    for key in state.job.spec.replica_specs:
        state.started[key].clear()
        state.completed[key].clear()


def _lost(state: _State, replica: Replica, pod_name: str, cause: str, uid: str = "",
          reason: str = "") -> None:
    """A replica that had started lost its pod to someone else: count it (not as a failure)
    and say so, with why (the event's cause, the status's lastLostReason); its index no
    longer counts as started, so it is counted once."""
    state.lost_reason[replica.type] = reason or loss_reason(cause)
    state.started[replica.type].discard(replica.index)
    state.lost_names.add(pod_name)
    if uid:
        state.lost_uids.add(uid)  # kept in countedFailures while the pod is still seen
    state.lost[replica.type] = state.lost.get(replica.type, 0) + 1
    state.disrupted = True
    state.plan.events.append(Event(
        "Warning", "ReplicaLost", f"replica {replica.type} {replica.index} (pod {pod_name}) "
        f"was lost: {cause}; recreating it (not counted as a failure)"))


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
        policy = state.job.spec.replica_specs[desired.replicas[pod.name].type].restart_policy
        if pod.disrupted or retryable(policy, pod):
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


def _delete_pod(state: _State, pod: ObservedPod, reason: DeleteReason, detail: str = ""
                ) -> None:
    """Delete `pod`, saying why (`Plan.deletions`)."""
    state.plan.delete_pods.append(pod.name)
    state.plan.deletions[pod.name] = deletion(pod, reason, state.job.status.attempt, detail)


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
        if replica.index in started or (hint is not None and hint.uid not in counted and
                                        name not in state.lost_names):
            _lost(state, replica, name, hint.cause if hint else "its pod disappeared "
                  "(deleted, preempted or evicted by someone other than the operator)")
        state.plan.create_pods.append(body)
        return ReplicaOutcome(replica, ReplicaPhase.PENDING)
    if pod.deleting:
        if pod.uid in counted:
            state.counting.add(pod.uid)  # counted as lost while it terminates: once
        elif replica.index in started and pod.name not in state.rescaled:
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
    if pod.phase is PodPhase.RUNNING:
        started.add(replica.index)
    if pod.waiting_reason in UNRUNNABLE_REASONS and pod.created is not None and \
            state.now - pod.created >= settings.unrunnable_grace:
        state.failure = (pod.waiting_reason, f"replica {replica.type} {replica.index} (pod "
                         f"{pod.name}) cannot start: {pod.waiting_reason}"
                         + (f": {pod.message}" if pod.message else ""))
    elif pod.waiting_reason in UNRUNNABLE_REASONS and pod.created is not None:
        remaining = settings.unrunnable_grace - (state.now - pod.created)
        _requeue(state.plan, remaining.total_seconds())
    phase = ReplicaPhase.RUNNING if pod.phase is PodPhase.RUNNING else ReplicaPhase.PENDING
    return ReplicaOutcome(replica, phase)


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
    if pod.disrupted:
        # Counted once, by uid, like a failure; but as lost, never toward backoffLimit.
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
        return ReplicaOutcome(replica, ReplicaPhase.FAILED, pod.exit_code)
    # Retryable: count it once (by pod uid, so a repeated pass never counts it twice), then
    # delete the pod; the next pass recreates it under the same name.
    if pod.uid not in counted:
        state.recreations[replica.type] = state.recreations.get(replica.type, 0) + 1 + \
            pod.restarts
        state.plan.events.append(Event("Warning", "ReplicaRestarting",
                                       f"{what}; restarting it"))
    state.counting.add(pod.uid)
    state.restarting = True
    _delete_pod(state, pod, DeleteReason.FAILED, what)
    return ReplicaOutcome(replica, ReplicaPhase.PENDING, pod.exit_code)


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


def _finish(state: _State, inputs: PlanInputs, settings: PlannerSettings) -> None:
    """A finished job: apply cleanPodPolicy, then the TTL. Nothing is ever created again."""
    job, plan_, pods = state.job, state.plan, inputs.pods
    policy = job.spec.run_policy.clean_pod_policy
    _sweep(state, pods, settings, lambda pod: policy is CleanPodPolicy.ALL or
           (policy is CleanPodPolicy.RUNNING and pod.active), DeleteReason.FINISHED)
    if policy is not CleanPodPolicy.NONE:
        # A replica's Service goes with its pod, and so does one whose pod is already going or
        # gone (its first delete failed, or someone else deleted the pod): a finished job's
        # Service without a pod serves nothing, and this pass may be the last one.
        kept = {p.name for p in pods if not p.deleting} - set(plan_.delete_pods)
        plan_.delete_services.extend(sorted(inputs.services - kept))
        # Pods a plugin added for the replicas (a managed Redis) serve them until they end and
        # run forever otherwise: like running replicas, they go when the job has finished.
        _without_replicas(state, pods, inputs.extras, settings)
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    completed = job.status.completion_time
    if ttl is not None and completed is not None:
        expires = _after(completed, ttl)
        if state.now >= expires:
            plan_.delete_job = True
            plan_.events.append(Event("Normal", "TTLExpired", f"deleting {job.kind} {job.name}:"
                                      f" finished more than {ttl}s ago"))
        else:
            plan_.requeue_after = (expires - state.now).total_seconds()
    _refresh_active(state, pods)


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


def _suspend_words(state: _State, what: str, reason: str, message: str) -> tuple[str, str]:
    """The Suspended condition's reason and message: trainjobs' (`reason`, `message`), or, for
    a kind of suspend_style "kubeflow", training-operator's (`NewReason(kind, "Suspended")`,
    "TFJob <name> is suspended.")."""
    if state.suspend_style != "kubeflow":
        return reason, message
    job = state.job
    return f"{job.kind}{what}", f"{job.kind} {job.name} is {what.lower()}."


def _suspend(state: _State, inputs: PlanInputs, restart_together: bool,
             settings: PlannerSettings) -> None:
    """A suspended job runs nothing: its pods and Services go, whatever cleanPodPolicy says
    (as training-operator's suspend), and the pods plugins added for them and the objects
    that exist only with the replicas (all come back when the job resumes). Replicas that
    restart together come back as a new attempt: the suspended one's rendezvous is stale.
    Kubeflow style also sets a True Running False with the suspension's words and keeps
    startTime (training-operator resets it on resume)."""
    job = state.job
    if restart_together and current_condition(job.status) is not ConditionType.SUSPENDED:
        state.status.attempt = job.status.attempt + 1
    _stop_replicas(state, inputs, settings, DeleteReason.SUSPENDED)
    reason, message = _suspend_words(state, "Suspended", "JobSuspended",
                                     f"{job.kind} {job.name} is suspended")
    if current_condition(job.status) is not ConditionType.SUSPENDED:
        state.plan.events.append(Event("Normal", reason, "suspended: pods deleted"))
    if state.suspend_style == "kubeflow" and current_condition(job.status) is \
            ConditionType.RUNNING:
        conds = state.status.conditions
        for i, cond in enumerate(conds):
            if cond.type is ConditionType.RUNNING:
                conds[i] = cond.model_copy(update={"reason": reason, "message": message})
    _idle(state, inputs.pods, ConditionType.SUSPENDED, reason, message,
          keep_start=state.suspend_style == "kubeflow")


def _queue(state: _State, inputs: PlanInputs, admission: Admission, restart_together: bool,
           settings: PlannerSettings) -> None:
    """Kueue has not admitted the job (or evicted it): as suspended, no replica exists (its
    pods, Services and the objects that exist only with them go, none is created, no restart
    or loss is counted, backoffLimit is untouched), and the Queued condition says why in
    Kueue's words; an eviction says by what. It runs again, as a resume, when admitted."""
    job = state.job
    live = [p for p in inputs.pods if not p.deleting]
    if restart_together and live:
        state.status.attempt = job.status.attempt + 1  # the rendezvous is stale
    _stop_replicas(state, inputs, settings, DeleteReason.QUEUED)
    _ensure_condition(state, ConditionType.CREATED, "JobCreated",
                      f"{job.kind} {job.name} is created")
    eviction = admission.eviction
    if eviction is not None:
        reason, message = "Evicted", f"{eviction.reason}: {eviction.message}"
        was = next((c for c in job.status.conditions if c.type is ConditionType.QUEUED), None)
        if live or was is None or was.status != "True" or was.reason != "Evicted":
            state.plan.events.append(Event("Warning", "Evicted", f"evicted by Kueue: {message}"
                                           + ("; pods deleted" if live else "")))
    else:
        reason = admission.reason or "Queued"
        message = admission.message or "waiting for Kueue to admit the job"
    _idle(state, inputs.pods, ConditionType.QUEUED, reason, message)


def _stop_replicas(state: _State, inputs: PlanInputs, settings: PlannerSettings,
                   reason: DeleteReason) -> None:
    """No replica may run now (suspended, or not admitted): every pod and Service goes, and
    so does what goes with the replicas; all come back when the job may run again."""
    _sweep(state, inputs.pods, settings, lambda pod: True, reason)
    state.plan.delete_services.extend(sorted(inputs.services))
    _without_replicas(state, inputs.pods, inputs.extras, settings)


def _idle(state: _State, pods: Sequence[ObservedPod], ctype: ConditionType, reason: str,
          message: str, keep_start: bool = False) -> None:
    """The plan of a job that runs nothing now (suspended or queued): `ctype` its exclusive
    condition, no index started, and the deadline clock restarts when it runs again (like
    batch/v1 Jobs, startTime is cleared meanwhile, unless `keep_start`: training-operator
    keeps it until the resume)."""
    _set_exclusive(state, ctype, reason, message)
    if not keep_start:
        state.status.start_time = None
    _refresh_active(state, pods, suspended=True)


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


def _refresh_active(state: _State, pods: Sequence[ObservedPod], suspended: bool = False
                    ) -> None:
    """Only the pod counts move once a job is finished or suspended (a suspended job's pods
    all go: no index stays started)."""
    deleted = set(state.plan.delete_pods)
    statuses: dict[str, ReplicaStatus] = {}
    for t, s in state.job.status.replica_statuses.items():
        mine = [p for p in pods if p.active and p.name not in deleted
                and p.replica_type_lower == t.lower()]
        running = sum(1 for p in mine if p.phase is PodPhase.RUNNING)
        update: dict[str, Any] = {"active": len(mine), "running": running,
                                  "pending": len(mine) - running}
        if suspended:
            update.update(started_indexes="", pending_reason="")
        statuses[t] = s.model_copy(update=update)
    state.status.replica_statuses = statuses
    state.status.replica_summary = _summary(state.job, statuses,
                                            finished=is_finished(state.job.status))


def _summary(job: Job, statuses: Mapping[str, ReplicaStatus], finished: bool) -> str:
    """The Replicas column: running/desired per type while the job runs ("Worker 1/4"); once
    it has finished, what its replicas did ("Chief 1 succeeded, PS stopped, Worker 4
    succeeded"), so that a finished job's pods being gone does not read like a failure."""
    if not finished:
        return ", ".join(f"{k} {statuses.get(k, _NO_REPLICAS).running}/{r.replicas}"
                         for k, r in job.spec.replica_specs.items())
    parts = []
    for k in job.spec.replica_specs:
        s = statuses.get(k, _NO_REPLICAS)
        done = [f"{n} {what}" for what, n in (("succeeded", s.succeeded), ("failed", s.failed))
                if n]
        parts.append(f"{k} {', '.join(done)}" if done else f"{k} stopped")
    return ", ".join(parts)


def _restarts(
    state: _State,
    pods: Sequence[ObservedPod],
    spec_types: Mapping[str, str],
) -> dict[str, tuple[int, int]]:
    """(restarts, recreations) per replica type; restarts never decrease.

    restarts = recreations + the in-place restarts of the pods that exist now. `recreations`
    (durable, in the status) holds what gone pods contributed: 1 + its in-place restarts for
    each counted failure (`_failed`), and the in-place restarts of a pod that disappeared
    otherwise (preempted, deleted, scaled down, suspended): when the sum over existing pods
    drops, the previous total is kept and `recreations` absorbs the difference. So resuming a
    job or losing a pod never forgives restarts that count toward backoffLimit.
    """
    old = state.job.status.replica_statuses
    already, counted, recreations = state.counted, state.counting, state.recreations
    out: dict[str, tuple[int, int]] = {}
    for key in state.job.spec.replica_specs:
        mine = [p for p in pods if spec_types.get(p.replica_type_lower) == key]
        in_place = sum(p.restarts for p in mine if not p.deleting and p.uid not in counted)
        total = recreations.get(key, 0) + in_place
        before = old.get(key)
        if before is not None:
            newly = sum(1 for p in mine if p.uid in counted and p.uid not in already
                        and not p.disrupted)  # a lost replica is no failure
            total = max(total, before.restarts + newly)
        out[key] = (total, total - in_place)
    return out


def _replica_statuses(
    state: _State,
    pods: Sequence[ObservedPod],
    outcomes: Sequence[ReplicaOutcome],
    restarts: Mapping[str, tuple[int, int]],
    spec_types: Mapping[str, str],
) -> None:
    old = state.job.status.replica_statuses
    statuses: dict[str, ReplicaStatus] = {}
    for key in state.job.spec.replica_specs:
        mine = [p for p in pods if spec_types.get(p.replica_type_lower) == key]
        phases = [o.phase for o in outcomes if o.replica.type == key]
        running = phases.count(ReplicaPhase.RUNNING)
        pending = phases.count(ReplicaPhase.PENDING)
        have = {p.index for p in mine}
        missing = any(o.replica.index not in have for o in outcomes
                      if o.replica.type == key and o.phase is ReplicaPhase.PENDING)
        before = old.get(key)
        lost = (before.lost if before else 0) + state.lost.get(key, 0)
        total, recreated = restarts[key]
        statuses[key] = ReplicaStatus(
            active=running + pending,
            running=running,
            pending=pending,
            pending_reason=_pending_reason(p for p in mine if p.phase is PodPhase.PENDING
                                           and not p.deleting) or
            (state.create_refused if missing else "") if pending else "",
            succeeded=phases.count(ReplicaPhase.SUCCEEDED),
            failed=sum(1 for p in mine if p.phase is PodPhase.FAILED and not p.disrupted),
            restarts=total,
            # Failure recreations (bookkeeping of _restarts) plus the lost replicas.
            recreations=recreated + lost,
            lost=lost,
            last_lost_reason=state.lost_reason.get(key) or
            (before.last_lost_reason if before else ""),
            started_indexes=format_indexes(state.started[key]),
            completed_indexes=format_indexes(state.completed[key]),
        )
    state.status.replica_statuses = statuses
    state.status.replica_summary = _summary(state.job, statuses, finished=False)


def _pending_reason(pods: Iterable[ObservedPod]) -> str:
    """Why pending pods wait: the scheduler's message, else a container's waiting reason."""
    waiting = ""
    for pod in pods:
        if pod.unschedulable:
            return f"Unschedulable: {pod.unschedulable}"
        if pod.waiting_reason and not waiting:
            waiting = pod.waiting_reason
    return waiting


def _restart_totals(status: JobStatus) -> dict[str, int]:
    """Failure recreations already counted per replica type (durable across operator
    restarts): `recreations` less the replicas lost to the cluster."""
    return {t: max(0, s.recreations - s.lost) for t, s in status.replica_statuses.items()}


# Conditions -------------------------------------------------------------------------------

def _ensure_condition(state: _State, ctype: ConditionType, reason: str, message: str) -> None:
    conds = state.status.conditions
    if not any(c.type is ctype for c in conds):
        conds.append(Condition(type=ctype, status="True", reason=reason, message=message,
                               last_transition_time=whole_seconds(state.now)))


def _set_exclusive(state: _State, ctype: ConditionType, reason: str, message: str) -> None:
    """Make `ctype` the one True exclusive condition, keeping the others' history as False."""
    set_exclusive(state.status.conditions, ctype, reason, message, state.now)


def _clear_exclusive(state: _State, ctype: ConditionType, reason: str, message: str) -> None:
    """Set `ctype` False (e.g. Suspended on resume) without making another one True."""
    conds = state.status.conditions
    for i, cond in enumerate(conds):
        if cond.type is ctype and cond.status == "True":
            conds[i] = cond.model_copy(update={
                "status": "False", "reason": reason, "message": message,
                "last_transition_time": whole_seconds(state.now)})


def _conclude(state: _State, ctype: ConditionType, reason: str, message: str) -> None:
    _set_exclusive(state, ctype, reason, message)
    state.status.completion_time = whole_seconds(state.now)


def _after(start: datetime, seconds: int) -> datetime:
    """`start` plus `seconds`; a moment past what a datetime holds (year 9999) never comes."""
    try:
        return start + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def _requeue(plan_: Plan, seconds: float) -> None:
    seconds = max(seconds, 0.0)
    if plan_.requeue_after is None or seconds < plan_.requeue_after:
        plan_.requeue_after = seconds


def conditions_true(status: JobStatus) -> list[Condition]:
    """The conditions that are True (for tests and printing)."""
    return [c for c in status.conditions if c.status == "True"]
