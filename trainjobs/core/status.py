"""What a job's status means, defined once: its state, when it has finished, the exclusive
conditions, how a job is failed outright, and which changes must be written at once.

Why one module: the planner, both backends (the operator and `trainjobs run`) and the client
all ask these questions; answered in several places, the answers drift (a client that waits
for "Succeeded" or "Failed" while the operator adds a third finished state, a failure written
by hand that leaves two exclusive conditions True). Pure functions on the typed status (and
on the planner's working list of conditions), no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from trainjobs.api.models import Condition, ConditionType, JobStatus
from trainjobs.core.indexes import parse_indexes

__all__ = [
    "EXCLUSIVE_CONDITIONS",
    "FINISHED_CONDITIONS",
    "FINISHED_STATES",
    "current_condition",
    "failed",
    "is_finished",
    "must_write_now",
    "progress_only",
    "replicas_forgotten",
    "set_exclusive",
    "state_of",
    "whole_seconds",
]

#: At most one of these is True at a time; it is the job's `state`.
EXCLUSIVE_CONDITIONS = (
    ConditionType.RUNNING, ConditionType.RESTARTING, ConditionType.SUCCEEDED,
    ConditionType.FAILED, ConditionType.SUSPENDED, ConditionType.QUEUED,
)
_EXCLUSIVE_VALUES = frozenset(c.value for c in EXCLUSIVE_CONDITIONS)
#: A job whose one True exclusive condition is one of these never runs again.
FINISHED_CONDITIONS = (ConditionType.SUCCEEDED, ConditionType.FAILED)
#: The same as states, for callers that hold only a job's `state` (the client's `wait`).
FINISHED_STATES = frozenset(c.value for c in FINISHED_CONDITIONS)


def is_finished(status: JobStatus) -> bool:
    """Whether the job has finished (Succeeded or Failed): nothing is created for it again.
    The operator writes the state and the conditions together; either tells (a status built
    by another tool, or by hand, may carry only one of them)."""
    return status.state in FINISHED_STATES or any(
        c.type in FINISHED_CONDITIONS and c.status == "True" for c in status.conditions)


def current_condition(status: JobStatus) -> ConditionType | None:
    """The exclusive condition that is True, if any."""
    for c in status.conditions:
        if c.type in EXCLUSIVE_CONDITIONS and c.status == "True":
            return c.type
    return None


def state_of(conditions: Iterable[Condition]) -> str:
    """The `state` that conditions give: the True exclusive one, else "Created" once the job
    has any condition, else ""."""
    conds = list(conditions)
    current = next((c.type.value for c in conds
                    if c.type in EXCLUSIVE_CONDITIONS and c.status == "True"), None)
    return current or ("Created" if conds else "")


def set_exclusive(conditions: list[Condition], ctype: ConditionType, reason: str,
                  message: str, now: datetime) -> None:
    """Make `ctype` the one True exclusive condition (replacing items of `conditions`),
    keeping the others' history as False."""
    when = whole_seconds(now)
    for i, cond in enumerate(conditions):
        if cond.type in EXCLUSIVE_CONDITIONS and cond.type is not ctype and \
                cond.status == "True":
            conditions[i] = cond.model_copy(update={"status": "False",
                                                    "last_transition_time": when})
    for i, cond in enumerate(conditions):
        if cond.type is ctype:
            if cond.status != "True":
                conditions[i] = cond.model_copy(update={
                    "status": "True", "last_transition_time": when, "reason": reason,
                    "message": message})
            elif (cond.reason, cond.message) != (reason, message):
                conditions[i] = cond.model_copy(update={"reason": reason, "message": message})
            return
    conditions.append(Condition(type=ctype, status="True", reason=reason, message=message,
                                last_transition_time=when))


def failed(status: JobStatus, reason: str, message: str, now: datetime,
           generation: int | None) -> JobStatus:
    """`status` with the job failed outright, for a reason the planner could not see (the
    API server refused what the job asks for, a name another object holds, an invalid spec):
    Failed the one True exclusive condition, completionTime now."""
    now = whole_seconds(now)
    conditions = list(status.conditions)
    set_exclusive(conditions, ConditionType.FAILED, reason, message[:2000], now)
    return status.model_copy(update={
        "state": ConditionType.FAILED.value, "completion_time": now,
        "start_time": status.start_time or now, "conditions": conditions,
        "observed_generation": generation or status.observed_generation})


def must_write_now(old: JobStatus, new: JobStatus) -> bool:
    """Whether the change from `old` to `new` is written at once rather than coalesced: a
    new state (but Created), a counted failure, a completion, a new attempt, a checkpoint
    asked or answered (its deadline must outlive an operator restart), or a replica
    forgotten (see `replicas_forgotten`). A change of counts only, or a new job's first
    status, may wait and go out with whatever changes meanwhile; a change of `progress` is
    never urgent (see `progress_only`)."""
    return (new.state != old.state and new.state != ConditionType.CREATED.value) or \
        new.counted_failures != old.counted_failures or \
        new.completion_time != old.completion_time or new.attempt != old.attempt or \
        new.checkpoint_request != old.checkpoint_request or \
        new.last_checkpoint != old.last_checkpoint or replicas_forgotten(old, new)


def progress_only(old: JobStatus, new: JobStatus) -> bool:
    """Whether `new` differs from `old` in `progress` alone: such a change is written on the
    progress budget (at most once per interval per job, within a global rate), while any
    other change written carries the newest progress along."""
    return new.progress != old.progress and \
        new.model_copy(update={"progress": old.progress}) == old


def replicas_forgotten(old: JobStatus, new: JobStatus) -> bool:
    """Whether `new` counts a lost replica or stops counting an index as started without it
    having succeeded: written at once, before the plan's deletes, or a pod the operator
    deleted would look lost later. An index that moves from started to completed is a count
    change like any other (its pod is not deleted): it waits for the coalescing, so Workers
    ending together cost one write."""
    for rtype, before in old.replica_statuses.items():
        after = new.replica_statuses.get(rtype)
        if after is None or after.lost != before.lost:
            return True
        if before.started_indexes == after.started_indexes:
            continue
        left = parse_indexes(before.started_indexes) - parse_indexes(after.started_indexes)
        if left - parse_indexes(after.completed_indexes):
            return True
    return False


def whole_seconds(value: datetime) -> datetime:
    """A status timestamp as the API keeps it: UTC, whole seconds."""
    return value.astimezone(UTC).replace(microsecond=0)

