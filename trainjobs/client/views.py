"""Typed, read-only views of what the API server returns about a job's pods and events, and
the per-replica progress derived from them.

Why here and pure: the CLI's live display, `trainjobs status` and notebooks show the same
figures; computing them from plain objects keeps that logic unit-testable without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainjobs.api.models import Job
from trainjobs.core.render import LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE
from trainjobs.core.status import is_finished

__all__ = ["JobEvent", "PodInfo", "ReplicaProgress", "progress", "replica_names"]


def _time(raw: Any) -> datetime | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class PodInfo:
    """One pod of a job: which replica it is, its phase, and why it waits or ended."""

    name: str
    replica_type: str  # the replicaSpecs key as the job spells it, e.g. "Worker"
    index: int | None
    phase: str
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    restarts: int = 0
    node: str = ""
    deleting: bool = False
    uid: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def replica(self) -> str:
        """`Worker-1`: the name `trainjobs logs --replica` takes (as `trainjobs run` prints)."""
        return f"{self.replica_type}-{self.index}" if self.index is not None else self.name

    @classmethod
    def from_api(cls, raw: dict[str, Any], type_names: dict[str, str] | None = None) -> PodInfo:
        """From a Pod object; `type_names` maps lower-case replica types to the job's keys."""
        meta = raw.get("metadata") or {}
        labels = meta.get("labels") or {}
        status = raw.get("status") or {}
        rtype = str(labels.get(LABEL_REPLICA_TYPE, ""))
        index_raw = str(labels.get(LABEL_REPLICA_INDEX, ""))
        reason, message, exit_code, restarts = _pod_reason(status)
        return cls(
            name=str(meta.get("name", "")),
            replica_type=(type_names or {}).get(rtype, rtype.capitalize()),
            index=int(index_raw) if index_raw.isdigit() else None,
            phase=str(status.get("phase") or "Pending"),
            reason=reason, message=message, exit_code=exit_code, restarts=restarts,
            node=str((raw.get("spec") or {}).get("nodeName") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            uid=str(meta.get("uid", "")), raw=raw)


def _pod_reason(status: dict[str, Any]) -> tuple[str, str, int | None, int]:
    """Why a pod waits (unschedulable, pulling...) or how it ended, its exit code, restarts."""
    restarts = 0
    for cs in status.get("containerStatuses") or []:
        restarts += int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        if "terminated" in state:
            term = state["terminated"] or {}
            code = term.get("exitCode")
            return (str(term.get("reason") or ""), str(term.get("message") or ""),
                    int(code) if isinstance(code, int) else None, restarts)
        if "waiting" in state:
            wait = state["waiting"] or {}
            return str(wait.get("reason") or ""), str(wait.get("message") or ""), None, restarts
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return (str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or ""),
                    None, restarts)
    return str(status.get("reason") or ""), str(status.get("message") or ""), None, restarts


@dataclass(frozen=True)
class JobEvent:
    """A Kubernetes Event about the job or one of its pods."""

    type: str  # Normal or Warning
    reason: str
    message: str
    object: str  # e.g. "MxJob/mnist" or "Pod/mnist-worker-0"
    count: int = 1
    time: datetime | None = None
    uid: str = ""

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> JobEvent:
        obj = raw.get("involvedObject") or raw.get("regarding") or {}
        meta = raw.get("metadata") or {}
        when = (raw.get("lastTimestamp") or raw.get("eventTime")
                or raw.get("firstTimestamp") or meta.get("creationTimestamp"))
        return cls(type=str(raw.get("type") or "Normal"), reason=str(raw.get("reason") or ""),
                   message=str(raw.get("message") or raw.get("note") or ""),
                   object=f"{obj.get('kind', '')}/{obj.get('name', '')}",
                   count=int(raw.get("count") or 1), time=_time(when),
                   uid=str(meta.get("uid", "")))


@dataclass(frozen=True)
class ReplicaProgress:
    """One replica type now: desired, running, pending (and why), succeeded, failed."""

    replica_type: str
    desired: int
    running: int
    pending: int
    pending_reason: str
    succeeded: int
    failed: int
    restarts: int

    def describe(self) -> str:
        """`Worker 2/3 running, 1 pending (Unschedulable: 0/2 nodes...), 1 succeeded`."""
        parts = [f"{self.replica_type} {self.running}/{self.desired} running"]
        if self.pending:
            why = f" ({self.pending_reason})" if self.pending_reason else ""
            parts.append(f"{self.pending} pending{why}")
        for word, n in (("succeeded", self.succeeded), ("failed", self.failed),
                        ("restarts", self.restarts)):
            if n:
                parts.append(f"{n} {word}")
        return ", ".join(parts)


def replica_names(job: Job) -> dict[str, str]:
    """Lower-case replica type (as in pod labels) -> the job's replicaSpecs key."""
    return {key.lower(): key for key in job.spec.replica_specs}


def progress(job: Job, pods: list[PodInfo]) -> list[ReplicaProgress]:
    """Per replica type, from the job's spec and status and its current pods. Running and
    pending are counted from the pods, which change before the status does (a replica whose
    pod does not exist yet is pending); why they wait is the operator's `pendingReason` (a
    full ResourceQuota, which no pod shows) and the pods' own; succeeded, failed and restarts
    are the operator's counters."""
    out = []
    for key, spec in job.spec.replica_specs.items():
        mine = [p for p in pods if p.replica_type == key and not p.deleting]
        running = [p for p in mine if p.phase == "Running"]
        waiting = [p for p in mine if p.phase == "Pending"]
        counted = job.status.replica_statuses.get(key)
        # The pods may tell before the operator's counters do.
        succeeded = max(counted.succeeded if counted else 0,
                        sum(p.phase == "Succeeded" for p in mine))
        failed = counted.failed if counted else 0
        finished = is_finished(job.status)
        missing = 0 if finished else max(
            0, spec.replicas - len(running) - len(waiting) - succeeded)
        reasons = sorted({_why(p) for p in waiting if _why(p)})
        if counted and counted.pending_reason and counted.pending_reason not in reasons:
            reasons.insert(0, counted.pending_reason)  # the operator's: a full quota, say
        if missing and not reasons:
            reasons = ["not created yet"]
        out.append(ReplicaProgress(
            replica_type=key, desired=spec.replicas, running=len(running),
            pending=len(waiting) + missing, pending_reason="; ".join(reasons),
            succeeded=succeeded, failed=failed,
            restarts=counted.restarts if counted else 0))
    return out


def _why(pod: PodInfo) -> str:
    if not pod.reason:
        return ""
    return f"{pod.reason}: {pod.message}" if pod.message else pod.reason
