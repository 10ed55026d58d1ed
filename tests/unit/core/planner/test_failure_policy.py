"""Failure rules in the planner (runPolicy.failurePolicy): each action on a real pass, budgets
and escalation, decisions recorded once (by pod uid) in the status; the default rules
(restartPolicy) recorded as well, their behaviour unchanged. Through planner_helpers' fake
backend."""

from __future__ import annotations

from typing import Any

from tests.unit.planner_helpers import World, c2_doc, mx_doc, running_world, tf_doc
from trainjobs.api.models import ConditionType
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.observed import PodPhase
from trainjobs.core.planner import ProgressSeen

MX_PODS = ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]


def records(w: World) -> list[tuple[str, str, str, int | None]]:
    return [(f.replica, f.rule, f.action, f.budget_left) for f in w.status.failures or ()]


def rule(name: str, action: str, **fields: Any) -> dict[str, Any]:
    match = fields.pop("match", {"exitCodes": {"operator": "NotIn", "values": [0]}})
    return {"name": name, "match": match, "action": action, **fields}


def test_without_a_policy_the_default_rules_decide_and_are_recorded() -> None:
    w = running_world(mx_doc(workers=2, restart="ExitCode", backoffLimit=3))
    w.fail("mx-worker-1", exit_code=137, reason="OOMKilled")
    decision = w.step()
    assert decision.delete_pods == ["mx-worker-1"]
    assert records(w) == [("mx-worker-1", "restartPolicy/ExitCode", "RecreatePod", 2)]
    assert w.status.failures[0].reason == "OOMKilled"  # type: ignore[index]
    w.settle()
    w.run()
    w.fail("mx-worker-0", exit_code=1)
    w.step()
    assert w.state == "Failed" and records(w)[-1] == \
        ("mx-worker-0", "restartPolicy/ExitCode", "FailJob", None)


def test_recreate_with_a_budget_then_the_job_fails_naming_the_rule() -> None:
    w = running_world(mx_doc(workers=2, failurePolicy=[
        rule("crash", "RecreatePod", budget={"count": 1})]))
    w.fail("mx-worker-1", exit_code=3)
    decision = w.step()
    assert decision.delete_pods == ["mx-worker-1"] and w.restarts()["Worker"] == 1
    assert [e.reason for e in decision.events] == ["FailureRule"]
    assert "rule crash: RecreatePod (0 left)" in decision.events[0].message
    again = w.plan()  # decided once: the next pass records nothing, uses no budget
    assert again.status.failures == w.status.failures
    assert again.status.failure_rule_uses == w.status.failure_rule_uses
    w.settle()
    w.run()
    w.step()
    w.fail("mx-worker-1", exit_code=3)
    w.step()
    failed = w.condition(ConditionType.FAILED)
    assert w.state == "Failed" and failed.reason == "FailurePolicy"
    assert "rule crash: its budget (1) is spent" in failed.message, failed.message
    assert records(w)[-1][1:3] == ("crash", "FailJob")


def test_ignore_recreates_without_counting() -> None:
    w = running_world(mx_doc(workers=2, backoffLimit=0, failurePolicy=[
        rule("flaky", "Ignore", match={"exitCodes": {"values": [42]}})]))
    w.fail("mx-worker-0", exit_code=42)
    assert w.step().delete_pods == ["mx-worker-0"]
    w.settle()
    assert w.state != "Failed" and w.restarts()["Worker"] == 0
    assert "mx-worker-0" in w.pods


def test_restart_replica_type_recreates_every_pod_of_the_type_once() -> None:
    w = running_world(mx_doc(workers=3, failurePolicy=[
        rule("workers", "RestartReplicaType", match={"replicaTypes": ["Worker"],
                                                     "reasons": ["Error"]})]), graceful=True)
    before = {n: p.uid for n, p in w.pods.items()}
    w.advance(5)
    w.fail("mx-worker-2", exit_code=1)
    w.step()
    w.step()
    deleted = {n for plan_ in w.history[-2:] for n in plan_.delete_pods}
    assert deleted == {"mx-worker-0", "mx-worker-1", "mx-worker-2"}
    assert w.restarts() == {"Scheduler": 0, "Server": 0, "Worker": 1}
    w.gc()
    w.advance(1)  # (no pod of the type is created within the second of its restart)
    w.settle()
    after = {n: p.uid for n, p in w.pods.items()}
    assert after["mx-scheduler-0"] == before["mx-scheduler-0"]
    assert all(after[n] != before[n] for n in ("mx-worker-0", "mx-worker-1", "mx-worker-2"))
    w.run()
    w.step()
    assert w.state == "Running" and w.step().delete_pods == []  # the new pods are not stale


def test_restart_job_recreates_every_replica() -> None:
    w = running_world(mx_doc(workers=2, failurePolicy=[rule("all", "RestartJob")]))
    w.advance(5)
    w.fail("mx-worker-1", exit_code=1)
    w.settle()
    assert w.restarts()["Worker"] == 1
    deletions = {n: d.reason for p in w.history for n, d in p.deletions.items()}
    assert sorted(deletions) == MX_PODS
    assert deletions["mx-server-0"] is DeleteReason.NEW_ATTEMPT


def test_a_preemption_can_fail_the_job() -> None:
    w = running_world(tf_doc(chief=1, workers=1, ps=1, failurePolicy=[
        rule("no-preemption", "FailJob", match={"reasons": ["Preempted"]})]))
    w.fail("tf-ps-0", exit_code=None, reason="", disrupted=True)
    w.set("tf-ps-0", disruption="PreemptionByScheduler: Preempted in order to admit critical "
                                "pod")
    w.step()
    assert w.state == "Failed"
    assert "rule no-preemption: FailJob" in w.condition(ConditionType.FAILED).message


def test_replicas_that_restart_together_fail_or_start_an_attempt_by_rule() -> None:
    w = running_world(c2_doc(workers=2, failurePolicy=[
        rule("fatal", "FailJob", match={"exitCodes": {"values": [2]}}),
        rule("retry", "RestartJob", match={"exitCodes": {"values": [1]}},
             budget={"count": 1})]))
    w.fail("c2-worker-1", exit_code=1)
    w.settle()
    assert w.status.attempt == 1 and w.state != "Failed"
    w.run()
    w.step()
    w.fail("c2-worker-0", exit_code=1)
    w.step()
    assert w.state == "Failed" and "rule retry: its budget (1) is spent" in \
        w.condition(ConditionType.FAILED).message
    assert w.status.attempt == 1  # no attempt started for the failure that failed the job


def test_a_stall_can_restart_one_replica_type_by_rule() -> None:
    w = running_world(mx_doc(workers=2, progressDeadlineSeconds=60, failurePolicy=[
        rule("stuck", "RestartReplicaType", match={"reasons": ["Stalled"]})]))
    w.progress = ProgressSeen(last_progress=w.now, step=5, replica="mx-worker-1",
                              last_reports={"mx-worker-1": w.now})
    w.advance(60)
    decision = w.step()
    assert "rule stuck: RestartReplicaType" in " ".join(e.message for e in decision.events)
    w.step()
    deleted = {n for p in w.history[-2:] for n in p.delete_pods}
    assert deleted == {"mx-worker-0", "mx-worker-1"}  # the Workers; not the others
    assert records(w)[-1][1:3] == ("stuck", "RestartReplicaType")


def test_an_image_that_cannot_be_pulled_is_retried_by_rule_instead_of_failing() -> None:
    w = running_world(mx_doc(workers=2, failurePolicy=[
        rule("registry", "RecreatePod", match={"reasons": ["ImagePullFailed"]},
             budget={"count": 1})]))
    w.set("mx-worker-1", phase=PodPhase.PENDING, waiting_reason="ImagePullBackOff")
    w.advance(121)
    decision = w.step()
    assert decision.delete_pods == ["mx-worker-1"] and w.state != "Failed"
    assert records(w)[-1][1:3] == ("registry", "RecreatePod")
    w.settle()
    w.set("mx-worker-1", phase=PodPhase.PENDING, waiting_reason="ImagePullBackOff")
    w.advance(121)
    w.step()
    assert w.state == "Failed" and "rule registry: its budget (1) is spent" in \
        w.condition(ConditionType.FAILED).message


def test_restarts_in_place_are_judged_once_each_then_escalate() -> None:
    w = running_world(mx_doc(workers=2, restart="OnFailure", failurePolicy=[
        rule("fatal", "FailJob", match={"exitCodes": {"values": [1]}}),
        rule("crashloop", "RestartInPlace", budget={"count": 2}, whenSpent="fresh-pod"),
        rule("fresh-pod", "RecreatePod", match={"reasons": ["Stalled"]})]))
    uid = w.pods["mx-worker-1"].uid
    for restarts, left in ((1, 1), (2, 0)):
        w.set("mx-worker-1", restarts=restarts, last_exit_code=3, last_reason="Error")
        decision = w.step()
        assert decision.delete_pods == [] and records(w)[-1] == \
            ("mx-worker-1", "crashloop", "RestartInPlace", left)
        assert w.status.restarts_seen == {uid: restarts}
        assert w.step().events == []  # judged once
    w.set("mx-worker-1", restarts=3, last_exit_code=3, last_reason="Error")
    decision = w.step()
    assert decision.delete_pods == ["mx-worker-1"]  # crashloop spent: a fresh pod
    assert w.status.failures[-1].escalated_from == ["crashloop"]  # type: ignore[index]
    assert w.restarts()["Worker"] == 4  # three in place and one recreation
    w.settle()
    assert w.status.restarts_seen is None  # the old pod's judged restarts are forgotten
    w.set("mx-worker-0", restarts=1, last_exit_code=1, last_reason="Error")
    w.step()
    assert w.state == "Failed" and "rule fatal: FailJob" in \
        w.condition(ConditionType.FAILED).message


def test_restart_in_place_is_refused_where_the_kubelet_does_not_restart() -> None:
    from tests.unit.helpers import errors_of
    errors = errors_of(mx_doc(workers=2, failurePolicy=[
        rule("loop", "RestartInPlace", match={"reasons": ["Preempted"]})]))
    assert "RestartInPlace needs restartPolicy OnFailure or Always on Scheduler, Server, " \
           "Worker" in errors["spec.runPolicy.failurePolicy[0].action"]
    assert "Preempted is never restarted in place" in \
        errors["spec.runPolicy.failurePolicy[0].match.reasons"]


def test_a_restart_within_the_second_its_pods_were_created_recreates_them_once() -> None:
    """A Worker failing in the second the job's pods were created (the real control plane
    does it: a pod that exits at once): creationTimestamp and the restart's mark are whole
    seconds, equal; every pod is still recreated, and its replacement (held until the next
    second) is not recreated again."""
    w = running_world(mx_doc(workers=2, failurePolicy=[rule("all", "RestartJob")]))
    before = {n: p.uid for n, p in w.pods.items()}
    assert all(p.created == w.now for p in w.pods.values())
    w.fail("mx-worker-1", exit_code=1)
    w.settle()
    assert set(w.pods) <= {"mx-scheduler-0", "mx-server-0", "mx-worker-0"}
    assert not any(p.uid == before[n] for n, p in w.pods.items())  # all deleted, none back
    w.advance(0.5)
    assert w.step().create_pods == []  # still the mark's second
    w.advance(0.5)
    w.settle()
    w.run()
    w.settle()
    assert sorted(w.pods) == MX_PODS and all(p.uid != before[n] for n, p in w.pods.items())
    assert w.created.count("mx-server-0") == 2 and w.state == "Running"
    assert w.restarts()["Worker"] == 1
