"""How `trainjobs status` shows a job's failures: the newest decisions of its failure rules
(`status.failures`) and, per `runPolicy.failurePolicy` rule with a budget, its uses against
that budget (`status.failureRuleUses`).

Why apart and pure: the operator records each decision once, in its own words (rule, action,
budget left, the rules escalated from); turning that record into one line each, and counting a
budget's window from a given time, is unit-tested without a cluster, as progress_text.py and
checkpoint.py are for the sections beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from trainjobs.api.failure_policy import FailureRule
from trainjobs.api.models import FailureRecord, Job
from trainjobs.core.failure_rules import describe_budget

__all__ = ["RECENT", "budget_line", "decision_line", "failure_lines"]

#: Decisions shown; the status keeps the newest ten (`kubectl get -o yaml` shows them all).
RECENT = 5

#: Rule names the operator records for decisions no failurePolicy rule made.
_DEFAULT_PREFIX = "restartPolicy/"
_DISRUPTION = "disruption"


def _clock(when: datetime, now: datetime) -> str:
    """`12:03:04` (UTC); `11-27 12:03:04` when not on `now`'s UTC day."""
    utc, today = when.astimezone(UTC), now.astimezone(UTC)
    return utc.strftime("%H:%M:%S" if utc.date() == today.date() else "%m-%d %H:%M:%S")


def decision_line(record: FailureRecord, now: datetime) -> str:
    """`12:03:04 mx-worker-1 exit 137 (OOMKilled): rule oom -> RecreatePod, 2 left`; an
    escalation ends `, escalated from retry`; the default rules read `restartPolicy/ExitCode
    -> RecreatePod`, a pod the cluster took `disruption -> recreated, not counted`."""
    what = (f"exit {record.exit_code} ({record.reason})" if record.exit_code is not None
            else f"({record.reason})")
    if record.rule == _DISRUPTION:
        decided = "disruption -> recreated, not counted"
    else:
        by = record.rule if record.rule.startswith(_DEFAULT_PREFIX) else f"rule {record.rule}"
        decided = f"{by} -> {record.action}"
        if record.budget_left is not None:
            decided += f", {record.budget_left} left"
    if record.escalated_from:
        decided += f", escalated from {', '.join(record.escalated_from)}"
    return f"{_clock(record.time, now)} {record.replica} {what}: {decided}"


def _counted(rule: FailureRule, used: Sequence[datetime], now: datetime) -> int:
    """The uses the rule's budget still counts: within its window before `now` (the
    operator's own rule: a use exactly a window old no longer counts)."""
    window = rule.budget.window_seconds if rule.budget else None
    if window is None:
        return len(used)
    since = now - timedelta(seconds=window)
    return sum(t > since for t in used)


def budget_line(rule: FailureRule, used: Sequence[datetime], now: datetime) -> str:
    """`oom: 1 of 3 in 3600s used`; spent: `..., spent: then rule restart` (or `the job
    fails` when it names no next rule). For a rule with a budget."""
    count = _counted(rule, used, now)
    line = f"{rule.name}: {count} of {describe_budget(rule)} used"
    if rule.budget is not None and count >= rule.budget.count:
        line += (f", spent: then rule {rule.when_spent}" if rule.when_spent
                 else ", spent: the job fails")
    return line


def failure_lines(job: Job, now: datetime, recent: int = RECENT) -> list[str]:
    """`trainjobs status`'s failures section: the newest `recent` decisions, oldest first
    (and how many earlier ones the status keeps), then each budgeted failurePolicy rule's
    uses. None for a job that has not failed."""
    records = list(job.status.failures or ())
    uses = job.status.failure_rule_uses or {}
    if not records and not any(uses.values()):
        return []
    shown = records[-recent:] if recent > 0 else []
    lines = [decision_line(r, now) for r in shown]
    if len(records) > len(shown):
        lines.insert(0, f"{len(records) - len(shown)} earlier in status.failures")
    for rule in job.spec.run_policy.failure_policy or ():
        if rule.budget is not None:
            lines.append(budget_line(rule, uses.get(rule.name, ()), now))
    return lines
