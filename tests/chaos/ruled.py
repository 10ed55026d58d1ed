"""Jobs with failure rules in the SIGKILL storm (issue 39): KWOK fails their Worker a known
number of times, so every count the operator keeps about them is known in advance and must
come out exact however often the operator was killed meanwhile: each failure decided once
(status.failures, status.failureRuleUses), counted once (replicaStatuses restarts), and acted
on once (the pods created, as a pod watch saw them).

Two shapes, both MxJobs whose Worker exits the same way every run (restartPolicy Never):

escalate
    exit 137 every time; rule `retry` (Worker, 137: RecreatePod, budget 2, whenSpent
    `restart`), rule `restart` (any failure: RestartJob, budget 1). The Worker runs 4 times:
    recreated twice by `retry`, then `restart` recreates every pod, then both budgets are
    spent: Failed (FailurePolicy). Worker created 4 times, Scheduler and Server twice.
ignore
    exit 3 every time; rule `ignore` (3: Ignore, budget 2) and backoffLimit 0, so a
    failure counted against it would fail the job at once (BackoffLimitExceeded): the Worker
    runs 3 times, never counted, then the rule is spent: Failed (FailurePolicy).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.integration.operator_helpers import job, replica

NOT_ZERO = {"operator": "NotIn", "values": [0]}


@dataclass(frozen=True)
class Expected:
    """What KWOK's exits must lead to for one shape."""

    exit_code: int
    # (rule, action, budgetLeft, escalatedFrom) of each status.failures record, in order
    records: tuple[tuple[str, str, int | None, tuple[str, ...]], ...]
    uses: Mapping[str, int]  # status.failureRuleUses: rule -> times
    restarts: int  # the Worker's replicaStatuses restarts
    creates: Mapping[str, int]  # replica type (lower case) -> pods created
    message: str  # in the Failed condition's message

    @property
    def failures(self) -> int:
        """The Worker's runs that fail (every run: each is one record)."""
        return len(self.records)


SHAPES: dict[str, Expected] = {
    "escalate": Expected(
        exit_code=137,
        records=(("retry", "RecreatePod", 1, ()), ("retry", "RecreatePod", 0, ()),
                 ("restart", "RestartJob", 0, ("retry",)), ("restart", "FailJob", 0, ("retry",))),
        uses={"retry": 2, "restart": 1}, restarts=3,
        creates={"worker": 4, "scheduler": 2, "server": 2},
        message="failurePolicy rule restart: its budget (1) is spent"),
    "ignore": Expected(
        exit_code=3,
        records=(("ignore", "Ignore", 1, ()), ("ignore", "Ignore", 0, ()),
                 ("ignore", "FailJob", 0, ())),
        uses={"ignore": 2}, restarts=0,
        creates={"worker": 3, "scheduler": 1, "server": 1},
        message="failurePolicy rule ignore: its budget (2) is spent"),
}


def allowed_creates(shapes: Mapping[str, str]) -> dict[str, int]:
    """Pod name -> the creates the rules of its job ask for (job name -> shape): beyond
    them a create is a duplicate. (A RestartJob deletes running pods and creates them again,
    which the audit log alone cannot tell from a duplicate.)"""
    return {f"{name}-{rtype}-0": count for name, shape in shapes.items()
            for rtype, count in SHAPES[shape].creates.items()}


def ruled_job(name: str, shape: str) -> dict[str, Any]:
    """An MxJob of `shape` (see the module's docstring)."""
    expected = SHAPES[shape]
    if shape == "escalate":
        rules = [
            {"name": "retry", "match": {"replicaTypes": ["Worker"], "exitCodes": {
                "operator": "In", "values": [137]}}, "action": "RecreatePod",
             "budget": {"count": 2}, "whenSpent": "restart"},
            {"name": "restart", "match": {"exitCodes": NOT_ZERO}, "action": "RestartJob",
             "budget": {"count": 1}}]
        backoff = 10
    else:
        rules = [{"name": "ignore", "match": {"exitCodes": {"operator": "In", "values": [3]}},
                  "action": "Ignore", "budget": {"count": 2}}]
        backoff = 0
    return job("MxJob", name, {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", 1, exit_code=expected.exit_code, run="1s"),
    }, runPolicy={"backoffLimit": backoff, "failurePolicy": rules})


def check_ruled(name: str, shape: str, status: Mapping[str, Any],
                creates: Mapping[str, int], failed_runs: int) -> list[str]:
    """What differs between job `name`'s end and what its shape's exits must lead to:
    `status` its last status, `creates` its pods created per pod name (pod watch),
    `failed_runs` the Worker pods KWOK ended Failed (pod watch). Empty when all match."""
    expected = SHAPES[shape]
    wrong = []
    failed = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"
                   and c.get("status") == "True"), None)
    if failed is None or failed.get("reason") != "FailurePolicy" or \
            expected.message not in str(failed.get("message")):
        wrong.append(f"ended {failed} (expected FailurePolicy: {expected.message})")
    if failed_runs != expected.failures:
        wrong.append(f"KWOK failed its Worker {failed_runs} times, expected "
                     f"{expected.failures}")
    records = [(r.get("rule"), r.get("action"), r.get("budgetLeft"),
                tuple(r.get("escalatedFrom") or ()), r.get("exitCode"))
               for r in status.get("failures") or ()]
    want = [(*r, expected.exit_code) for r in expected.records]
    if records != want:
        wrong.append(f"failures {records}, expected {want}")
    if len({r.get("podUid") for r in status.get("failures") or ()}) != len(records):
        wrong.append("a pod decided twice")
    uses = {k: len(v) for k, v in (status.get("failureRuleUses") or {}).items()}
    if uses != dict(expected.uses):
        wrong.append(f"failureRuleUses {uses}, expected {dict(expected.uses)}")
    restarts = ((status.get("replicaStatuses") or {}).get("Worker") or {}).get("restarts")
    if restarts != expected.restarts:
        wrong.append(f"Worker restarts {restarts}, expected {expected.restarts}")
    made = Counter({rtype: creates.get(f"{name}-{rtype}-0", 0) for rtype in expected.creates})
    if made != Counter(expected.creates):
        wrong.append(f"pods created {dict(made)}, expected {dict(expected.creates)}")
    return [f"MxJob {name} ({shape}): {w}" for w in wrong]
