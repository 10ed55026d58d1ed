"""Failure rules, pure (core/failure_rules.py): what a failure is called, which rule matches,
budgets within windows, escalation, and the checks that refuse a policy that cannot mean
anything."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from trainjobs.api.failure_policy import FailureAction, FailureReason, FailureRule
from trainjobs.core.failure_rules import Failure, classify, decide, policy_errors
from trainjobs.core.observed import ObservedPod, PodPhase

T0 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
RULES = TypeAdapter(list[FailureRule])


def rules(*docs: dict[str, Any]) -> list[FailureRule]:
    return RULES.validate_python(list(docs))


def pod(**fields: Any) -> ObservedPod:
    base = ObservedPod(name="mx-worker-1", uid="u1", replica_type_lower="worker", index=1,
                       phase=PodPhase.FAILED, exit_code=1)
    return replace(base, **fields)


def failure(reason: FailureReason = FailureReason.ERROR, code: int | None = 1,
            rtype: str = "Worker") -> Failure:
    return Failure("mx-worker-1", "u1", rtype, reason, code)


@pytest.mark.parametrize(("fields", "reason"), [
    ({"exit_code": 1, "reason": "Error"}, FailureReason.ERROR),
    ({"exit_code": 137, "reason": "OOMKilled"}, FailureReason.OOM_KILLED),
    ({"reason": "DeadlineExceeded"}, FailureReason.DEADLINE_EXCEEDED),
    ({"disrupted": True, "disruption": "PreemptionByScheduler: Preempted in order to admit "
                                       "critical pod"}, FailureReason.PREEMPTED),
    ({"disrupted": True, "disruption": "EvictionByEvictionAPI: Eviction API"},
     FailureReason.EVICTED),
    ({"disrupted": True, "reason": "Evicted", "disruption": "Evicted: The node was low on "
                                                            "resource: memory."},
     FailureReason.EVICTED),
    ({"disrupted": True, "disruption": "DeletionByPodGC: PodGC: node no longer exists"},
     FailureReason.NODE_LOST),
])
def test_a_failed_pod_is_called_what_the_platform_said(fields: dict[str, Any],
                                                      reason: FailureReason) -> None:
    assert classify(pod(**fields)) is reason


def test_the_first_matching_rule_decides_and_every_given_field_must_match() -> None:
    policy = rules(
        {"name": "ps-fatal", "match": {"replicaTypes": ["PS"], "exitCodes": {"values": [1]}},
         "action": "FailJob"},
        {"name": "oom", "match": {"reasons": ["OOMKilled"]}, "action": "RestartJob"},
        {"name": "crash", "match": {"exitCodes": {"operator": "NotIn", "values": [0]}},
         "action": "RecreatePod"},
    )
    assert decide(policy, failure(rtype="PS"), {}, T0).rule == "ps-fatal"  # type: ignore[union-attr]
    assert decide(policy, failure(), {}, T0).rule == "crash"  # type: ignore[union-attr]
    oom = decide(policy, failure(FailureReason.OOM_KILLED, 137), {}, T0)
    assert oom is not None and (oom.rule, oom.action) == ("oom", FailureAction.RESTART_JOB)
    # A failure without an exit code never matches exitCodes, even NotIn.
    assert decide(policy, failure(FailureReason.PREEMPTED, None), {}, T0) is None


def test_a_budget_counts_within_its_window_then_escalates_by_name() -> None:
    policy = rules(
        {"name": "oom", "match": {"reasons": ["OOMKilled"]}, "action": "RecreatePod",
         "budget": {"count": 2, "windowSeconds": 600}, "whenSpent": "all"},
        {"name": "all", "match": {"reasons": ["Stalled"]}, "action": "RestartJob",
         "budget": {"count": 1}},
    )
    oom = failure(FailureReason.OOM_KILLED, 137)
    uses: dict[str, tuple[datetime, ...]] = {}
    actions = []
    for minute in (0, 1, 2, 3, 20):
        d = decide(policy, oom, uses, T0 + timedelta(minutes=minute))
        assert d is not None
        actions.append((d.rule, d.action.value, d.budget_left, d.escalated_from))
        uses = dict(d.uses)
    assert actions == [
        ("oom", "RecreatePod", 1, ()),
        ("oom", "RecreatePod", 0, ()),
        ("all", "RestartJob", 0, ("oom",)),  # oom spent: the named rule acts
        ("all", "FailJob", 0, ("oom",)),  # both spent, nothing named after "all": fail
        ("oom", "RecreatePod", 1, ()),  # 20 minutes on: the first two left the window
    ]
    assert len(uses["oom"]) <= 2  # the status keeps at most a budget's worth


def test_a_zero_budget_is_spent_at_once_and_without_a_next_rule_fails() -> None:
    policy = rules({"name": "never", "match": {"reasons": ["Preempted"]}, "action": "Ignore",
                    "budget": {"count": 0}})
    d = decide(policy, failure(FailureReason.PREEMPTED, None), {}, T0)
    assert d is not None and d.action is FailureAction.FAIL_JOB and d.spent


def test_the_models_refuse_what_the_schema_can() -> None:
    for bad in ({"name": "x", "match": {"reasons": ["Sunspots"]}, "action": "Ignore"},
                {"name": "x", "match": {"reasons": ["Error"]}, "action": "Reboot"},
                {"name": "x", "match": {"reasons": ["Error"]}, "action": "Ignore",
                 "budget": {"count": -1}},
                {"name": "Bad_Name", "match": {"reasons": ["Error"]}, "action": "Ignore"},
                {"name": "x", "match": {"exitCodes": {"values": [256]}}, "action": "Ignore"}):
        with pytest.raises(ValidationError):
            rules(bad)


def test_policy_errors_name_the_field() -> None:
    policy = rules(
        {"name": "a", "match": {}, "action": "RecreatePod"},
        {"name": "a", "match": {"exitCodes": {"values": [0]}}, "action": "Ignore"},
        {"name": "b", "match": {"replicaTypes": ["Chief"], "reasons": ["Error"]},
         "action": "Ignore", "whenSpent": "a"},
        {"name": "c", "match": {"reasons": ["Error"]}, "action": "Ignore",
         "budget": {"count": 1}, "whenSpent": "d"},
        {"name": "d", "match": {"reasons": ["Error"]}, "action": "Ignore",
         "budget": {"count": 1}, "whenSpent": "c"},
        {"name": "e", "match": {"reasons": ["Error"]}, "action": "Ignore",
         "budget": {"count": 1}, "whenSpent": "nowhere"},
    )
    errors = dict(policy_errors(policy, ["Scheduler", "Server", "Worker"], False, "MxJob"))
    assert "empty match" in errors["[0].match"]
    assert "unique" in errors["[1].name"]
    assert "0 is a success" in errors["[1].match.exitCodes.values"]
    assert "no replica type 'Chief'" in errors["[2].match.replicaTypes[0]"]
    assert "only a rule with a budget" in errors["[2].whenSpent"]
    assert "cycle: c -> d -> c" in errors["[3].whenSpent"]
    assert "no rule named 'nowhere'" in errors["[5].whenSpent"]


def test_a_kind_whose_replicas_restart_together_cannot_recreate_one_pod() -> None:
    policy = rules({"name": "a", "match": {"reasons": ["Error"]}, "action": "RecreatePod"},
                   {"name": "b", "match": {"reasons": ["OOMKilled"]}, "action": "RestartJob"})
    errors = policy_errors(policy, ["Worker"], True, "Caffe2Job")
    assert errors == [("[0].action", "Caffe2Job's replicas restart together: RecreatePod is "
                                     "not possible (RestartJob, FailJob or Ignore)")]
