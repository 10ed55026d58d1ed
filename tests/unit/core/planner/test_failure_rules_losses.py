"""Failure rules for pods the platform takes (planner/losses.py): kube-scheduler's preemption
marks a pod DisruptionTarget (PreemptionByScheduler) and deletes it, never leaving a Failed
pod (seen on the real control plane: tests/integration/test_failure_rules_cluster.py). A rule
matching Preempted decides that loss as it decides a Failed disrupted pod; a loss no rule
decides stays a loss, recorded once as the default rule `disruption`."""

from __future__ import annotations

from typing import Any

from tests.unit.planner_helpers import World, c2_doc, mx_doc, running_world, tf_doc
from trainjobs.api.models import ConditionType
from trainjobs.core.observed import GonePod

PREEMPTED = "PreemptionByScheduler: Preempted in order to admit critical pod"


def records(w: World) -> list[tuple[str, str, str, str, int | None]]:
    return [(f.replica, f.reason, f.rule, f.action, f.budget_left)
            for f in w.status.failures or ()]


def preempt(w: World, name: str, graceful: bool = False) -> str:
    """kube-scheduler takes pod `name`: marked, then deleted (gone at once, or terminating)."""
    uid = w.pods[name].uid
    w.set(name, disrupted=True, disruption=PREEMPTED)
    if graceful:
        w.set(name, deleting=True)
    else:
        w.remove(name)
        w.lost_causes[name] = GonePod(uid, PREEMPTED)
    return uid


NO_PREEMPTION: list[dict[str, Any]] = [
    {"name": "no-preemption", "match": {"reasons": ["Preempted"]}, "action": "FailJob"}]


def test_a_preempted_pod_that_vanishes_fails_the_job_by_rule() -> None:
    w = running_world(tf_doc(chief=1, workers=1, failurePolicy=NO_PREEMPTION))
    uid = preempt(w, "tf-worker-0")
    w.step()
    failed = w.condition(ConditionType.FAILED)
    assert w.state == "Failed" and failed.reason == "FailurePolicy", w.status
    assert "(pod tf-worker-0) was lost: PreemptionByScheduler" in failed.message
    assert "failurePolicy rule no-preemption: FailJob" in failed.message
    assert records(w) == [("tf-worker-0", "Preempted", "no-preemption", "FailJob", None)]
    assert w.status.failures[0].pod_uid == uid  # type: ignore[index]


def test_a_preempted_pod_being_deleted_fails_the_job_by_rule() -> None:
    w = running_world(tf_doc(chief=1, workers=1, failurePolicy=NO_PREEMPTION))
    preempt(w, "tf-chief-0", graceful=True)
    w.step()
    assert w.state == "Failed" and records(w) == [
        ("tf-chief-0", "Preempted", "no-preemption", "FailJob", None)]


def test_without_a_rule_a_preemption_is_a_loss_recorded_once() -> None:
    w = running_world(mx_doc(workers=2, backoffLimit=0))
    preempt(w, "mx-worker-1")
    decision = w.step()
    assert "mx-worker-1" in [p["metadata"]["name"] for p in decision.create_pods]
    assert records(w) == [("mx-worker-1", "Preempted", "disruption", "Ignore", None)]
    worker = w.status.replica_statuses["Worker"]
    assert (worker.lost, worker.restarts) == (1, 0) and w.state != "Failed"
    w.settle()
    w.run()
    w.step()
    assert len(records(w)) == 1 and w.state == "Running"


def test_a_rule_that_does_not_match_the_preemption_leaves_it_a_loss() -> None:
    w = running_world(mx_doc(workers=2, backoffLimit=0, failurePolicy=[
        {"name": "oom", "match": {"reasons": ["OOMKilled"]}, "action": "FailJob"}]))
    preempt(w, "mx-worker-0", graceful=True)
    w.settle()
    assert w.state != "Failed"
    assert records(w) == [("mx-worker-0", "Preempted", "disruption", "Ignore", None)]


def test_a_restart_job_rule_counts_the_preemption_and_restarts_every_replica() -> None:
    w = running_world(mx_doc(workers=2, failurePolicy=[
        {"name": "regroup", "match": {"reasons": ["Preempted"]}, "action": "RestartJob",
         "budget": {"count": 1}}]))
    before = {n: p.uid for n, p in w.pods.items()}
    w.advance(5)
    preempt(w, "mx-worker-0")
    w.settle()
    w.advance(1)
    w.settle()
    assert records(w) == [("mx-worker-0", "Preempted", "regroup", "RestartJob", 0)]
    assert {n: p.uid for n, p in w.pods.items()}.keys() == before.keys()
    assert all(p.uid != before[n] for n, p in w.pods.items())  # every pod created again
    worker = w.status.replica_statuses["Worker"]
    assert (worker.restarts, worker.lost) == (1, 0)
    assert {k: len(v) for k, v in (w.status.failure_rule_uses or {}).items()} == {"regroup": 1}


def test_a_user_delete_is_no_disruption_for_the_rules() -> None:
    w = running_world(tf_doc(chief=1, workers=1, failurePolicy=NO_PREEMPTION))
    uid = w.pods["tf-worker-0"].uid
    w.remove("tf-worker-0")
    w.lost_causes["tf-worker-0"] = GonePod(uid, "deleted by someone other than the operator")
    w.step()
    assert w.state != "Failed" and records(w) == []


def test_a_shard_preempted_fails_a_job_that_restarts_together_by_rule() -> None:
    w = running_world(c2_doc(workers=3, failurePolicy=NO_PREEMPTION))
    preempt(w, "c2-worker-1")
    w.step()
    assert w.state == "Failed" and w.status.attempt == 0
    assert records(w) == [("c2-worker-1", "Preempted", "no-preemption", "FailJob", None)]
