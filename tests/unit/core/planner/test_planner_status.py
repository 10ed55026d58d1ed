"""The status tells the truth on a shared cluster (issue 14, 15.5): running/pending per type
and why pending replicas wait, the Replicas column, replicas lost to preemption or deletion
(ReplicaLost, counted once in `lost`/`recreations`, never toward backoffLimit), elastic
Running/Restarting, and succeeded replicas that are never run again."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.planner_helpers import (
    World,
    assert_true_only,
    mx_doc,
    names_of,
    running_world,
    tf_doc,
)
from trainjobs.api.models import ConditionType
from trainjobs.core.observed import GonePod, PodPhase, from_pod

RUNNING, RESTARTING = ConditionType.RUNNING, ConditionType.RESTARTING
ELASTIC = {"minReplicas": 2, "maxReplicas": 4}
SCHEDULER_SAYS = ("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are "
                  "available: 2 No preemption victims found for incoming pod.")


def _unschedulable(w: World, name: str) -> None:
    w.set(name, phase=PodPhase.PENDING, unschedulable=SCHEDULER_SAYS)


def _all_run(w: World) -> None:
    """Every pod runs again: the job is Running."""
    w.run()
    w.step()
    assert_true_only(w, RUNNING)


def test_running_and_pending_per_type_with_the_schedulers_reason() -> None:
    w = World.of(mx_doc(workers=4))
    w.step()
    w.run("mx-scheduler-0", "mx-server-0", "mx-worker-0")
    for i in (1, 2, 3):
        _unschedulable(w, f"mx-worker-{i}")
    w.step()
    worker = w.status.replica_statuses["Worker"]
    assert (worker.running, worker.pending, worker.active) == (1, 3, 4)
    assert worker.pending_reason == f"Unschedulable: {SCHEDULER_SAYS}"
    assert w.status.replica_statuses["Server"].pending_reason == ""
    assert w.status.replica_summary == "Scheduler 1/1, Server 1/1, Worker 1/4"
    assert w.state == "Created"  # never ran: not Running, not Restarting


def test_the_pending_reason_goes_when_the_pods_run() -> None:
    w = World.of(mx_doc(workers=2))
    w.step()
    _unschedulable(w, "mx-worker-1")
    w.step()
    assert w.status.replica_statuses["Worker"].pending_reason.startswith("Unschedulable")
    w.run()
    w.step()
    assert w.status.replica_statuses["Worker"].pending_reason == ""
    assert w.status.replica_summary == "Scheduler 1/1, Server 1/1, Worker 2/2"


def test_a_started_replica_whose_pod_disappears_is_lost_once() -> None:
    w = running_world(mx_doc(workers=3, backoffLimit=0))
    assert w.status.replica_statuses["Worker"].started_indexes == "0-2"
    w.remove("mx-worker-1")  # kubectl delete pod, or the scheduler preempting it
    w.lost_causes["mx-worker-1"] = GonePod(
        "gone-uid", "PreemptionByScheduler: Preempted in order to admit critical pod")
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-1"]  # a replacement at once
    lost = [e for e in p.events if e.reason == "ReplicaLost"]
    assert len(lost) == 1 and lost[0].type == "Warning"
    assert "replica Worker 1 (pod mx-worker-1) was lost: PreemptionByScheduler" in \
        lost[0].message
    worker = w.status.replica_statuses["Worker"]
    assert (worker.lost, worker.recreations, worker.restarts) == (1, 1, 0)
    assert worker.started_indexes == "0,2"
    assert_true_only(w, RESTARTING)  # backoffLimit 0: a loss is no failure
    assert w.condition(RESTARTING).reason == "ReplicasLost"
    assert "Worker 2/3 running" in w.condition(RESTARTING).message
    assert w.status.replica_summary == "Scheduler 1/1, Server 1/1, Worker 2/3"
    # The replacement waits for capacity: still Restarting, and it says why.
    _unschedulable(w, "mx-worker-1")
    p = w.step()
    assert not [e for e in p.events if e.reason == "ReplicaLost"]
    assert_true_only(w, RESTARTING)
    assert SCHEDULER_SAYS in w.condition(RESTARTING).message
    _all_run(w)
    assert w.status.replica_statuses["Worker"].lost == 1


def test_a_loss_is_seen_from_the_status_alone_after_an_operator_restart() -> None:
    """No memory but the status: a new operator (no lost_causes) still counts the loss."""
    w = running_world(mx_doc(workers=2))
    w.remove("mx-worker-0")
    p = w.step()
    assert "its pod disappeared" in next(e.message for e in p.events
                                         if e.reason == "ReplicaLost")
    assert w.status.replica_statuses["Worker"].lost == 1


def test_a_pod_someone_else_deletes_is_lost_while_it_terminates() -> None:
    w = running_world(mx_doc(workers=2), graceful=True)
    doc = {"metadata": {"name": "mx-worker-0", "uid": w.pods["mx-worker-0"].uid,
                        "deletionTimestamp": "2024-01-01T12:00:00Z",
                        "labels": {"trainjobs.io/replica-type": "worker",
                                   "trainjobs.io/replica-index": "0"}},
           "status": {"phase": "Running", "conditions": [
               {"type": "DisruptionTarget", "status": "True",
                "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}]}}
    pod = from_pod(doc, "mxnet")
    assert pod is not None and pod.deleting and pod.disrupted
    w.pods["mx-worker-0"] = pod
    p = w.step()
    assert [e.message for e in p.events if e.reason == "ReplicaLost"] == [
        "replica Worker 0 (pod mx-worker-0) was lost: EvictionByEvictionAPI: Eviction API: "
        "evicting; recreating it (not counted as a failure)"]
    assert p.delete_pods == [] and p.create_pods == []  # it is going by itself
    assert_true_only(w, RESTARTING)
    w.step()  # still terminating: not counted again
    assert w.status.replica_statuses["Worker"].lost == 1
    w.gc()
    # The backend saw it go without our delete: the same pod, already counted.
    w.lost_causes["mx-worker-0"] = GonePod(pod.uid, "deleted by someone other than the operator")
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-0"]
    assert not [e for e in p.events if e.reason == "ReplicaLost"]
    assert w.status.replica_statuses["Worker"].lost == 1


def test_pods_the_operator_deletes_are_never_lost() -> None:
    w = running_world(mx_doc(workers=2, restart="OnFailure"), graceful=True)
    w.fail("mx-worker-1", exit_code=1)
    w.step()  # a retryable failure: the operator deletes it
    w.step()
    w.gc()
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-1"]
    worker = w.status.replica_statuses["Worker"]
    assert (worker.lost, worker.restarts, worker.recreations) == (0, 1, 1)
    assert not [e for e in p.events if e.reason == "ReplicaLost"]


def test_a_pending_pod_that_disappears_is_recreated_but_not_lost() -> None:
    w = World.of(mx_doc(workers=2))
    w.step()
    w.remove("mx-worker-1")
    p = w.step()
    assert names_of(p.create_pods) == ["mx-worker-1"]
    assert w.status.replica_statuses["Worker"].lost == 0


# Elastic ------------------------------------------------------------------------------------


def test_elastic_job_runs_with_fewer_workers_and_restarts_below_min() -> None:
    w = running_world(mx_doc(workers=4, elastic=ELASTIC))
    w.remove("mx-worker-2")
    w.remove("mx-worker-3")
    w.step()
    assert_true_only(w, RUNNING)
    assert "running with 2 of 4 Workers (elasticPolicy minReplicas 2)" in \
        w.condition(RUNNING).message
    assert w.status.replica_summary == "Scheduler 1/1, Server 1/1, Worker 2/4"
    assert w.status.replica_statuses["Worker"].lost == 2
    _unschedulable(w, "mx-worker-2")
    _unschedulable(w, "mx-worker-3")
    w.remove("mx-worker-1")
    w.step()
    assert_true_only(w, RESTARTING)  # 1 < minReplicas
    w.run("mx-worker-1")
    w.step()
    assert_true_only(w, RUNNING)  # 2 again: back to Running from Restarting
    assert SCHEDULER_SAYS in w.condition(RUNNING).message
    w.run()
    w.step()
    assert_true_only(w, RUNNING)
    assert w.condition(RUNNING).message == "MxJob mx is running"
    assert w.status.replica_statuses["Worker"].lost == 3


def test_elastic_job_starts_running_with_min_replicas() -> None:
    w = World.of(mx_doc(workers=4, elastic=ELASTIC))
    w.step()
    w.run("mx-scheduler-0", "mx-server-0", "mx-worker-0")
    w.step()
    assert w.state == "Created"
    w.run("mx-worker-1")
    w.step()
    assert_true_only(w, RUNNING)


def test_tfjob_without_elastic_policy_restarts_until_workers_are_back() -> None:
    w = running_world(tf_doc(workers=4, ps=2))
    for i in (1, 2, 3):
        w.remove(f"tf-worker-{i}")
    w.step()
    assert_true_only(w, RESTARTING)
    assert w.status.replica_summary == "Chief 1/1, Worker 1/4, PS 2/2"
    _all_run(w)
    assert w.status.replica_statuses["Worker"].restarts == 0


# Finished jobs and succeeded replicas (issue 15.5) -------------------------------------------


def test_a_succeeded_replica_is_never_run_again() -> None:
    w = running_world(mx_doc(workers=3))
    w.succeed("mx-worker-0")
    w.step()
    assert w.status.replica_statuses["Worker"].completed_indexes == "0"
    w.remove("mx-worker-0")  # the pod GC, a user, a node loss
    p = w.step()
    assert p.create_pods == [] and not p.events
    worker = w.status.replica_statuses["Worker"]
    assert (worker.succeeded, worker.lost, worker.running) == (1, 0, 2)
    assert_true_only(w, RUNNING)
    # A later pass (an operator restart reads the same status) still knows.
    w.step()
    assert w.status.replica_statuses["Worker"].completed_indexes == "0"
    w.succeed("mx-worker-1", "mx-worker-2")
    w.step()
    assert w.state == "Succeeded"
    assert w.status.replica_statuses["Worker"].succeeded == 3


def test_a_finished_jobs_column_does_not_read_like_a_failure() -> None:
    w = running_world(tf_doc(workers=2, ps=1))
    w.succeed("tf-chief-0")
    w.step()
    assert w.state == "Succeeded"
    # The pass that concludes says it already (it may be the last one).
    assert w.status.replica_summary == "Chief 1 succeeded, Worker stopped, PS stopped"
    w.settle()  # cleanPodPolicy Running deletes the PS and Workers
    assert w.status.replica_summary == "Chief 1 succeeded, Worker stopped, PS stopped"


def test_a_failed_jobs_column_names_the_failure() -> None:
    w = running_world(mx_doc(workers=2))
    w.succeed("mx-worker-0")
    w.step()
    w.fail("mx-worker-1", exit_code=1)
    w.step()
    assert w.state == "Failed"
    w.settle()
    assert w.status.replica_summary == \
        "Scheduler stopped, Server stopped, Worker 1 succeeded, 1 failed"


def test_suspend_forgets_started_indexes() -> None:
    w = running_world(mx_doc(workers=2), graceful=True)
    w.respec(mx_doc(workers=2, suspend=True))
    w.settle()
    assert w.status.replica_statuses["Worker"].started_indexes == ""
    w.respec(mx_doc(workers=2))
    w.settle()
    assert w.status.replica_statuses["Worker"].lost == 0
    assert w.state == "Created"
    w.pods = {n: replace(p, phase=PodPhase.RUNNING) for n, p in w.pods.items()}
    w.step()
    assert_true_only(w, RUNNING)


def test_a_loss_the_backend_saw_counts_before_the_status_recorded_the_start() -> None:
    """The status write that records a start may be coalesced; a pod that the backend saw
    running and then go without our delete is lost all the same, once."""
    w = running_world(mx_doc(workers=2))
    statuses = {k: s.model_copy(update={"started_indexes": ""})
                for k, s in w.status.replica_statuses.items()}
    w.job = w.job.model_copy(update={"status": w.status.model_copy(
        update={"replica_statuses": statuses})})
    w.remove("mx-worker-1")
    w.lost_causes["mx-worker-1"] = GonePod("gone-uid", "PreemptionByScheduler: preempted")
    p = w.step()
    assert [e.reason for e in p.events] == ["ReplicaLost"]
    assert w.status.replica_statuses["Worker"].lost == 1
    assert names_of(p.create_pods) == ["mx-worker-1"]
    w.step()
    assert w.status.replica_statuses["Worker"].lost == 1
