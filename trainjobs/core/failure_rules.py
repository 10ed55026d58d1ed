"""Failure rules (`runPolicy.failurePolicy`, issue 39): which rule a failure meets, what it
does, and when a rule's budget is spent; and the checks that refuse a policy that cannot
mean anything.

Why pure and apart from the planner: the planner asks one question per failure ("what now?")
and keeps the answer's bookkeeping in the status; the same rules are read by `trainjobs run`
(through the planner), by validation before anything runs, and by the tests, with times
passed in (no clock here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from trainjobs.api.failure_policy import FailureAction, FailureReason, FailureRule
from trainjobs.core.observed import ObservedPod, loss_reason

__all__ = ["IN_PLACE_REASONS", "Failure", "RuleDecision", "classify", "decide",
           "describe_budget", "disruption_reason", "policy_errors"]

#: The disruption and status reasons the platform gives, by the reason a rule matches.
_PREEMPTED = frozenset({"PreemptionByScheduler", "Preempting", "Preempted"})
_NODE_LOST = frozenset({"DeletionByTaintManager", "DeletionByPodGC", "NodeLost",
                        "NodeShutdown", "Shutdown", "Terminated"})
_EVICTED = frozenset({"EvictionByEvictionAPI", "Evicted", "TerminationByKubelet",
                      "OutOfcpu", "OutOfmemory", "UnexpectedAdmissionError", "NodeAffinity"})


@dataclass(frozen=True)
class Failure:
    """One replica's failure as a rule sees it."""

    pod: str
    uid: str
    replica_type: str  # as the spec spells it
    reason: FailureReason
    exit_code: int | None = None


@dataclass(frozen=True)
class RuleDecision:
    """What the rules decided about one failure: the rule that acts (after escalation), its
    action, how often it may still act (None: no budget of its own), the rules whose budget
    was spent on the way, and the rules' uses with this one added."""

    rule: str
    action: FailureAction
    budget_left: int | None
    escalated_from: tuple[str, ...] = ()
    uses: Mapping[str, tuple[datetime, ...]] = field(default_factory=dict)
    spent: bool = False  # the last rule's budget was spent and it names no next one


def classify(pod: ObservedPod) -> FailureReason:
    """The reason a rule matches for a failed pod: what disrupted it, else OOMKilled or
    DeadlineExceeded when the kubelet said so, else Error."""
    if pod.disrupted:
        return disruption_reason(pod.disruption or pod.reason) or FailureReason.EVICTED
    if pod.reason == "OOMKilled":
        return FailureReason.OOM_KILLED
    if pod.reason == "DeadlineExceeded":
        return FailureReason.DEADLINE_EXCEEDED
    return FailureReason.ERROR


def disruption_reason(cause: str) -> FailureReason | None:
    """The reason a rule matches for a pod the platform took, from the cause it gave
    ("PreemptionByScheduler: ..."); None when it named none of its disruptions (a pod deleted
    by a user or a controller that says nothing)."""
    said = loss_reason(cause)
    if said in _PREEMPTED:
        return FailureReason.PREEMPTED
    if said in _NODE_LOST:
        return FailureReason.NODE_LOST
    if said in _EVICTED:
        return FailureReason.EVICTED
    return None


def _matches(rule: FailureRule, failure: Failure) -> bool:
    match = rule.match
    if match.replica_types is not None and failure.replica_type not in match.replica_types:
        return False
    if match.reasons is not None and failure.reason not in match.reasons:
        return False
    if match.exit_codes is not None:
        if failure.exit_code is None:
            return False
        listed = failure.exit_code in match.exit_codes.values
        if listed != (match.exit_codes.operator == "In"):
            return False
    return match.reasons is not None or match.exit_codes is not None


def _recent(rule: FailureRule, used: Sequence[datetime], now: datetime) -> list[datetime]:
    """The rule's uses its budget still counts (those within its window)."""
    budget = rule.budget
    if budget is None or budget.window_seconds is None:
        return list(used)
    since = now - timedelta(seconds=budget.window_seconds)
    return [t for t in used if t > since]


def decide(rules: Sequence[FailureRule], failure: Failure,
           uses: Mapping[str, Sequence[datetime]], now: datetime) -> RuleDecision | None:
    """The first rule that matches `failure`, escalated while budgets are spent (None: no
    rule matches: the replica's restartPolicy decides)."""
    first = next((r for r in rules if _matches(r, failure)), None)
    if first is None:
        return None
    by_name = {r.name: r for r in rules}
    rule, escalated = first, []
    while True:
        recent = _recent(rule, uses.get(rule.name, ()), now)
        if rule.budget is None or len(recent) < rule.budget.count:
            break
        escalated.append(rule.name)
        following = by_name.get(rule.when_spent or "")
        if following is None or following.name in escalated:
            return RuleDecision(rule.name, FailureAction.FAIL_JOB, 0, tuple(escalated[:-1]),
                                {k: tuple(v) for k, v in uses.items()}, spent=True)
        rule = following
    kept = {k: tuple(v) for k, v in uses.items()}
    left = None
    if rule.budget is not None:
        recent.append(now)
        kept[rule.name] = tuple(recent[-max(rule.budget.count, 1):])
        left = rule.budget.count - len(recent)
    return RuleDecision(rule.name, rule.action, left, tuple(escalated), kept)


def describe_budget(rule: FailureRule) -> str:
    """"3 in 3600s", "3"."""
    if rule.budget is None:
        return "unlimited"
    window = rule.budget.window_seconds
    return f"{rule.budget.count}" + (f" in {window}s" if window else "")


#: Actions a kind whose replicas restart together (a new attempt for every failure) can take.
_TOGETHER_ACTIONS = frozenset({FailureAction.RESTART_JOB, FailureAction.FAIL_JOB,
                               FailureAction.IGNORE})


#: What the kubelet restarts in place: a process that exited, whatever the code.
IN_PLACE_REASONS = frozenset({FailureReason.ERROR, FailureReason.OOM_KILLED})


def policy_errors(rules: Sequence[FailureRule], replica_types: Sequence[str],
                  restart_together: bool, kind: str,
                  in_place_types: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Why `rules` cannot mean anything for a job of `kind` with `replica_types` (those in
    `in_place_types` have pods the kubelet restarts in place: restartPolicy OnFailure or
    Always), as (field path under spec.runPolicy.failurePolicy, message); empty when it is
    sound."""
    errors: list[tuple[str, str]] = []
    names: dict[str, int] = {}
    for i, rule in enumerate(rules):
        at = f"[{i}]"
        if rule.name in names:
            errors.append((f"{at}.name", f"{rule.name!r} is the name of rule "
                                         f"[{names[rule.name]}] too; names must be unique"))
        names.setdefault(rule.name, i)
        match = rule.match
        if match.exit_codes is None and match.reasons is None:
            errors.append((f"{at}.match", "an empty match matches nothing: give exitCodes or "
                                          "reasons (every failure: exitCodes {operator: "
                                          "NotIn, values: [0]})"))
        if match.exit_codes is not None and match.exit_codes.operator == "In" and \
                0 in match.exit_codes.values:
            errors.append((f"{at}.match.exitCodes.values", "0 is a success, never a failure"))
        for j, rtype in enumerate(match.replica_types or ()):
            if rtype not in replica_types:
                errors.append((f"{at}.match.replicaTypes[{j}]", f"{kind} has no replica type "
                                                                f"{rtype!r} in replicaSpecs "
                                                                f"({', '.join(replica_types)})"))
        if restart_together and rule.action not in _TOGETHER_ACTIONS:
            errors.append((f"{at}.action", f"{kind}'s replicas restart together: "
                                           f"{rule.action.value} is not possible (RestartJob, "
                                           "FailJob or Ignore)"))
        if rule.action is FailureAction.RESTART_IN_PLACE:
            errors += _in_place_errors(at, rule, replica_types, in_place_types)
        if rule.when_spent is not None and rule.budget is None:
            errors.append((f"{at}.whenSpent", "only a rule with a budget is ever spent"))
    for i, rule in enumerate(rules):
        if rule.when_spent is not None and rule.when_spent not in names:
            errors.append((f"[{i}].whenSpent", f"no rule named {rule.when_spent!r}"))
    errors.extend(_cycles(rules))
    return errors


def _in_place_errors(at: str, rule: FailureRule, replica_types: Sequence[str],
                     in_place_types: Sequence[str]) -> list[tuple[str, str]]:
    """RestartInPlace is the kubelet's: only for replica types it restarts in place, and only
    for what it restarts (a process that exited)."""
    errors = []
    types = rule.match.replica_types or list(replica_types)
    never = [t for t in types if t in replica_types and t not in in_place_types]
    if never:
        errors.append((f"{at}.action", f"RestartInPlace needs restartPolicy OnFailure or "
                                       f"Always on {', '.join(never)} (only the kubelet "
                                       f"restarts a process in place); add match.replicaTypes "
                                       f"or change their restartPolicy"))
    other = sorted(r.value for r in rule.match.reasons or () if r not in IN_PLACE_REASONS)
    if other:
        errors.append((f"{at}.match.reasons", f"RestartInPlace: {', '.join(other)} is never "
                                              "restarted in place (only Error, OOMKilled)"))
    return errors


def _cycles(rules: Sequence[FailureRule]) -> list[tuple[str, str]]:
    """A rule whose escalation leads back to itself would never end: refused, once per cycle."""
    by_name = {r.name: r for r in rules}
    index = {r.name: i for i, r in reversed(list(enumerate(rules)))}
    reported: set[frozenset[str]] = set()
    errors = []
    for rule in rules:
        chain, current = [rule.name], by_name.get(rule.when_spent or "")
        while current is not None and current.name not in chain:
            chain.append(current.name)
            current = by_name.get(current.when_spent or "")
        if current is not None and current.name == rule.name:
            cycle = frozenset(chain)
            if cycle not in reported:
                reported.add(cycle)
                errors.append((f"[{index[rule.name]}].whenSpent", "escalation goes round in a "
                               f"cycle: {' -> '.join([*chain, rule.name])}"))
    return errors
