"""The Workload status the operator writes, as Kueue's job framework writes it.

Why exact copies: Kueue's workload controller and scheduler act on these conditions (a
PodsReady that never comes evicts the job after waitForPodsReady's timeout; Finished releases
the quota). Each function returns the new condition list. One condition (PodsReady,
Finished) is written by a server-side apply of that condition alone (`condition_of`, and
reconcile.ApplyCondition); the quota release, which clears the admission and sets three
conditions, by `status_patch`: a JSON merge patch of the status subresource that carries the
resourceVersion, so a Workload changed meanwhile is refused with 409 and the reconcile runs
again on fresh data. References are to Kueue v0.19.2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainjobs.kueue import constants as k
from trainjobs.kueue.model import Workload, WorkloadCondition

__all__ = [
    "MAX_CONDITION_MESSAGE",
    "PodsReadyCondition",
    "condition_of",
    "finished_conditions",
    "pods_ready_condition",
    "release_quota_patch",
    "set_condition",
    "status_patch",
    "truncate_message",
]

# pkg/util/api/api.go: maxConditionMsgSize
MAX_CONDITION_MESSAGE = 32 * 1024
NOT_READY = "Not all pods are ready or succeeded"
WAITING_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"
READY = "All pods reached readiness and the workload is running"
# Evictions after which Kueue sets Requeued true (reconciler.go:591).
_REQUEUED_REASONS = ("Preempted", "NodeFailures")


def truncate_message(message: str) -> str:
    """api.TruncateConditionMessage."""
    if len(message) <= MAX_CONDITION_MESSAGE:
        return message
    return message[: MAX_CONDITION_MESSAGE - 4] + " ..."


def _iso(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: list[dict[str, Any]], new: dict[str, Any], now: datetime) -> bool:
    """apimeta.SetStatusCondition: add `new`, or update the condition of its type (its
    lastTransitionTime changes only with its status); True if anything changed."""
    new = {**new, "lastTransitionTime": new.get("lastTransitionTime") or _iso(now)}
    for i, old in enumerate(conditions):
        if old.get("type") != new["type"]:
            continue
        updated = dict(old)
        if old.get("status") != new["status"]:
            updated["status"] = new["status"]
            updated["lastTransitionTime"] = new["lastTransitionTime"]
        for key in ("reason", "message", "observedGeneration"):
            if key in new:
                updated[key] = new[key]
        conditions[i] = updated
        return updated != old
    conditions.append(new)
    return True


def _conditions(wl: Workload) -> list[dict[str, Any]]:
    return [c.to_api() for c in wl.status.conditions]


def _condition(ctype: str, status: str, reason: str, message: str,
               generation: int) -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason,
            "message": truncate_message(message), "observedGeneration": generation}


@dataclass(frozen=True)
class PodsReadyCondition:
    status: str
    reason: str
    message: str

    def differs_from(self, wl: Workload) -> bool:
        """Not HasConditionWithTypeAndReason: no PodsReady of this status and reason."""
        return not any(c.type == k.COND_PODS_READY and c.status == self.status
                       and c.reason == self.reason for c in wl.status.conditions)

    def apply(self, wl: Workload, now: datetime) -> list[dict[str, Any]]:
        """SetConditionAndUpdate: the Workload's conditions with this one set."""
        conditions = _conditions(wl)
        set_condition(conditions, _condition(k.COND_PODS_READY, self.status, self.reason,
                                             self.message, wl.metadata.generation), now)
        return conditions


def pods_ready_condition(wl: Workload, pods_ready: bool) -> PodsReadyCondition:
    """generatePodsReadyCondition (reconciler.go:1846)."""
    if not wl.is_true(k.COND_ADMITTED):
        return PodsReadyCondition("False", "WaitForStart", NOT_READY)
    current: WorkloadCondition | None = wl.condition(k.COND_PODS_READY)
    if pods_ready:
        recovered = current is not None and current.reason in ("WaitForRecovery", "Recovered")
        return PodsReadyCondition("True", "Recovered" if recovered else "Started", READY)
    if current is not None and (current.status == "True" or current.reason == "WaitForRecovery"):
        return PodsReadyCondition("False", "WaitForRecovery", WAITING_FOR_RECOVERY)
    return PodsReadyCondition("False", "WaitForStart", NOT_READY)


def finished_conditions(wl: Workload, reason: str, message: str,
                        now: datetime) -> list[dict[str, Any]]:
    """workloadfinish.Finish's setFinishedCondition: Finished true with `reason`
    (Succeeded, Failed, FailedToStart, OutOfSync, OwnerNotFound) and `message`."""
    conditions = _conditions(wl)
    set_condition(conditions, {**_condition(k.COND_FINISHED, "True", reason, message,
                                            wl.metadata.generation),
                               "lastTransitionTime": _iso(now)}, now)
    return conditions


def _all_checks_ready(wl: Workload) -> bool:
    return all(c.state == k.CHECK_STATE_READY for c in wl.status.admission_checks)


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def release_quota_patch(wl: Workload, now: datetime) -> dict[str, Any] | None:
    """The eviction's quota release (reconciler.go:586-615), once the job has no active
    pods: Requeued (true after a preemption or node failures), QuotaReserved false with
    reason Pending and the eviction's message, the admission cleared, Admitted false
    (UnsetQuotaReservationWithCondition + SyncAdmittedCondition, feature gates at their
    v0.19.2 defaults), the admitted time accumulated. None if there is nothing to release."""
    evicted = wl.condition(k.COND_EVICTED)
    if evicted is None or evicted.status != "True" or not wl.is_true(k.COND_QUOTA_RESERVED):
        return None
    gen = wl.metadata.generation
    conditions = _conditions(wl)
    requeued = evicted.reason in _REQUEUED_REASONS
    set_condition(conditions, _condition(k.COND_REQUEUED, "True" if requeued else "False",
                                         evicted.reason, evicted.message, gen), now)
    set_condition(conditions, {**_condition(k.COND_QUOTA_RESERVED, "False", "Pending",
                                            evicted.message, gen),
                               "lastTransitionTime": _iso(now)}, now)
    status: dict[str, Any] = {"admission": None}
    admitted = wl.condition(k.COND_ADMITTED)
    if admitted is not None and admitted.status == "True":
        checks_ready = _all_checks_ready(wl)
        reason, message = (("NoReservation", "The workload has no reservation") if checks_ready
                           else ("NoReservationUnsatisfiedChecks",
                                 "The workload has no reservation and not all checks ready"))
        set_condition(conditions, {**_condition(k.COND_ADMITTED, "False", reason, message, gen),
                                   "lastTransitionTime": _iso(now)}, now)
        since = _parse_time(admitted.last_transition_time)
        if since is not None:
            spent = max(0, int((now - since).total_seconds()))
            status["accumulatedPastExecutionTimeSeconds"] = (
                (wl.status.accumulated_past_execution_time_seconds or 0) + spent)
    status["conditions"] = conditions
    return status_patch(wl, status)


def condition_of(conditions: Sequence[dict[str, Any]], ctype: str) -> dict[str, Any]:
    """The condition of type `ctype` in `conditions` (as `set_condition` left it), to be
    applied on its own."""
    return next(c for c in conditions if c.get("type") == ctype)


def status_patch(wl: Workload, status: dict[str, Any] | Sequence[dict[str, Any]]
                 ) -> dict[str, Any]:
    """A JSON merge patch for the Workload's status subresource: `status` (or, given a
    list, the conditions) with the resourceVersion read, so that a concurrent write fails
    with 409 instead of being overwritten (a merge patch replaces the whole list)."""
    body = dict(status) if isinstance(status, dict) else {"conditions": list(status)}
    return {"metadata": {"resourceVersion": wl.metadata.resource_version}, "status": body}
