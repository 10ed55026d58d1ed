"""The failures section of `trainjobs status` (issue 39): one line per recorded decision (a
rule's, the default rules', a disruption's; escalations), each budgeted rule's uses counted
within its window, nothing for a job that never failed; and the section in the command's
output."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.helpers import PLUGINS
from trainjobs.api.models import Job
from trainjobs.client import commands
from trainjobs.client.aio import job_from_api
from trainjobs.client.failure_text import failure_lines

NOW = datetime(2026, 11, 28, 12, 10, 0, tzinfo=UTC)

RULES = [
    {"name": "oom", "match": {"reasons": ["OOMKilled"]}, "action": "RecreatePod",
     "budget": {"count": 3, "windowSeconds": 3600}, "whenSpent": "restart"},
    {"name": "retry", "match": {"exitCodes": {"values": [1]}}, "action": "Ignore",
     "budget": {"count": 1}, "whenSpent": "restart"},
    {"name": "restart", "match": {"exitCodes": {"operator": "NotIn", "values": [0]}},
     "action": "RestartJob", "budget": {"count": 2}},
    {"name": "fatal", "match": {"exitCodes": {"values": [2]}}, "action": "FailJob"},
]


def record(time: str, replica: str, reason: str, rule: str, action: str,
           **more: Any) -> dict[str, Any]:
    return {"time": f"2026-11-28T{time}Z", "replica": replica, "podUID": f"uid-{replica}",
            "replicaType": "Worker", "reason": reason, "rule": rule, "action": action, **more}


def job(status: dict[str, Any] | None = None, rules: list[dict[str, Any]] | None = None
        ) -> Job:
    tmpl = {"spec": {"containers": [{"name": "mxnet", "image": "mx:1"}]}}
    policy = {"failurePolicy": rules} if rules else {}
    return job_from_api({
        "apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob",
        "metadata": {"name": "mx", "namespace": "ml", "uid": "uid-mx", "resourceVersion": "3",
                     "creationTimestamp": "2026-11-28T10:00:00Z"},
        "spec": {"runPolicy": policy, "replicaSpecs": {
            "Scheduler": {"replicas": 1, "template": tmpl},
            "Server": {"replicas": 1, "template": tmpl},
            "Worker": {"replicas": 2, "template": tmpl}}},
        "status": {"state": "Running", **(status or {})}}, PLUGINS)


def test_nothing_for_a_job_that_never_failed() -> None:
    assert failure_lines(job(), NOW) == []
    assert failure_lines(job(rules=RULES), NOW) == []  # rules, but no failure yet


def test_one_line_per_decision_then_each_budget() -> None:
    status = {
        "failures": [
            record("12:03:04", "mx-worker-1", "OOMKilled", "oom", "RecreatePod",
                   exitCode=137, budgetLeft=2),
            record("12:05:00", "mx-worker-0", "Error", "retry", "Ignore", exitCode=1,
                   budgetLeft=0),
            record("12:06:30", "mx-worker-0", "Error", "restart", "RestartJob", exitCode=1,
                   budgetLeft=1, escalatedFrom=["retry"]),
            record("12:07:00", "mx-server-0", "Preempted", "disruption", "Ignore"),
        ],
        "failureRuleUses": {"oom": ["2026-11-28T12:03:04Z"],
                            "retry": ["2026-11-28T12:05:00Z"],
                            "restart": ["2026-11-28T12:06:30Z"]},
    }
    assert failure_lines(job(status, RULES), NOW) == [
        "12:03:04 mx-worker-1 exit 137 (OOMKilled): rule oom -> RecreatePod, 2 left",
        "12:05:00 mx-worker-0 exit 1 (Error): rule retry -> Ignore, 0 left",
        "12:06:30 mx-worker-0 exit 1 (Error): rule restart -> RestartJob, 1 left, "
        "escalated from retry",
        "12:07:00 mx-server-0 (Preempted): disruption -> recreated, not counted",
        "oom: 1 of 3 in 3600s used",
        "retry: 1 of 1 used, spent: then rule restart",
        "restart: 1 of 2 used",
    ]  # fatal has no budget: no line


def test_the_default_rules_and_a_spent_rule_that_fails_the_job() -> None:
    status = {"failures": [
        record("12:01:00", "mx-worker-1", "Error", "restartPolicy/ExitCode", "RecreatePod",
               exitCode=137, budgetLeft=5),
        record("12:02:00", "mx-worker-1", "Error", "restartPolicy/ExitCode", "FailJob",
               exitCode=3),
    ]}
    assert failure_lines(job(status), NOW) == [
        "12:01:00 mx-worker-1 exit 137 (Error): restartPolicy/ExitCode -> RecreatePod, 5 left",
        "12:02:00 mx-worker-1 exit 3 (Error): restartPolicy/ExitCode -> FailJob"]
    spent = job({"failures": [record("12:02:00", "mx-worker-0", "Error", "restart", "FailJob",
                                     exitCode=1, budgetLeft=0,
                                     escalatedFrom=["retry"])],
                 "failureRuleUses": {"restart": ["2026-11-28T11:00:00Z",
                                                 "2026-11-28T11:30:00Z"]}}, RULES)
    assert failure_lines(spent, NOW)[-1] == "restart: 2 of 2 used, spent: the job fails"


def test_a_restart_in_place_reads_as_any_decision() -> None:
    status = {"failures": [record("12:09:00", "mx-worker-0", "OOMKilled", "crashloop",
                                  "RestartInPlace", exitCode=137, budgetLeft=4)]}
    assert failure_lines(job(status), NOW) == [
        "12:09:00 mx-worker-0 exit 137 (OOMKilled): rule crashloop -> RestartInPlace, 4 left"]


def test_a_window_counts_only_its_recent_uses() -> None:
    uses = {"oom": ["2026-11-28T10:00:00Z", "2026-11-28T11:10:00Z",  # exactly 3600 s old
                    "2026-11-28T11:10:01Z", "2026-11-28T12:09:00Z"]}
    lines = failure_lines(job({"failureRuleUses": uses}, RULES), NOW)
    assert lines[0] == "oom: 2 of 3 in 3600s used"  # the operator's rule: t > now - window
    full = {"oom": ["2026-11-28T11:30:00Z", "2026-11-28T11:40:00Z", "2026-11-28T12:00:00Z"]}
    assert failure_lines(job({"failureRuleUses": full}, RULES), NOW)[0] == \
        "oom: 3 of 3 in 3600s used, spent: then rule restart"


def test_only_the_newest_are_shown_and_another_day_has_its_date() -> None:
    failures = [record(f"12:0{i}:00", f"mx-worker-{i % 2}", "Error", "restartPolicy/OnFailure",
                       "RecreatePod", exitCode=1, budgetLeft=9 - i) for i in range(8)]
    failures[0]["time"] = "2026-11-27T23:59:59Z"
    lines = failure_lines(job({"failures": failures}), NOW, recent=3)
    assert lines[0] == "5 earlier in status.failures"
    assert [line.split(" ", 1)[0] for line in lines[1:]] == ["12:05:00", "12:06:00", "12:07:00"]
    everything = failure_lines(job({"failures": failures}), NOW, recent=10)
    assert everything[0].startswith("11-27 23:59:59 mx-worker-0 exit 1 (Error)")
    assert len(everything) == 8


class Client:
    """What `trainjobs status` reads of `AsyncClient`."""

    namespace = "ml"

    def __init__(self, job: Job) -> None:
        self.job = job

    async def get(self, name: str, namespace: str | None = None) -> Job:
        return self.job

    async def pods(self, *args: Any) -> list[Any]:
        return []

    async def events(self, *args: Any) -> list[Any]:
        return []


async def test_status_prints_the_section(capsys: pytest.CaptureFixture[str]) -> None:
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    failed = record("00:00:00", "mx-worker-1", "OOMKilled", "oom", "RecreatePod",
                    exitCode=137, budgetLeft=2)
    failed["time"] = f"{today}T00:00:01Z"
    args = argparse.Namespace(job="mx", namespace="ml")
    with_failure = job({"failures": [failed]}, RULES)
    assert await commands.COMMANDS["status"](Client(with_failure), args) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    section = out.split("failures:\n", 1)[1].split("replicas:", 1)[0].splitlines()
    assert section == [
        "  00:00:01 mx-worker-1 exit 137 (OOMKilled): rule oom -> RecreatePod, 2 left",
        "  oom: 0 of 3 in 3600s used",  # no use recorded in failureRuleUses
        "  retry: 0 of 1 used", "  restart: 0 of 2 used"]
    assert await commands.COMMANDS["status"](Client(job(rules=RULES)), args) == 0  # type: ignore[arg-type]
    assert "failures:" not in capsys.readouterr().out
