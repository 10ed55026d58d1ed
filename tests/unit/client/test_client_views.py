"""The client's pure views: a pod's replica and why it waits, per-replica progress."""

from __future__ import annotations

from typing import Any

from trainjobs.api.models import Job, JobSpec, JobStatus, ObjectMeta, ReplicaSpec, ReplicaStatus
from trainjobs.client.views import JobEvent, PodInfo, progress, replica_names


def pod(rtype: str, index: int, phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"j-{rtype}-{index}", "uid": f"u-{rtype}-{index}", "labels": {
        "trainjobs.io/replica-type": rtype, "trainjobs.io/replica-index": str(index)}},
        "spec": {"nodeName": "n1"}, "status": {"phase": phase, **status}}


def test_pod_reason_unschedulable_waiting_and_terminated() -> None:
    names = {"worker": "Worker"}
    unsched = PodInfo.from_api(pod("worker", 1, "Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/2 nodes are available"}]), names)
    assert (unsched.replica, unsched.reason, unsched.message) == (
        "Worker-1", "Unschedulable", "0/2 nodes are available")
    pulling = PodInfo.from_api(pod("worker", 0, "Pending", containerStatuses=[
        {"restartCount": 2, "state": {"waiting": {"reason": "ImagePullBackOff"}}}]), names)
    assert (pulling.reason, pulling.restarts) == ("ImagePullBackOff", 2)
    ended = PodInfo.from_api(pod("worker", 0, "Failed", containerStatuses=[
        {"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]), names)
    assert (ended.exit_code, ended.reason) == (3, "Error")


def job(state: str = "Running", **statuses: ReplicaStatus) -> Job:
    template = {"spec": {"containers": [{"name": "mxnet", "image": "x"}]}}
    return Job(kind="MxJob", metadata=ObjectMeta(name="j"),
               spec=JobSpec(replica_specs={"Server": ReplicaSpec(replicas=1, template=template),
                                           "Worker": ReplicaSpec(replicas=3, template=template)}),
               status=JobStatus(state=state, replica_statuses=statuses))


def test_progress_counts_pods_and_missing_replicas_as_pending_with_why() -> None:
    j = job(Worker=ReplicaStatus(succeeded=1, restarts=2))
    names = replica_names(j)
    pods = [PodInfo.from_api(pod("worker", 0, "Running"), names),
            PodInfo.from_api(pod("worker", 2, "Pending", conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]), names)]
    server, worker = progress(j, pods)
    assert (server.running, server.pending, server.pending_reason) == (0, 1, "not created yet")
    assert (worker.running, worker.pending, worker.succeeded, worker.restarts) == (1, 1, 1, 2)
    assert worker.describe() == ("Worker 1/3 running, 1 pending (Unschedulable), "
                                 "1 succeeded, 2 restarts")


def test_finished_job_has_nothing_pending() -> None:
    server, worker = progress(job("Succeeded", Worker=ReplicaStatus(succeeded=3)), [])
    assert (server.pending, worker.pending, worker.succeeded) == (0, 0, 3)


def test_event_from_core_v1() -> None:
    event = JobEvent.from_api({"type": "Warning", "reason": "BackOff", "message": "m",
                               "involvedObject": {"kind": "Pod", "name": "p"}, "count": 4,
                               "lastTimestamp": "2026-01-02T03:04:05Z", "metadata": {}})
    assert (event.object, event.count, event.time and event.time.year) == ("Pod/p", 4, 2026)


def test_the_operators_pending_reason_comes_first() -> None:
    j = job(Worker=ReplicaStatus(pending=3, pending_reason="QuotaExceeded: exceeded quota: q"))
    _, worker = progress(j, [])
    assert (worker.pending, worker.pending_reason) == (3, "QuotaExceeded: exceeded quota: q")
