"""The working state of one planning pass (`_State`, which carries the kind's rules) and the
status it edits (`_Status`), with the edits that every path makes: the conditions, the
requeue, and the deadline arithmetic."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from trainjobs.api.models import (
    CheckpointRequestStatus,
    CheckpointStatus,
    Condition,
    ConditionType,
    FailureRecord,
    Job,
    JobStatus,
    OwnedObjectStatus,
    ProgressStatus,
    ReplicaStatus,
)
from trainjobs.core.deletions import DeleteReason, deletion
from trainjobs.core.failure_rules import RuleDecision
from trainjobs.core.observed import GonePod, ObservedPod
from trainjobs.core.status import set_exclusive, state_of, whole_seconds

from .inputs import KindRules, Plan


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
    progress: ProgressStatus | None = None  # reported by the program: kept as it is
    # Checkpoints (checkpoint.py): the newest saved, the newest request, the user's request.
    last_checkpoint: CheckpointStatus | None = None
    checkpoint_request: CheckpointRequestStatus | None = None
    observed_checkpoint_request: str | None = None
    # Failure rules (rules.py): the newest decisions and each rule's uses.
    failures: list[FailureRecord] | None = None
    failure_rule_uses: dict[str, list[datetime]] | None = None
    restarts_seen: dict[str, int] | None = None

    @classmethod
    def of(cls, status: JobStatus) -> _Status:
        return cls(conditions=list(status.conditions),
                   replica_statuses=dict(status.replica_statuses),
                   replica_summary=status.replica_summary,
                   start_time=_whole(status.start_time),
                   completion_time=_whole(status.completion_time),
                   counted_failures=list(status.counted_failures), attempt=status.attempt,
                   owned_objects=status.owned_objects or None, progress=status.progress,
                   last_checkpoint=status.last_checkpoint,
                   checkpoint_request=status.checkpoint_request,
                   observed_checkpoint_request=status.observed_checkpoint_request,
                   failures=list(status.failures) if status.failures else None,
                   failure_rule_uses=dict(status.failure_rule_uses)
                   if status.failure_rule_uses else None,
                   restarts_seen=dict(status.restarts_seen) if status.restarts_seen else None)

    def built(self, old: JobStatus, generation: int | None) -> JobStatus:
        """The status to report: `old` itself when nothing changed (the backend writes
        nothing then)."""
        new = JobStatus(state=state_of(self.conditions), replica_summary=self.replica_summary,
                        conditions=self.conditions, replica_statuses=self.replica_statuses,
                        start_time=self.start_time, completion_time=self.completion_time,
                        observed_generation=generation or None,
                        counted_failures=self.counted_failures, attempt=self.attempt,
                        owned_objects=self.owned_objects, progress=self.progress,
                        last_checkpoint=self.last_checkpoint,
                        checkpoint_request=self.checkpoint_request,
                        observed_checkpoint_request=self.observed_checkpoint_request,
                        failures=self.failures, failure_rule_uses=self.failure_rule_uses,
                        restarts_seen=self.restarts_seen)
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
    # The kind's rules (restart_together, suspend_style), read by the paths that they change.
    kind: KindRules = KindRules()
    # Pods recreated because the replica counts changed (their environment lists every peer).
    rescaled: list[str] = field(default_factory=list)
    create_refused: str = ""
    # Failed or lost pods already counted (by uid, durable in countedFailures), those counted
    # as of this pass, and the failure recreations per replica type (see `_restarts`).
    counted: frozenset[str] = frozenset()
    counting: set[str] = field(default_factory=set)
    recreations: dict[str, int] = field(default_factory=dict)
    # Failure rules (rules.py): the decision per failed pod uid (the paths that read one
    # agree, and a budget is used once), and per replicaSpecs key when a rule restarted it
    # (its pods created before are stale; durable in replicaStatuses.restartedAt).
    decisions: dict[str, RuleDecision | None] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)  # failed pods a rule ignores (uncounted)
    restart_marks: dict[str, datetime] = field(default_factory=dict)


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


def _delete_pod(state: _State, pod: ObservedPod, reason: DeleteReason, detail: str = ""
                ) -> None:
    """Delete `pod`, saying why (`Plan.deletions`)."""
    state.plan.delete_pods.append(pod.name)
    state.plan.deletions[pod.name] = deletion(pod, reason, state.job.status.attempt, detail)
