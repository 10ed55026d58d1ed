"""`spec.runPolicy.failurePolicy`: what a replica's failure means and what to do about it
(issue 39), as an ordered list of rules.

Why one list on the run policy rather than one per replica type: a rule reads top-down as
Kubernetes' podFailurePolicy and JobSet's failurePolicy do (the first match decides), may
name the replica types it is for (`match.replicaTypes`) or none (any), and escalates to any
other rule by name, across types ("three OOMs of a Worker, then restart the whole job").
Failures no rule matches keep the meaning the replica's `restartPolicy` gives them (the
default rules, docs/api.md), so a job without a failurePolicy behaves exactly as before.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from trainjobs.api.spec_model import SpecModel

__all__ = [
    "MAX_RULES",
    "MAX_RULE_BUDGET",
    "ExitCodeMatch",
    "FailureAction",
    "FailureReason",
    "FailureRule",
    "RuleBudget",
    "RuleMatch",
]

#: Rules per job: a policy is read by people; its status keeps every rule's uses.
MAX_RULES = 16
#: A rule's budget: its uses are kept in the status (one time each) to count a window.
MAX_RULE_BUDGET = 100

RuleName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                            max_length=63)]


class FailureReason(StrEnum):
    """Why a replica failed, in the platform's words, as a rule matches it."""

    ERROR = "Error"  # its process exited non-zero, and nothing else is known
    OOM_KILLED = "OOMKilled"  # killed for exceeding its memory limit
    EVICTED = "Evicted"  # the kubelet (node pressure) or the Eviction API (a drain)
    PREEMPTED = "Preempted"  # the scheduler preempted it for a pod of higher priority
    NODE_LOST = "NodeLost"  # its node went away or shut down
    DEADLINE_EXCEEDED = "DeadlineExceeded"  # the pod's own activeDeadlineSeconds
    IMAGE_PULL_FAILED = "ImagePullFailed"  # its image or container cannot be made (past the grace)
    STALLED = "Stalled"  # no progress for runPolicy.progressDeadlineSeconds


class FailureAction(StrEnum):
    """What a rule does with the failure it matched."""

    RESTART_IN_PLACE = "RestartInPlace"  # the kubelet restarts the process (OnFailure pods)
    RECREATE_POD = "RecreatePod"  # that replica's pod is created again
    RESTART_REPLICA_TYPE = "RestartReplicaType"  # every pod of its replica type, again
    RESTART_JOB = "RestartJob"  # every replica, again (a new attempt)
    FAIL_JOB = "FailJob"  # the job fails, the rule named in its message
    IGNORE = "Ignore"  # as RecreatePod, not counted against backoffLimit


class ExitCodeMatch(SpecModel):
    """Exit codes, as Kubernetes' podFailurePolicy writes them."""

    operator: Literal["In", "NotIn"] = "In"
    values: list[Annotated[int, Field(ge=0, le=255, strict=True)]] = Field(
        min_length=1, max_length=255, description="Exit codes 0..255.")


class RuleMatch(SpecModel):
    """What a failure must be for the rule to act: every field given must match (any of a
    field's values); at least one of `exitCodes` and `reasons`."""

    replica_types: list[str] | None = Field(
        default=None, min_length=1, max_length=16,
        description="Only failures of these replica types (absent: any).")
    exit_codes: ExitCodeMatch | None = Field(
        default=None, description="The process's exit code (failures without one, such as "
                                  "a preemption, do not match).")
    reasons: list[FailureReason] | None = Field(
        default=None, min_length=1, max_length=8,
        description="Error, OOMKilled, Evicted, Preempted, NodeLost, DeadlineExceeded, "
                    "ImagePullFailed, Stalled.")


class RuleBudget(SpecModel):
    """How often the rule may act (within `windowSeconds`, when given) before it is spent."""

    count: int = Field(ge=0, le=MAX_RULE_BUDGET, strict=True)
    window_seconds: int | None = Field(default=None, ge=1, le=30 * 24 * 3600, strict=True)


class FailureRule(SpecModel):
    """One rule: the first that matches a failure decides it."""

    name: RuleName = Field(description="Named in the status, Events and `whenSpent`.")
    match: RuleMatch
    action: FailureAction
    budget: RuleBudget | None = Field(
        default=None, description="Absent: the rule is limited only by backoffLimit.")
    when_spent: RuleName | None = Field(
        default=None, description="With a budget: the rule whose action applies once it is "
                                  "spent (absent: the job fails).")
