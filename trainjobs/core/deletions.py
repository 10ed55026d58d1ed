"""Why the planner deletes a pod, carried with the decision (`Plan.deletions`).

Why typed and with the decision: a pod the job still wants (a live replica of its current
attempt) deleted without a reason in the log is what made issue 36 unexplained: a fresh
attempt's pods deleted 0.2 s after their creation, and nothing said why. The backend logs and
counts each such deletion with the reason the planner had (trainjobs_wanted_pod_deletions_total),
rather than guessing it later from the pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trainjobs.core.observed import ObservedPod

__all__ = ["DeleteReason", "PodDeletion", "deletion"]


class DeleteReason(StrEnum):
    """What a pod's deletion serves (the metric's `reason` label)."""

    NEW_ATTEMPT = "NewAttempt"  # replicas restart together: the attempt ended (see `detail`)
    RESCALED = "Rescaled"  # rendered for other replica counts
    SUSPENDED = "Suspended"
    QUEUED = "Queued"  # Kueue has not admitted the job, or evicted it
    FAILED = "Failed"  # a retryable failure: recreated
    DISRUPTED = "Disrupted"  # taken by the cluster (preempted, evicted): recreated
    SCALED_DOWN = "ScaledDown"  # its replica is no longer in the spec
    FINISHED = "Finished"  # the job ended: cleanPodPolicy
    UNFINISHED_DELETE = "UnfinishedDelete"  # a zero-grace deletion cut off half-way
    STALLED = "Stalled"  # no progress for progressDeadlineSeconds: every replica restarts


#: Reasons that never concern a pod the job still wants (it has ended, or its replica has).
_UNWANTED = frozenset({DeleteReason.SCALED_DOWN, DeleteReason.FINISHED})


@dataclass(frozen=True, slots=True)
class PodDeletion:
    """One pod the plan deletes: why (`reason`, and `detail` in words), and whether the job
    still wanted it (`wanted`: a live replica of its current attempt, pending or running)."""

    reason: DeleteReason
    detail: str = ""
    wanted: bool = False


def deletion(pod: ObservedPod, reason: DeleteReason, attempt: int, detail: str = ""
             ) -> PodDeletion:
    """The record of deleting `pod` for `reason`, the job's current attempt being
    `attempt` (a pod not known to carry one is the current attempt's)."""
    current = attempt if pod.attempt is None else pod.attempt
    return PodDeletion(reason, detail, wanted=pod.active and current == attempt and
                       reason not in _UNWANTED)
