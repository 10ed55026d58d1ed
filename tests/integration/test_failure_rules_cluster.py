"""Failure rules (`runPolicy.failurePolicy`, issue 39) on the real control plane: KWOK's exit
codes and kube-scheduler's preemption meet the rules as the operator sees them.

- A Worker exiting 137 twice: its rule recreates the pod (budget 1), then, spent, escalates
  to the rule `all` (RestartJob): every pod created again; each decision in status.failures,
  status.failureRuleUses and a FailureRule Event; then the job succeeds.
- A TfJob's PS exiting 1 under a FailJob rule: Failed, reason FailurePolicy, naming the rule.
- A low-priority pod preempted by kube-scheduler for a high-priority pod: with a rule
  {reasons [Preempted], FailJob} the job fails naming the rule; without one the preempted
  replica is recreated and not counted as a failure (status.failures: rule `disruption`).
- Admission: what CEL can refuse is refused by the API server naming the field; an escalation
  cycle (not expressible in CEL) is accepted and failed by the operator, InvalidSpec.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.operator_helpers import (
    IMAGE,
    Namespace,
    condition,
    job,
    replica,
    wait_for,
    watch_objects,
)
from trainjobs.core.failure_rules import classify
from trainjobs.core.observed import from_pod
from trainjobs.testing import ClusterOptions, ControlPlane

pytestmark = pytest.mark.integration
TIMEOUT = 60
NOT_ZERO = {"operator": "NotIn", "values": [0]}


def _uids(ns: Namespace, name: str) -> dict[str, str]:
    """Pod name -> uid of the job's pods that run and are not being deleted."""
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in ns.pods(name)
            if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")}


def _all_new(ns: Namespace, name: str, before: dict[str, str],
             same: tuple[str, ...] = ()) -> dict[str, str]:
    """Wait until every pod of `before` runs again under a new uid, except those of `same`,
    which must keep theirs; returns the new uids."""
    def check() -> dict[str, str] | None:
        now = _uids(ns, name)
        if set(now) != set(before):
            return None
        for pod, uid in now.items():
            if (uid == before[pod]) != (pod in same):
                return None
        return now
    return wait_for(check, lambda: f"pods of {name} recreated but {same}: before {before}, "
                    f"now {_uids(ns, name)}", TIMEOUT)


def _failures(ns: Namespace, kind: str, name: str, count: int) -> list[dict[str, Any]]:
    """The job's status.failures once it holds `count` records."""
    def check() -> list[dict[str, Any]] | None:
        records: list[dict[str, Any]] = ns.status(kind, name).get("failures") or []
        return records if len(records) >= count else None
    return wait_for(check, lambda: f"{count} failure records of {name}: "
                    f"{ns.status(kind, name).get('failures')}", TIMEOUT)


def _rule_events(ns: Namespace, name: str, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        found = [e for e in ns.events(name) if e["reason"] == "FailureRule"]
        found.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
        return found if len(found) >= count else None
    return wait_for(check, lambda: f"{count} FailureRule events of {name}: "
                    f"{ns.event_reasons(name)}", 20)


def _brief(record: dict[str, Any]) -> tuple[Any, ...]:
    return (record["replica"], record.get("exitCode"), record["reason"], record["rule"],
            record["action"], record.get("budgetLeft"), record.get("escalatedFrom"))


def test_recreate_with_a_budget_escalates_to_restart_job(ns: Namespace) -> None:
    ns.apply(job("MxJob", "esc", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob")},
        runPolicy={"backoffLimit": 5, "failurePolicy": [
            {"name": "oom", "match": {"replicaTypes": ["Worker"],
                                      "exitCodes": {"operator": "In", "values": [137]}},
             "action": "RecreatePod", "budget": {"count": 1}, "whenSpent": "all"},
            {"name": "all", "match": {"exitCodes": NOT_ZERO}, "action": "RestartJob",
             "budget": {"count": 1}}]}))
    ns.wait_state("MxJob", "esc", "Running")
    first = wait_for(lambda: u if len(u := _uids(ns, "esc")) == 3 else None,
                     lambda: f"3 running pods: {ns.pod_summary('esc')}", TIMEOUT)
    worker = "esc-worker-0"

    # First 137: rule oom recreates the Worker alone (its budget of 1 now used).
    ns.end_pod(worker, 137)
    second = _all_new(ns, "esc", first, same=("esc-scheduler-0", "esc-server-0"))
    (one,) = _failures(ns, "MxJob", "esc", 1)
    assert _brief(one) == (worker, 137, "Error", "oom", "RecreatePod", 0, None), one
    assert one["podUid"] == first[worker] and one["replicaType"] == "Worker", one

    # Second 137: oom is spent; it escalates to `all`: RestartJob, every pod created again.
    ns.end_pod(worker, 137)
    third = _all_new(ns, "esc", second)
    records = _failures(ns, "MxJob", "esc", 2)
    assert [_brief(r) for r in records] == [
        (worker, 137, "Error", "oom", "RecreatePod", 0, None),
        (worker, 137, "Error", "all", "RestartJob", 0, ["oom"])], records
    assert records[1]["podUid"] == second[worker], records
    status = ns.status("MxJob", "esc")
    uses = status["failureRuleUses"]
    assert sorted(uses) == ["all", "oom"] and len(uses["all"]) == len(uses["oom"]) == 1, uses
    events = _rule_events(ns, "esc", 2)
    assert [e["type"] for e in events] == ["Normal", "Normal"], events
    assert "rule oom: RecreatePod (0 left)" in events[0]["message"], events[0]
    assert "rule oom's budget is spent; rule all: RestartJob (0 left)" in \
        events[1]["message"], events[1]
    assert all("exit code 137" in e["message"] for e in events), events

    ns.end_pod(worker, 0)
    status = ns.wait_finished("MxJob", "esc", timeout=TIMEOUT)
    assert status["state"] == "Succeeded", status
    assert status["replicaStatuses"]["Worker"]["restarts"] == 2, status["replicaStatuses"]
    assert len(status["failures"]) == 2, status["failures"]  # nothing decided twice
    assert ns.scheduled()[worker] == 3, ns.scheduled()
    assert ns.scheduled()["esc-scheduler-0"] == 2 and third != second


def test_a_fail_job_rule_fails_the_job_naming_the_rule(ns: Namespace) -> None:
    ns.apply(job("TfJob", "ps", {
        "Chief": replica("TfJob"), "Worker": replica("TfJob"),
        "PS": replica("TfJob", exit_code=1, run="1s")},
        runPolicy={"backoffLimit": 3, "failurePolicy": [
            {"name": "ps-lost", "match": {"replicaTypes": ["PS"],
                                          "exitCodes": {"operator": "In", "values": [1]}},
             "action": "FailJob"}]}))
    status = ns.wait_finished("TfJob", "ps", timeout=TIMEOUT)
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "FailurePolicy", status
    assert "failurePolicy rule ps-lost: FailJob" in failed["message"], failed
    assert "replica PS 0 (pod ps-ps-0) failed with exit code 1" in failed["message"], failed
    (record,) = status["failures"]
    assert _brief(record) == ("ps-ps-0", 1, "Error", "ps-lost", "FailJob", None, None), record
    (event,) = _rule_events(ns, "ps", 1)
    assert event["type"] == "Warning" and "rule ps-lost: FailJob" in event["message"], event
    assert ns.scheduled()["ps-ps-0"] == 1  # not recreated


# -- the scheduler's preemption --------------------------------------------------------------

CPU = "2"


@dataclass(frozen=True)
class Pool:
    """One node of 4 CPU for one test (tainted: no other test's pod lands there)."""

    key: str
    high: str
    low: str

    @property
    def placement(self) -> dict[str, Any]:
        return {"nodeSelector": {self.key: "yes"},
                "tolerations": [{"key": self.key, "operator": "Exists",
                                 "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 0}


@pytest.fixture
def pool(kube_cluster: ControlPlane) -> Iterator[Pool]:
    tag = uuid.uuid4().hex[:6]
    key = f"trainjobs.io/pool-{tag}"
    nodes = kube_cluster.add_nodes(ClusterOptions(
        nodes=1, node_cpu="4", node_memory="16Gi", node_prefix=f"rules-{tag}",
        node_labels={key: "yes"},
        node_taints=({"key": key, "value": "yes", "effect": "NoSchedule"},)))
    classes = {"high": (f"high-{tag}", 1000), "low": (f"low-{tag}", 100)}
    for name, value in classes.values():
        kube_cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}))
    try:
        yield Pool(key, classes["high"][0], classes["low"][0])
    finally:
        kube_cluster.kubectl("delete", "priorityclass", *(n for n, _ in classes.values()),
                             "--wait=false", check=False)
        kube_cluster.kubectl("delete", "node", *nodes, "--wait=false", check=False)


def _low(pool: Pool) -> dict[str, Any]:
    spec = replica("TfJob")
    pod = spec["template"]["spec"]
    pod.update(pool.placement, priorityClassName=pool.low)
    pod["containers"][0]["resources"] = {"requests": {"cpu": CPU}, "limits": {"cpu": CPU}}
    return spec


def _preemptor(ns: Namespace, pool: Pool) -> None:
    ns.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "urgent"},
        "spec": {**pool.placement, "priorityClassName": pool.high, "containers": [{
            "name": "main", "image": IMAGE,
            "resources": {"requests": {"cpu": CPU}, "limits": {"cpu": CPU}}}]}}))


@pytest.mark.parametrize("ruled", [True, False], ids=["rule", "no-rule"])
def test_the_schedulers_preemption(ns: Namespace, pool: Pool, ruled: bool) -> None:
    """A TfJob of 2 low-priority pods fills the node; a high-priority pod makes kube-scheduler
    preempt one (DisruptionTarget PreemptionByScheduler, then deleted)."""
    rules = [{"name": "no-preemption", "match": {"reasons": ["Preempted"]},
              "action": "FailJob"}] if ruled else None
    name = "pre"
    ns.apply(job("TfJob", name, {"Chief": _low(pool), "Worker": _low(pool)},
                 runPolicy={"backoffLimit": 0, **({"failurePolicy": rules} if rules else {})}))
    ns.wait_state("TfJob", name, "Running", timeout=TIMEOUT)
    before = wait_for(lambda: u if len(u := _uids(ns, name)) == 2 else None,
                      lambda: f"2 running pods: {ns.pod_summary(name)}", TIMEOUT)
    query = {"labelSelector": f"trainjobs.io/job-name={name}"}
    with watch_objects(ns, f"/api/v1/namespaces/{ns.name}/pods", query) as versions:
        _preemptor(ns, pool)
        wait_for(lambda: any(p["metadata"]["uid"] not in before.values() or
                             p["metadata"].get("deletionTimestamp") for p in ns.pods(name))
                 or len(ns.pods(name)) < 2, "a pod of the job preempted", TIMEOUT)
    # What the victim looks like as the operator sees it: KWOK marks nothing, kube-scheduler
    # sets the DisruptionTarget condition before it deletes the pod.
    marked = [v for v in versions if any(
        c["type"] == "DisruptionTarget" and c.get("status") == "True"
        for c in v["status"].get("conditions") or [])]
    assert marked, [(v["metadata"]["name"], v["status"]) for v in versions]
    victim = marked[-1]
    reasons = {c["reason"] for c in victim["status"]["conditions"]
               if c["type"] == "DisruptionTarget"}
    assert reasons == {"PreemptionByScheduler"}, victim["status"]
    seen = from_pod(victim, "tensorflow")
    assert seen is not None and seen.disrupted, seen
    assert classify(seen).value == "Preempted", seen
    victim_name = victim["metadata"]["name"]
    replica_type = "Chief" if "-chief-" in victim_name else "Worker"

    if ruled:
        status = ns.wait_finished("TfJob", name, timeout=TIMEOUT)
        failed = condition(status, "Failed")
        assert failed is not None and failed["reason"] == "FailurePolicy", status
        assert "failurePolicy rule no-preemption: FailJob" in failed["message"], failed
        record = status["failures"][-1]
        assert (record["replica"], record["reason"], record["rule"], record["action"]) == \
            (victim_name, "Preempted", "no-preemption", "FailJob"), record
        (event,) = _rule_events(ns, name, 1)
        assert event["type"] == "Warning" and "(Preempted)" in event["message"], event
    else:
        def counted() -> dict[str, Any] | None:
            status = ns.status("TfJob", name)
            lost = status["replicaStatuses"][replica_type].get("lost", 0)
            return status if lost >= 1 and status.get("failures") else None
        status = wait_for(counted, lambda: f"the preemption counted: "
                          f"{ns.status('TfJob', name)}", TIMEOUT)
        assert status["state"] != "Failed", status  # backoffLimit 0: not counted as a failure
        rstatus = status["replicaStatuses"][replica_type]
        assert rstatus["restarts"] == 0 and rstatus["lastLostReason"] == \
            "PreemptionByScheduler", rstatus
        (record,) = status["failures"]
        assert (record["replica"], record["reason"], record["rule"], record["action"]) == \
            (victim_name, "Preempted", "disruption", "Ignore"), record
        # Recreated (Pending: the high-priority pod holds its room).
        wait_for(lambda: (p := ns.pod(victim_name)) is not None and
                 p["metadata"]["uid"] != before[victim_name], "the victim recreated", TIMEOUT)


# -- admission -------------------------------------------------------------------------------


def _refused(ns: Namespace, manifest: dict[str, Any]) -> str:
    result = ns.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, f"accepted: {manifest['spec']}"
    return result.stderr


def _ruled(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return job("MxJob", "bad", {"Scheduler": replica("MxJob"), "Server": replica("MxJob"),
                                "Worker": replica("MxJob")}, runPolicy={"failurePolicy": rules})


def _rule(**fields: Any) -> dict[str, Any]:
    return {"name": "r", "match": {"exitCodes": NOT_ZERO}, "action": "RecreatePod", **fields}


ADMISSION = {
    "empty-match": (_ruled([_rule(match={})]),
                    "spec.runPolicy.failurePolicy[0].match", "an empty match matches nothing"),
    "unknown-reason": (_ruled([_rule(match={"reasons": ["Sneezed"]})]),
                       "spec.runPolicy.failurePolicy[0].match.reasons[0]", "Sneezed"),
    "negative-budget": (_ruled([_rule(budget={"count": -1})]),
                        "spec.runPolicy.failurePolicy[0].budget.count",
                        "should be greater than or equal to 0"),
    "when-spent-nowhere": (_ruled([_rule(budget={"count": 1}, whenSpent="nope")]),
                           "spec.runPolicy.failurePolicy",
                           "whenSpent must name a rule of the failurePolicy"),
    "duplicate-names": (_ruled([_rule(), _rule(action="Ignore")]),
                        "spec.runPolicy.failurePolicy",
                        "failurePolicy rule names must be unique"),
    "unknown-replica-type": (_ruled([_rule(match={"replicaTypes": ["PS"],
                                                           "exitCodes": NOT_ZERO})]),
                             "spec", "match.replicaTypes must name replica types of "
                             "replicaSpecs"),
    "caffe2-recreate-pod": (job("Caffe2Job", "bad", {"Worker": replica("Caffe2Job", 2)},
                                backend={"type": "nfs", "nfsPath": "/shared"},
                                runPolicy={"failurePolicy": [_rule()]}),
                            "spec.runPolicy.failurePolicy[0]",
                            "Caffe2Job's replicas restart together"),
}


def test_admission_refuses_what_cel_can_say_and_the_operator_refuses_a_cycle(
    ns: Namespace,
) -> None:
    for case, (manifest, field, words) in ADMISSION.items():
        err = _refused(ns, manifest)
        assert field in err and words in err, f"{case}: {err}"
        assert ns.job(manifest["kind"], "bad") is None, case

    # A cycle of escalation: CEL cannot follow it; the operator refuses the job.
    ns.apply(job("MxJob", "cycle", {"Scheduler": replica("MxJob"), "Server": replica("MxJob"),
                                    "Worker": replica("MxJob")}, runPolicy={"failurePolicy": [
        {"name": "a", "match": {"exitCodes": NOT_ZERO}, "action": "RecreatePod",
         "budget": {"count": 1}, "whenSpent": "b"},
        {"name": "b", "match": {"reasons": ["OOMKilled"]}, "action": "RestartJob",
         "budget": {"count": 1}, "whenSpent": "a"}]}))
    status = ns.wait_finished("MxJob", "cycle", timeout=TIMEOUT)
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec", status
    assert "escalation goes round in a cycle: a -> b -> a" in failed["message"], failed
    assert "failurePolicy[0].whenSpent" in failed["message"], failed
    assert ns.pods("cycle") == []
