"""The reconcile planner, exhaustively: creation and idempotence, each kind's success rule,
cleanPodPolicy, restart policies and backoffLimit, disruptions, the deadline, suspension, the
TTL, unrunnable pods, scaling, elastic workers, and invariants over hypothesis-generated event
sequences.

Every test drives `plan(...)` through `planner_helpers.World`, a fake backend that applies each
Plan (created pods appear Pending, deleted pods vanish or stay `deleting` until gc) and writes
the planned status back onto the job, exactly as the operator and the local runtime do.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as stat
from hypothesis import strategies as st

from tests.unit.helpers import container, job_doc, replica, template
from tests.unit.planner_helpers import (
    T0,
    World,
    assert_true_only,
    c2_doc,
    exclusive_true,
    mx_doc,
    names_of,
    parse,
    running_world,
    tf_doc,
)
from trainjobs.api.models import ConditionType, RestartPolicy
from trainjobs.core.observed import UNRUNNABLE_REASONS, ObservedPod, PodPhase, from_pod
from trainjobs.core.planner import EXCLUSIVE_CONDITIONS, Plan, PlannerSettings, retryable

RUNNING, RESTARTING = ConditionType.RUNNING, ConditionType.RESTARTING
SUCCEEDED, FAILED = ConditionType.SUCCEEDED, ConditionType.FAILED
SUSPENDED = ConditionType.SUSPENDED

DOCS = {"MxJob": mx_doc, "TfJob": tf_doc, "Caffe2Job": c2_doc}


# Creation and idempotence ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_fresh_job_creates_every_pod_and_service_once(kind: str) -> None:
    w = World.of(DOCS[kind]())
    first = w.plan()
    assert names_of(first.create_pods) == sorted(w.desired.pods)
    assert names_of(first.create_services) == sorted(w.desired.services)
    assert sorted(w.desired.pods) == sorted(w.desired.services)
    assert len(first.create_pods) == len(set(names_of(first.create_pods)))
    assert not first.delete_pods and not first.delete_services and not first.delete_job
    # Services are headless, pods carry the replica labels.
    for svc in first.create_services:
        assert svc["spec"]["clusterIP"] == "None"
    assert w.plan() == first  # same state, same plan
    assert first.status.state == "Created"
    assert first.status.start_time == T0
    assert first.status.conditions[0].type is ConditionType.CREATED
    assert exclusive_true(first.status) == []

    w.apply(first)
    again = w.plan()
    assert again.actions == 0, again
    assert again.create_pods == [] and again.create_services == []
    assert w.plan() == again
    # Only the active counts moved (the pods now exist); after that, nothing to write either.
    assert {t: s.active for t, s in again.status.replica_statuses.items()} == {
        k: r.replicas for k, r in w.job.spec.replica_specs.items()}
    w.apply(again)
    third = w.plan()
    assert third.actions == 0 and third.status == w.status


def test_pods_created_but_not_yet_observed_are_not_created_twice() -> None:
    w = World.of(mx_doc())
    w.step()
    # The backend feeds just-created pods in as Pending with no uid until its cache shows them.
    w.pods = {n: replace(p, uid="") for n, p in w.pods.items()}
    assert w.plan().create_pods == []


def test_missing_services_and_pods_are_created_independently() -> None:
    w = World.of(mx_doc())
    w.step()
    w.services.discard("mx-server-0")
    w.remove("mx-worker-1")
    p = w.plan()
    assert names_of(p.create_services) == ["mx-server-0"]
    assert names_of(p.create_pods) == ["mx-worker-1"]


def test_stray_service_is_deleted() -> None:
    w = World.of(mx_doc())
    w.step()
    w.services.add("mx-worker-7")
    assert w.plan().delete_services == ["mx-worker-7"]


def test_managed_extras_are_created_once() -> None:
    doc = job_doc("Caffe2Job", "c2", {"Worker": replica(2, template(container("caffe2")))})
    w = World.of(doc)
    first = w.plan()
    assert first.create_extras, "a redis backend without redisHost gets a managed Redis"
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in first.create_extras)
    assert len(kinds) == len(set(kinds))
    w.apply(first)
    assert w.plan().create_extras == []


def test_all_running_is_running_and_stays_a_fixed_point() -> None:
    w = World.of(mx_doc())
    w.step()
    w.run("mx-scheduler-0", "mx-server-0", "mx-worker-0")
    assert w.step().status.state == "Created"  # not every replica runs yet
    w.run()
    p = w.step()
    assert_true_only(w, RUNNING)
    assert p.status.replica_statuses["Worker"].active == 3
    assert p.status.replica_summary == "Scheduler 1/1, Server 1/1, Worker 3/3"
    again = w.plan()
    assert again.actions == 0 and again.status == w.status


def test_observed_generation_is_reported() -> None:
    doc = mx_doc()
    doc["metadata"]["generation"] = 4
    assert World.of(doc).plan().status.observed_generation == 4


def test_a_job_being_deleted_is_left_alone() -> None:
    w = running_world(mx_doc())
    w.job = w.job.model_copy(update={"metadata": w.job.metadata.model_copy(
        update={"deletion_timestamp": T0})})
    w.fail("mx-worker-0", 1)
    p = w.plan()
    assert p.actions == 0 and p.status == w.status


# Success rules ---------------------------------------------------------------------------------


def test_mxjob_succeeds_only_when_every_worker_succeeded() -> None:
    w = running_world(mx_doc(workers=3))
    w.succeed("mx-worker-0", "mx-worker-1")
    w.advance(5)
    w.step()
    assert_true_only(w, RUNNING)
    assert w.status.completion_time is None
    assert w.status.replica_statuses["Worker"].succeeded == 2
    w.succeed("mx-worker-2")
    w.advance(5)
    p = w.step()
    assert_true_only(w, SUCCEEDED)  # scheduler and server still run: they never exit
    assert w.status.completion_time == T0 + timedelta(seconds=10)
    assert w.condition(RUNNING).status == "False"
    assert any(e.reason == "JobSucceeded" for e in p.events)
    assert p.create_pods == []


def test_tfjob_chief_exit_zero_succeeds_with_workers_running() -> None:
    w = running_world(tf_doc(chief=1, workers=2, ps=1))
    w.succeed("tf-worker-0", "tf-worker-1")
    w.step()
    assert_true_only(w, RUNNING)  # workers done, chief still running
    w = running_world(tf_doc(chief=1, workers=2, ps=1))
    w.succeed("tf-chief-0")
    w.step()
    assert_true_only(w, SUCCEEDED)


def test_tfjob_master_alias_decides_success() -> None:
    doc = job_doc("TfJob", "tf", {
        "Master": replica(1, template(container("tensorflow"))),
        "Worker": replica(2, template(container("tensorflow"))),
    })
    w = running_world(doc)
    w.succeed("tf-worker-0")
    w.step()
    assert w.state == "Running"
    w.succeed("tf-master-0")
    w.step()
    assert w.state == "Succeeded"


def test_tfjob_without_chief_worker_zero_decides() -> None:
    w = running_world(tf_doc(chief=0, workers=3, ps=1))
    w.succeed("tf-worker-1", "tf-worker-2")
    w.step()
    assert w.state == "Running"
    w.succeed("tf-worker-0")
    w.step()
    assert w.state == "Succeeded"


def test_tfjob_all_workers_success_policy() -> None:
    w = running_world(tf_doc(chief=0, workers=3, ps=1, success_policy="AllWorkers"))
    w.succeed("tf-worker-0")
    w.step()
    assert w.state == "Running"
    w.succeed("tf-worker-1")
    w.step()
    assert w.state == "Running"
    w.succeed("tf-worker-2")
    w.step()
    assert w.state == "Succeeded"


def test_caffe2_succeeds_when_all_shards_succeeded() -> None:
    w = running_world(c2_doc(workers=3))
    w.succeed("c2-worker-0", "c2-worker-2")
    w.step()
    assert w.state == "Running"
    w.succeed("c2-worker-1")
    w.step()
    assert w.state == "Succeeded"


def test_success_pass_creates_nothing_even_with_a_pod_missing() -> None:
    w = running_world(tf_doc(chief=1, workers=2, ps=1))
    w.succeed("tf-chief-0")
    w.remove("tf-worker-1")
    p = w.step()
    assert w.state == "Succeeded"
    assert p.create_pods == []


def _succeeded_world(policy: str) -> World:
    w = World.of(tf_doc(chief=1, workers=2, ps=1, cleanPodPolicy=policy))
    w.step()
    w.run("tf-chief-0", "tf-ps-0", "tf-worker-0")  # tf-worker-1 stays Pending
    w.step()
    w.succeed("tf-chief-0")
    w.step()
    assert w.state == "Succeeded"
    return w


@pytest.mark.parametrize(("policy", "deleted"), [
    ("Running", ["tf-ps-0", "tf-worker-0", "tf-worker-1"]),  # active pods only
    ("All", ["tf-chief-0", "tf-ps-0", "tf-worker-0", "tf-worker-1"]),
    ("None", []),
])
def test_clean_pod_policy_after_success(policy: str, deleted: list[str]) -> None:
    w = _succeeded_world(policy)
    p = w.step()
    assert sorted(p.delete_pods) == deleted
    assert sorted(p.delete_services) == deleted
    assert p.create_pods == [] and p.create_services == []
    assert w.pod_names() == sorted(set(w.desired.pods) - set(deleted))
    # Active counts describe the world once the plan is carried out.
    active = {t: s.active for t, s in p.status.replica_statuses.items()}
    assert active == ({"Chief": 0, "Worker": 2, "PS": 1} if policy == "None" else
                      {"Chief": 0, "Worker": 0, "PS": 0})
    # Cleaned up once: the next pass asks for nothing.
    assert w.step().actions == 0


@pytest.mark.parametrize("policy", ["Running", "All"])
def test_clean_up_retries_the_services_of_pods_already_going_or_gone(policy: str) -> None:
    # The pass that deleted the pods failed to delete their Services (an API error): the next
    # pass sees the pods going, or gone, and the Services still there. They must go then.
    w = _succeeded_world(policy)
    w.set("tf-ps-0", deleting=True)
    w.set("tf-worker-0", deleting=True)
    w.remove("tf-worker-1")
    p = w.plan()
    assert "tf-ps-0" not in p.delete_pods and "tf-worker-0" not in p.delete_pods
    going = ["tf-ps-0", "tf-worker-0", "tf-worker-1"]
    assert sorted(p.delete_services) == (going if policy == "Running" else
                                         ["tf-chief-0", *going])
    w.apply(p)
    w.gc()
    assert w.step().actions == 0


def test_clean_pod_policy_none_keeps_the_services_of_gone_pods() -> None:
    w = _succeeded_world("None")
    w.remove("tf-worker-1")
    assert w.plan().delete_services == []


def test_finished_job_never_creates_pods_nor_runs_again() -> None:
    w = _succeeded_world("All")
    completed = w.status.completion_time
    for _ in range(3):
        w.advance(30)
        w.pods.clear()
        w.services.clear()
        p = w.step()
        assert p.create_pods == [] and p.create_services == [] and p.create_extras == []
        assert_true_only(w, SUCCEEDED)
        assert w.condition(RUNNING) is None  # tf-worker-1 never ran: the job never did
        assert w.status.completion_time == completed
    # Even a suspend or a failure seen afterwards changes nothing.
    w.respec(tf_doc(chief=1, workers=2, ps=1, cleanPodPolicy="All", suspend=True))
    assert w.step().actions == 0
    assert_true_only(w, SUCCEEDED)


def test_failed_job_never_creates_pods_again() -> None:
    w = running_world(mx_doc(cleanPodPolicy="None"))
    w.fail("mx-worker-0", 1)
    w.step()
    assert w.state == "Failed"
    w.pods.clear()
    for _ in range(2):
        p = w.step()
        assert p.create_pods == [] and p.actions == 0
        assert_true_only(w, FAILED)


# Restart policies ----------------------------------------------------------------------------


def test_never_a_failed_replica_fails_the_job_with_a_precise_message() -> None:
    w = running_world(mx_doc(restart="Never"))
    w.fail("mx-worker-1", exit_code=3, reason="Error")
    p = w.step()
    assert_true_only(w, FAILED)
    cond = w.condition(FAILED)
    assert cond.reason == "ReplicaFailed"
    for part in ("Worker", " 1 ", "mx-worker-1", "exit code 3", "Error"):
        assert part in cond.message, (part, cond.message)
    assert w.condition(RUNNING).status == "False"
    assert w.status.completion_time == w.now
    assert any(e.type == "Warning" and e.reason == "ReplicaFailed" for e in p.events)
    assert w.status.replica_statuses["Worker"].failed == 1
    assert p.create_pods == []


@pytest.mark.parametrize("code", [137, 255])
def test_never_policy_does_not_retry_high_exit_codes(code: int) -> None:
    w = running_world(mx_doc(restart="Never"))
    w.fail("mx-worker-0", exit_code=code)
    w.step()
    assert w.state == "Failed"


@pytest.mark.parametrize("code", [1, 2, 100, 127])
def test_exit_code_permanent_codes_fail_the_job(code: int) -> None:
    w = running_world(mx_doc(restart="ExitCode"))
    w.fail("mx-worker-2", exit_code=code)
    p = w.step()
    assert_true_only(w, FAILED)
    assert f"exit code {code}" in w.condition(FAILED).message
    assert "mx-worker-2" in w.condition(FAILED).message
    assert "mx-worker-2" not in p.delete_pods  # the failed pod is kept for its logs
    assert w.status.replica_statuses["Worker"].restarts == 0


@pytest.mark.parametrize("code", [128, 137, 143, 255])
def test_exit_code_retryable_codes_restart_the_pod_counted_once(code: int) -> None:
    w = running_world(mx_doc(restart="ExitCode", backoffLimit=3), graceful=True)
    w.fail("mx-worker-1", exit_code=code, reason="OOMKilled")
    uid = w.pods["mx-worker-1"].uid
    p = w.plan()
    assert p.delete_pods == ["mx-worker-1"]
    assert p.create_pods == []
    assert p.status.counted_failures == [uid]
    assert p.status.replica_statuses["Worker"].restarts == 1
    assert p.status.replica_statuses["Worker"].recreations == 1
    assert exclusive_true(p.status) == ["Restarting"]
    assert [e.reason for e in p.events] == ["ReplicaRestarting"]
    # The backend has not acted yet (or its cache lags): the same failed pod is not counted
    # again, and no second event is emitted.
    w.job = w.job.model_copy(update={"status": p.status})
    again = w.plan()
    assert again.status.replica_statuses["Worker"].restarts == 1
    assert again.status.counted_failures == [uid]
    assert again.events == []
    assert again.delete_pods == ["mx-worker-1"]
    # The delete is under way: nothing is created while the old pod terminates.
    w.apply(again)
    assert w.pods["mx-worker-1"].deleting
    p = w.step()
    assert p.create_pods == [] and p.delete_pods == [] and p.events == []
    assert w.state == "Restarting"
    assert w.status.replica_statuses["Worker"].restarts == 1
    # Gone: recreated under the same name, with a new uid.
    w.gc()
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-1"]
    assert w.pods["mx-worker-1"].uid != uid
    assert w.state == "Restarting"
    assert w.status.counted_failures == []
    w.run("mx-worker-1")
    w.step()
    assert_true_only(w, RUNNING)
    assert w.condition(RESTARTING).status == "False"
    assert w.status.replica_statuses["Worker"].restarts == 1  # still counted


def test_exit_code_unknown_exit_is_retryable() -> None:
    w = running_world(mx_doc(restart="ExitCode"))
    w.fail("mx-worker-0", exit_code=None, reason="")
    w.step()
    assert w.state == "Restarting"


def test_retryable_policy_function() -> None:
    pod = ObservedPod("p", "u", "worker", 0, PodPhase.FAILED, exit_code=1)
    assert not retryable(RestartPolicy.NEVER, pod)
    assert not retryable(RestartPolicy.EXIT_CODE, pod)
    assert retryable(RestartPolicy.EXIT_CODE, replace(pod, exit_code=128))
    assert retryable(RestartPolicy.ON_FAILURE, pod)
    assert retryable(RestartPolicy.ALWAYS, pod)


def test_retryable_failures_accumulate_until_backoff_limit() -> None:
    w = running_world(mx_doc(restart="ExitCode", backoffLimit=2))
    for n, name in enumerate(["mx-worker-0", "mx-server-0"], start=1):
        w.fail(name, exit_code=137)
        w.step()
        assert w.state == "Restarting"
        assert sum(w.restarts().values()) == n
        w.step()  # recreated
        w.run()
        w.step()
        assert w.state == "Running"
    assert w.restarts() == {"Scheduler": 0, "Server": 1, "Worker": 1}
    w.fail("mx-worker-2", exit_code=137)
    p = w.step()
    assert_true_only(w, FAILED)
    cond = w.condition(FAILED)
    assert cond.reason == "BackoffLimitExceeded"
    assert "backoffLimit 2" in cond.message and "mx-worker-2" in cond.message
    assert "137" in cond.message
    assert p.create_pods == []


def test_backoff_limit_zero_fails_on_the_first_retryable_failure() -> None:
    w = running_world(mx_doc(restart="ExitCode", backoffLimit=0))
    w.fail("mx-worker-0", exit_code=143)
    p = w.step()
    assert_true_only(w, FAILED)
    assert w.condition(FAILED).reason == "BackoffLimitExceeded"
    assert "mx-worker-0 exit code 143" in w.condition(FAILED).message
    assert [e.reason for e in p.events] == ["BackoffLimitExceeded"]  # no "restarting it"
    assert w.status.replica_statuses["Worker"].restarts == 1


@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_in_place_restarts_count_toward_backoff_limit(policy: str) -> None:
    w = running_world(mx_doc(restart=policy, backoffLimit=3))
    assert w.desired.pods["mx-worker-0"]["spec"]["restartPolicy"] == policy
    w.set("mx-worker-0", restarts=2)
    w.set("mx-server-0", restarts=1)
    p = w.step()
    assert_true_only(w, RUNNING)
    assert w.restarts() == {"Scheduler": 0, "Server": 1, "Worker": 2}
    assert p.delete_pods == [] and p.create_pods == []
    w.set("mx-worker-1", restarts=1)
    w.step()
    assert_true_only(w, FAILED)
    cond = w.condition(FAILED)
    assert cond.reason == "BackoffLimitExceeded"
    assert "4 restarts exceed backoffLimit 3" in cond.message


def test_pod_level_failure_with_in_place_restarts_is_counted_once() -> None:
    """An OnFailure pod that restarted twice in place and then failed as a pod (e.g. its node
    ran out of disk) accounts for 3 restarts, not 2 + 1 + the same 2 again."""
    w = running_world(mx_doc(restart="OnFailure", backoffLimit=3))
    w.set("mx-worker-0", restarts=2)
    w.step()
    w.fail("mx-worker-0", exit_code=1)
    p = w.step()
    assert p.status.replica_statuses["Worker"].restarts == 3
    assert w.state == "Restarting", w.condition(FAILED)
    w.step()
    w.run()
    w.step()
    assert w.state == "Running"
    assert w.status.replica_statuses["Worker"].restarts == 3
    w.set("mx-worker-0", restarts=1)  # the 4th restart exceeds backoffLimit 3
    w.step()
    assert w.state == "Failed"


def test_failure_past_backoff_limit_keeps_pods_when_clean_policy_none() -> None:
    w = running_world(mx_doc(restart="ExitCode", backoffLimit=0, cleanPodPolicy="None"))
    w.fail("mx-worker-0", exit_code=137)
    p = w.step()
    assert w.state == "Failed"
    assert p.delete_pods == [], "cleanPodPolicy None keeps every pod for inspection"
    assert "mx-worker-0" in w.pods
    assert w.step().actions == 0


# Disruptions -------------------------------------------------------------------------------


def test_pod_deleted_by_someone_else_is_recreated_and_not_counted() -> None:
    w = running_world(mx_doc(restart="Never", backoffLimit=0))
    w.remove("mx-worker-1")
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-1"]
    assert w.status.counted_failures == []
    assert sum(w.restarts().values()) == 0
    assert w.state != "Failed"
    w.run()
    w.step()
    assert_true_only(w, RUNNING)


def _k8s_pod(name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": "u-" + name, "labels": {
            "trainjobs.io/replica-type": "worker", "trainjobs.io/replica-index":
            name.rsplit("-", 1)[1]}},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "mxnet", "state": {
            "terminated": {"exitCode": 137, "reason": "Error"}}}], **status},
    }


@pytest.mark.parametrize("status", [
    {"reason": "Evicted", "message": "The node was low on resource: memory."},
    {"reason": "Preempted"},
    {"reason": "Preempting"},
    {"reason": "NodeLost"},
    {"conditions": [{"type": "DisruptionTarget", "status": "True",
                     "reason": "PreemptionByScheduler"}]},
])
@pytest.mark.parametrize("policy", ["Never", "ExitCode", "OnFailure"])
def test_evicted_or_preempted_pod_is_recreated_and_not_counted(
    status: dict[str, Any], policy: str
) -> None:
    w = running_world(mx_doc(restart=policy, backoffLimit=0), graceful=True)
    observed = from_pod(_k8s_pod("mx-worker-1", **status), "mxnet")
    assert observed is not None and observed.disrupted
    w.pods["mx-worker-1"] = observed
    p = w.step()
    assert p.delete_pods == ["mx-worker-1"]
    assert w.state == "Restarting"  # no elasticPolicy: back to full strength first
    # Counted once (by uid) as lost, never as a failure toward backoffLimit.
    assert w.status.counted_failures == ["u-mx-worker-1"]
    assert sum(w.restarts().values()) == 0
    worker = w.status.replica_statuses["Worker"]
    assert (worker.failed, worker.lost, worker.recreations) == (0, 1, 1)
    assert [e.reason for e in p.events if e.type == "Warning"] == ["ReplicaLost"]
    assert "mx-worker-1" in p.events[0].message and observed.disruption in p.events[0].message
    p = w.step()  # the pod is still terminating: nothing is counted twice
    assert not any(e.reason == "ReplicaLost" for e in p.events)
    assert w.status.replica_statuses["Worker"].lost == 1
    w.gc()
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-1"]
    w.run()
    w.step()
    assert_true_only(w, RUNNING)
    assert sum(w.restarts().values()) == 0


# Deadline ----------------------------------------------------------------------------------


def test_active_deadline_fails_the_job_once_passed() -> None:
    w = World.of(mx_doc(activeDeadlineSeconds=100))
    p = w.step()
    assert p.requeue_after == pytest.approx(100)
    w.run()
    w.advance(60)
    p = w.step()
    assert w.state == "Running"
    assert p.requeue_after == pytest.approx(40)
    w.advance(39.5)
    p = w.step()
    assert w.state == "Running"
    assert p.requeue_after == pytest.approx(0.5)
    w.advance(0.5)
    p = w.step()
    assert_true_only(w, FAILED)
    cond = w.condition(FAILED)
    assert cond.reason == "DeadlineExceeded" and "100s" in cond.message
    assert w.status.completion_time == T0 + timedelta(seconds=100)
    assert p.create_pods == []


def test_deadline_passing_while_a_pod_is_missing_creates_nothing() -> None:
    w = running_world(mx_doc(activeDeadlineSeconds=100))
    w.remove("mx-worker-0")
    w.advance(100)
    p = w.step()
    assert w.state == "Failed"
    assert p.create_pods == [] and p.create_services == []


def test_deadline_requeue_does_not_hide_a_sooner_unrunnable_check() -> None:
    w = World.of(mx_doc(activeDeadlineSeconds=3600))
    w.step()
    w.set("mx-worker-0", waiting_reason="ImagePullBackOff")
    w.advance(20)
    p = w.step()
    assert p.requeue_after == pytest.approx(100), "the grace ends before the deadline"


# Suspend -----------------------------------------------------------------------------------


def test_suspend_deletes_pods_and_resume_recreates_them_with_a_fresh_deadline() -> None:
    doc = mx_doc(activeDeadlineSeconds=100)
    w = running_world(doc, graceful=True)
    w.advance(60)
    w.respec(mx_doc(activeDeadlineSeconds=100, suspend=True))
    p = w.step()
    assert sorted(p.delete_pods) == sorted(w.desired.pods)
    assert p.create_pods == []
    assert_true_only(w, SUSPENDED)
    assert w.condition(RUNNING).status == "False"
    assert w.status.start_time is None
    assert any(e.reason == "JobSuspended" for e in p.events)
    # Pods terminate; the job stays suspended and creates nothing, however long it waits.
    p = w.step()
    assert p.actions == 0 and p.events == []
    w.gc()
    w.advance(500)
    p = w.step()
    assert p.actions == 0
    assert_true_only(w, SUSPENDED)
    assert w.status.replica_statuses["Worker"].active == 0
    # Resume: pods come back and the deadline counts from now.
    w.respec(doc)
    p = w.step()
    assert names_of(p.create_pods) == sorted(w.desired.pods)
    assert w.status.start_time == w.now
    assert p.requeue_after == pytest.approx(100)
    assert w.state != "Suspended"
    assert w.condition(SUSPENDED).status == "False"
    w.run()
    w.advance(99)
    w.step()
    assert_true_only(w, RUNNING)
    w.advance(1)
    w.step()
    assert w.state == "Failed" and w.condition(FAILED).reason == "DeadlineExceeded"


def test_job_suspended_from_the_start_creates_nothing() -> None:
    w = World.of(mx_doc(suspend=True))
    p = w.step()
    assert p.create_pods == [] and p.delete_pods == []
    assert_true_only(w, SUSPENDED)
    assert w.step().actions == 0
    w.respec(mx_doc())
    p = w.step()
    assert names_of(p.create_pods) == sorted(w.desired.pods)
    assert w.state == "Created"


def test_restarts_survive_suspension() -> None:
    w = running_world(mx_doc(restart="OnFailure", backoffLimit=5))
    w.set("mx-worker-0", restarts=3)
    w.step()
    assert w.restarts()["Worker"] == 3
    w.respec(mx_doc(restart="OnFailure", backoffLimit=5, suspend=True))
    w.settle()
    assert w.restarts()["Worker"] == 3
    w.respec(mx_doc(restart="OnFailure", backoffLimit=5))
    w.step()
    assert w.restarts()["Worker"] == 3, "resuming must not forgive restarts"
    w.run()
    w.set("mx-worker-1", restarts=3)  # 6 > 5
    w.step()
    assert w.state == "Failed"


# TTL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["succeed", "fail"])
def test_ttl_deletes_the_job_only_after_it_expires(outcome: str) -> None:
    w = running_world(mx_doc(ttlSecondsAfterFinished=60))
    if outcome == "succeed":
        w.succeed("mx-worker-0", "mx-worker-1", "mx-worker-2")
    else:
        w.fail("mx-worker-0", 1)
    w.advance(10)
    w.step()
    assert w.state in ("Succeeded", "Failed")
    finished = w.status.completion_time
    p = w.step()
    assert not p.delete_job
    assert p.requeue_after == pytest.approx(60)
    w.advance(59)
    p = w.step()
    assert not p.delete_job and p.requeue_after == pytest.approx(1)
    w.advance(1)
    p = w.step()
    assert p.delete_job and w.job_deleted
    assert w.now == finished + timedelta(seconds=60)
    assert any(e.reason == "TTLExpired" for e in p.events)


def test_ttl_zero_deletes_right_after_finishing() -> None:
    w = running_world(c2_doc(ttlSecondsAfterFinished=0))
    w.succeed(*w.pod_names())
    assert not w.step().delete_job  # the finishing pass reports the status first
    assert w.step().delete_job


def test_no_ttl_never_deletes_the_job() -> None:
    w = running_world(c2_doc())
    w.succeed(*w.pod_names())
    w.step()
    w.advance(10**6)
    p = w.step()
    assert not p.delete_job and p.requeue_after is None


# Unrunnable pods ---------------------------------------------------------------------------


@pytest.mark.parametrize("reason", sorted(UNRUNNABLE_REASONS))
def test_unrunnable_pod_fails_the_job_after_the_grace(reason: str) -> None:
    grace = PlannerSettings().unrunnable_grace.total_seconds()
    w = World.of(mx_doc())
    w.step()
    w.set("mx-server-0", waiting_reason=reason, message="pull access denied")
    w.advance(grace - 1)
    p = w.step()
    assert w.state == "Created"
    assert p.requeue_after == pytest.approx(1)
    w.advance(1)
    p = w.step()
    assert_true_only(w, FAILED)
    cond = w.condition(FAILED)
    assert cond.reason == reason
    assert "mx-server-0" in cond.message and "pull access denied" in cond.message


def test_unrunnable_grace_is_a_setting() -> None:
    w = World.of(mx_doc(), settings=PlannerSettings(unrunnable_grace=timedelta(seconds=5)))
    w.step()
    w.set("mx-worker-0", waiting_reason="ErrImagePull")
    w.advance(5)
    w.step()
    assert w.state == "Failed"


def test_ordinary_waiting_never_fails() -> None:
    w = World.of(mx_doc())
    w.step()
    w.set("mx-worker-0", waiting_reason="ContainerCreating")
    w.advance(10**5)
    p = w.step()
    assert w.state == "Created" and p.requeue_after is None


# Scaling -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("doc", "rescaled"), [
    (lambda n: mx_doc(workers=n), "Scheduler=1,Server=1,Worker={}"),
    (lambda n: tf_doc(workers=n), "Chief=1,PS=1,Worker={}"),
    (lambda n: c2_doc(workers=n), "Worker={}"),
])
@pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 4)])
def test_scaling_a_running_job_recreates_every_replica(
        doc: Any, rescaled: str, before: int, after: int) -> None:
    """Every kind lists its peers in each pod's environment (DMLC_NUM_WORKER, TF_CONFIG,
    NUM_SHARDS): new Workers beside old peers would disagree on the cluster (issue 15.6)."""
    w = running_world(doc(before))
    old_pods = w.pod_names()
    w.respec(doc(after))
    p = w.step()
    # Every pod rendered for the old counts goes (the extra ones of a scale-down too), at once.
    assert sorted(p.delete_pods) == old_pods
    # Shards that restart together start a new attempt (a new RUN_ID) with the new counts.
    together = ["RestartingTogether"] if w.framework.replicas_restart_together else []
    assert [e.reason for e in p.events] == ["JobRescaled", *together]
    assert rescaled.format(after) in p.events[0].message
    assert_true_only(w, RESTARTING)
    assert w.condition(RESTARTING).reason == "JobRescaled"
    w.settle()
    assert len(w.pod_names("Worker")) == after
    counts = {pod.replicas_rendered for pod in w.pods.values()}
    assert counts == {rescaled.format(after)}
    assert_true_only(w, RESTARTING)  # not Running before the new cluster runs
    w.run()
    w.step()
    assert_true_only(w, RUNNING)
    # Recreating for new counts is neither a failure nor a loss.
    worker = w.status.replica_statuses["Worker"]
    assert (worker.restarts, worker.lost) == (0, 0)
    assert f"Worker {after}/{after}" in w.status.replica_summary


def test_a_rescale_runs_succeeded_replicas_again_with_the_new_cluster() -> None:
    w = running_world(mx_doc(workers=2))
    w.succeed("mx-worker-0")
    w.step()
    assert w.status.replica_statuses["Worker"].completed_indexes == "0"
    w.respec(mx_doc(workers=3))
    w.step()
    assert w.status.replica_statuses["Worker"].completed_indexes == ""
    w.settle()
    assert w.pod_names("Worker") == ["mx-worker-0", "mx-worker-1", "mx-worker-2"]


# Elastic workers ---------------------------------------------------------------------------


ELASTIC = {"minReplicas": 2, "maxReplicas": 3}


def test_elastic_job_keeps_running_when_a_worker_is_preempted() -> None:
    w = running_world(mx_doc(workers=3, elastic=ELASTIC), graceful=True)
    since = w.condition(RUNNING).last_transition_time
    w.advance(30)
    w.fail("mx-worker-2", exit_code=137, reason="Preempted", disrupted=True)
    p = w.step()
    assert p.delete_pods == ["mx-worker-2"]
    assert_true_only(w, RUNNING)
    assert w.condition(RUNNING).last_transition_time == since
    w.step()
    w.gc()
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-2"]
    assert_true_only(w, RUNNING)  # the replacement waits Pending, the job keeps running
    w.advance(600)
    w.step()
    assert_true_only(w, RUNNING)
    assert sum(w.restarts().values()) == 0


def test_elastic_job_below_min_replicas_is_restarting() -> None:
    w = running_world(mx_doc(workers=3, elastic=ELASTIC))
    w.fail("mx-worker-1", exit_code=137, reason="Preempted", disrupted=True)
    w.fail("mx-worker-2", exit_code=137, reason="Preempted", disrupted=True)
    w.step()
    assert_true_only(w, RESTARTING)


def test_elastic_job_losing_a_server_is_restarting() -> None:
    w = running_world(mx_doc(workers=3, elastic=ELASTIC))
    w.fail("mx-server-0", exit_code=137, reason="Evicted", disrupted=True)
    w.step()
    assert_true_only(w, RESTARTING)


def test_non_elastic_job_restarts_when_a_worker_is_preempted() -> None:
    w = running_world(mx_doc(workers=3))
    w.fail("mx-worker-2", exit_code=137, reason="Preempted", disrupted=True)
    w.step()
    assert_true_only(w, RESTARTING)
    w.step()  # recreated
    assert_true_only(w, RESTARTING)
    w.run()
    w.step()
    assert_true_only(w, RUNNING)


# Invariants over generated event sequences --------------------------------------------------

POLICIES = st.sampled_from([None, "Never", "OnFailure", "Always", "ExitCode"])
EXIT_CODES = st.sampled_from([None, 0, 1, 2, 127, 128, 137, 143, 255])


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    run_policy: dict[str, Any] = {
        "backoffLimit": draw(st.integers(0, 4)),
        "cleanPodPolicy": draw(st.sampled_from(["None", "Running", "All"])),
    }
    if draw(st.booleans()):
        run_policy["activeDeadlineSeconds"] = draw(st.integers(30, 2000))
    if draw(st.booleans()):
        run_policy["ttlSecondsAfterFinished"] = draw(st.integers(0, 600))
    restart = draw(POLICIES)
    kind = draw(st.sampled_from(["mx", "mx-elastic", "tf", "tf-all", "c2"]))
    if kind == "mx":
        return mx_doc(workers=2, restart=restart, **run_policy)
    if kind == "mx-elastic":
        return mx_doc(workers=3, restart=restart, elastic=ELASTIC, **run_policy)
    if kind == "tf":
        return tf_doc(chief=draw(st.integers(0, 1)), workers=2, ps=1, restart=restart,
                      **run_policy)
    if kind == "tf-all":
        return tf_doc(chief=0, workers=2, ps=1, restart=restart, success_policy="AllWorkers",
                      **run_policy)
    return c2_doc(workers=2, restart=restart, **run_policy)


POD = st.integers(0, 7)
# Weighted by repetition: pods mostly start and run, so that jobs get far enough to restart,
# succeed and fail; everything else happens now and then.
EVENTS = st.one_of(
    *[st.tuples(st.just("run_all"))] * 3,
    *[st.tuples(st.just("run"), POD)] * 2,
    *[st.tuples(st.just("succeed"), POD)] * 3,
    *[st.tuples(st.just("fail"), POD, EXIT_CODES, st.booleans())] * 2,
    *[st.tuples(st.just("restart"), POD)] * 2,
    st.tuples(st.just("remove"), POD),
    st.tuples(st.just("wait"), POD),
    *[st.tuples(st.just("gc"))] * 2,
    *[st.tuples(st.just("advance"), st.integers(1, 400))] * 2,
    st.tuples(st.just("suspend")),
    st.tuples(st.just("replan")),
)


def _pick(w: World, i: int, *phases: PodPhase) -> str | None:
    names = [n for n in w.pod_names() if not w.pods[n].deleting and w.pods[n].phase in phases]
    return names[i % len(names)] if names else None


def _happen(w: World, docs: tuple[dict[str, Any], dict[str, Any]], event: tuple[Any, ...]
            ) -> bool:
    """Let `event` happen in the world; False when the plan of this step is not applied."""
    what = event[0]
    active = (PodPhase.PENDING, PodPhase.RUNNING)
    if what == "run_all":
        for name in w.pod_names():
            if w.pods[name].phase is PodPhase.PENDING and not w.pods[name].deleting:
                w.set(name, phase=PodPhase.RUNNING, waiting_reason="")
    elif what == "run" and (name := _pick(w, event[1], PodPhase.PENDING)):
        w.set(name, phase=PodPhase.RUNNING, waiting_reason="")
    elif what == "succeed" and (name := _pick(w, event[1], *active)):
        w.succeed(name)
    elif what == "fail" and (name := _pick(w, event[1], *active)):
        code = event[2]
        reason = "Evicted" if event[3] else ("Error" if code else "")
        w.fail(name, exit_code=code, reason=reason, disrupted=event[3])
    elif what == "restart" and (name := _pick(w, event[1], PodPhase.RUNNING)):
        if w.desired.pods[name]["spec"]["restartPolicy"] in ("OnFailure", "Always"):
            w.set(name, restarts=w.pods[name].restarts + 1)
    elif what == "remove" and (name := _pick(w, event[1], *active, PodPhase.SUCCEEDED,
                                             PodPhase.FAILED)):
        w.remove(name)
    elif what == "wait" and (name := _pick(w, event[1], PodPhase.PENDING)):
        w.set(name, waiting_reason="ImagePullBackOff")
    elif what == "gc":
        w.gc()
    elif what == "advance":
        w.advance(event[1])
    elif what == "suspend":
        w.respec(docs[1] if not w.job.spec.run_policy.suspend else docs[0])
    elif what == "replan":
        return False
    return True


def _replica_of(w: World, pod: ObservedPod) -> str:
    return w.desired.replicas[pod.name].type


def _permanent_failure_in(w: World) -> bool:
    for pod in w.pods.values():
        if pod.phase is PodPhase.FAILED and not pod.disrupted and not pod.deleting and \
                pod.name in w.desired.pods:
            policy = w.job.spec.replica_specs[_replica_of(w, pod)].restart_policy
            if not retryable(policy, pod):
                return True
    return False


def check_invariants(w: World, p: Plan, finished_before: str | None) -> None:
    old, new = w.job.status, p.status
    true = exclusive_true(new)
    assert len(true) <= 1, new.conditions
    assert new.state == (true[0] if true else ("Created" if new.conditions else ""))
    assert p.requeue_after is None or p.requeue_after >= 0
    # Finished is final.
    if finished_before is not None:
        assert true == [finished_before]
        assert [c for c in new.conditions if c.type in (SUCCEEDED, FAILED)] == \
            [c for c in old.conditions if c.type in (SUCCEEDED, FAILED)]
        assert new.completion_time == old.completion_time
        assert p.create_pods == [] and p.create_services == [] and p.create_extras == []
    running = next((c for c in new.conditions if c.type is RUNNING), None)
    if true and true[0] in ("Succeeded", "Failed"):
        assert running is None or running.status == "False"
        assert new.completion_time is not None
        assert p.create_pods == []  # not even on the pass that concludes
    else:
        assert new.completion_time is None
    # Never create a pod over an existing one; delete only what exists and is not deleting.
    for manifest in p.create_pods:
        assert manifest["metadata"]["name"] not in w.pods
    assert len(set(p.delete_pods)) == len(p.delete_pods)
    for name in p.delete_pods:
        assert name in w.pods and not w.pods[name].deleting, name
    # Counting: never decreases; each newly counted failure is a failed pod of the world.
    for rtype, before in old.replica_statuses.items():
        after = new.replica_statuses[rtype]
        assert after.restarts >= before.restarts, (rtype, before, after)
        assert after.recreations >= before.recreations, (rtype, before, after)
    uids = {pod.uid: pod for pod in w.pods.values()}
    newly = set(new.counted_failures) - set(old.counted_failures)
    for uid in newly:
        assert uids[uid].phase is PodPhase.FAILED
    failures = {uid for uid in newly if not uids[uid].disrupted}
    gained = sum(s.restarts for s in new.replica_statuses.values()) - sum(
        s.restarts for s in old.replica_statuses.values())
    assert gained >= len(failures)
    # A lost replica (disrupted, or gone after it started) is counted, never as a failure.
    lost = sum(s.lost for s in new.replica_statuses.values()) - sum(
        s.lost for s in old.replica_statuses.values())
    assert lost >= len(newly - failures)
    for rtype, before in old.replica_statuses.items():
        after = new.replica_statuses[rtype]
        assert after.lost >= before.lost
        assert after.recreations - after.lost >= 0
        assert after.active == after.running + after.pending
    for rtype, s in new.replica_statuses.items():
        assert min(s.active, s.succeeded, s.failed, s.restarts, s.recreations) >= 0
        assert s.active <= w.job.spec.replica_specs[rtype].replicas
    # Reasons are grounded in the world.
    if true == ["Failed"] and finished_before is None:
        reason = next(c.reason for c in new.conditions if c.type is FAILED)
        if reason == "ReplicaFailed":
            assert _permanent_failure_in(w)
        elif reason == "DeadlineExceeded":
            deadline = w.job.spec.run_policy.active_deadline_seconds
            assert deadline is not None and old.start_time is not None
            assert w.now >= old.start_time + timedelta(seconds=deadline)
        elif reason == "BackoffLimitExceeded":
            total = sum(s.restarts for s in new.replica_statuses.values())
            assert total > w.job.spec.run_policy.backoff_limit
        else:
            assert reason in UNRUNNABLE_REASONS
    # Suspension.
    if w.job.spec.run_policy.suspend and finished_before is None:
        assert true == ["Suspended"]
        assert p.create_pods == []
        assert sorted(p.delete_pods) == sorted(n for n, q in w.pods.items() if not q.deleting)
        assert new.start_time is None
    elif finished_before is None:
        assert "Suspended" not in true


@settings(max_examples=400, deadline=timedelta(seconds=2),
          suppress_health_check=[HealthCheck.too_slow])
@given(doc=jobs(), events=st.lists(EVENTS, min_size=5, max_size=50), graceful=st.booleans())
def test_invariants_hold_for_any_event_sequence(
    doc: dict[str, Any], events: list[tuple[Any, ...]], graceful: bool
) -> None:
    suspended = {**doc, "spec": {**doc["spec"], "runPolicy": {**doc["spec"]["runPolicy"],
                                                              "suspend": True}}}
    w = World(parse(doc), graceful=graceful)
    docs = (doc, suspended)
    ever_finished: str | None = None
    seen: set[str] = set()
    created_at_finish: int | None = None
    for event in [("start",), *events]:
        apply = _happen(w, docs, event)
        current = w.state if w.state in ("Succeeded", "Failed") else None
        p = w.plan()
        assert w.plan() == p, "the planner is deterministic"
        check_invariants(w, p, current)
        if apply:
            w.apply(p)
        seen.add(w.state)
        if w.state in ("Succeeded", "Failed") and ever_finished is None:
            ever_finished, created_at_finish = w.state, len(w.created)
        if ever_finished:
            assert w.state == ever_finished
            assert len(w.created) == created_at_finish
        if w.job_deleted:
            break
    for state in sorted(seen):
        stat(f"reached {state or 'no status'}")
    stat(f"restarts counted: {min(sum(w.restarts().values()), 3)}")


def test_exclusive_conditions_are_the_documented_ones() -> None:
    assert {c.value for c in EXCLUSIVE_CONDITIONS} == {
        "Running", "Restarting", "Succeeded", "Failed", "Suspended", "Queued"}
