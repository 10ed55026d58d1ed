"""What the status counts and says of the replicas: restarts (never forgiven), losses, the
replica statuses and the Replicas column, and the Created condition's reason while a quota
refuses the job's pods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainjobs.api.models import ConditionType, Job, JobStatus, ReplicaStatus
from trainjobs.core.indexes import format_indexes
from trainjobs.core.observed import ObservedPod, PodPhase, loss_reason
from trainjobs.core.status import is_finished
from trainjobs.plugin.types import Replica, ReplicaOutcome, ReplicaPhase

from .inputs import Event
from .state import _NO_REPLICAS, _State


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
                        and not p.disrupted  # a lost replica is no failure
                        and p.uid not in state.ignored)  # nor one a rule ignores
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
            restarted_at=state.restart_marks.get(key),
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
