"""Issue 15.5 and 15.6 on the real control plane: a Worker that succeeded is never run again
when its pod disappears, and scaling a running MxJob recreates every replica with the new
counts in its environment (never new Workers beside a scheduler that expects the old ones)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration.operator_helpers import Namespace, env_of, job, replica, wait_for

pytestmark = pytest.mark.integration


def test_a_succeeded_worker_is_not_run_again_when_its_pod_goes(ns: Namespace) -> None:
    ns.apply(job("MxJob", "done", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2)}))
    ns.wait_state("MxJob", "done", "Running")
    ns.end_pod("done-worker-0", 0)

    def completed() -> bool:
        worker = ns.status("MxJob", "done")["replicaStatuses"]["Worker"]
        return bool(worker.get("completedIndexes") == "0")

    wait_for(completed, lambda: f"worker 0 completed: {ns.status('MxJob', 'done')}")
    uid = ns.pod("done-worker-0")["metadata"]["uid"]  # type: ignore[index]
    ns.kubectl("delete", "pod", "done-worker-0", "--wait=true")
    time.sleep(3)  # time enough for a wrong recreation (the operator reacts within ~0.1 s)
    assert ns.pod("done-worker-0") is None, ns.pod_summary("done")
    status = ns.status("MxJob", "done")
    worker = status["replicaStatuses"]["Worker"]
    assert (worker["succeeded"], worker["lost"], worker["running"]) == (1, 0, 1), status
    assert status["state"] == "Running", status
    assert "done-worker-0" not in [e["message"] for e in ns.events(name="done")
                                   if e["reason"] == "ReplicaLost"]
    ns.end_pod("done-worker-1", 0)
    status = ns.wait_state("MxJob", "done", "Succeeded")
    assert status["replicaStatuses"]["Worker"]["succeeded"] == 2, status
    assert uid not in {p["metadata"]["uid"] for p in ns.pods("done")}


def test_scaling_a_running_mxjob_recreates_every_replica(ns: Namespace) -> None:
    manifest = job("MxJob", "scale", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2)})
    ns.apply(manifest)
    ns.wait_state("MxJob", "scale", "Running")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in ns.pods("scale")}
    ns.patch_job("MxJob", "scale", {"spec": {"replicaSpecs": {"Worker": {"replicas": 4}}}})

    def rescaled() -> list[dict[str, Any]] | None:
        pods = [p for p in ns.pods("scale") if not p["metadata"].get("deletionTimestamp")]
        names = {p["metadata"]["name"] for p in pods}
        fresh = all(p["metadata"]["uid"] != before.get(p["metadata"]["name"]) for p in pods)
        return pods if len(names) == 6 and fresh else None

    pods = wait_for(rescaled, lambda: f"every pod recreated: {ns.pod_summary('scale')}")
    for pod in pods:
        env = env_of(pod, "mxnet")
        assert (env["DMLC_NUM_WORKER"], env["DMLC_NUM_SERVER"]) == ("4", "1"), env
    assert "JobRescaled" in ns.event_reasons("scale")
    status = ns.wait_state("MxJob", "scale", "Running")
    assert status["replicaSummary"] == "Scheduler 1/1, Server 1/1, Worker 4/4", status
    assert all(s["restarts"] == 0 and s["lost"] == 0
               for s in status["replicaStatuses"].values()), status
