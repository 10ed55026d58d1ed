"""runPolicy on the real control plane: activeDeadlineSeconds, cleanPodPolicy, TTL after
finishing, suspend and resume; deleting a job deletes what it owns (the controller manager's
garbage collector, through the owner references); the status invariants while a job runs."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from tests.integration.operator_helpers import (
    Namespace,
    check_invariants,
    condition,
    job,
    replica,
    true_conditions,
    wait_for,
)

pytestmark = pytest.mark.integration
# The controller manager's garbage collector learns of a just-installed CRD (the owners' kind)
# only at its next discovery resync (every 30 s): the first collection in a session can wait
# that long.
GC_TIMEOUT = 60


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_active_deadline_fails_the_job(ns: Namespace) -> None:
    ns.apply(job("TfJob", "slow", {"Worker": replica("TfJob", 2)},
                 runPolicy={"activeDeadlineSeconds": 3}))
    ns.wait_condition("TfJob", "slow", "Failed", timeout=30)
    status = ns.status("TfJob", "slow")
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded", status
    assert "activeDeadlineSeconds" in failed["message"]
    ran = (_ts(status["completionTime"]) - _ts(status["startTime"])).total_seconds()
    assert 3 <= ran <= 10, status
    # The running workers are deleted (cleanPodPolicy Running by default).
    ns.wait_pods("slow", {})
    ns.wait_event("slow", "DeadlineExceeded")


def test_clean_pod_policy_decides_which_pods_remain(ns: Namespace) -> None:
    """Scheduler and servers run forever; the workers exit 0. After success: None keeps every
    pod, Running deletes the running ones, All deletes all."""
    for policy in ("None", "Running", "All"):
        ns.apply(job("MxJob", f"clean-{policy.lower()}", {
            "Scheduler": replica("MxJob"),
            "Server": replica("MxJob"),
            "Worker": replica("MxJob", 2, exit_code=0),
        }, runPolicy={"cleanPodPolicy": policy}))
    for policy in ("None", "Running", "All"):
        ns.wait_condition("MxJob", f"clean-{policy.lower()}", "Succeeded")
    workers = {"worker-0": "Succeeded", "worker-1": "Succeeded"}
    expected = {
        "none": {"scheduler-0": "Running", "server-0": "Running", **workers},
        "running": workers,
        "all": {},
    }
    for policy, pods in expected.items():
        name = f"clean-{policy}"
        ns.wait_pods(name, {f"{name}-{k}": v for k, v in pods.items()})
    time.sleep(1.5)  # and it stays so: nothing is recreated
    for policy, pods in expected.items():
        name = f"clean-{policy}"
        assert ns.pod_phases(name) == {f"{name}-{k}": v for k, v in pods.items()}
        assert ns.status("MxJob", name)["state"] == "Succeeded"
    active = ns.status("MxJob", "clean-none")["replicaStatuses"]["Server"]["active"]
    assert active == 1


def test_ttl_after_finished_deletes_the_job(ns: Namespace) -> None:
    ns.apply(job("Caffe2Job", "short", {"Worker": replica("Caffe2Job", exit_code=0)},
                 runPolicy={"ttlSecondsAfterFinished": 2, "cleanPodPolicy": "None"}))
    ns.wait_condition("Caffe2Job", "short", "Succeeded")
    done = time.monotonic()
    assert ns.pods("short"), "cleanPodPolicy None keeps the finished pod until the TTL"
    ns.wait_gone("Caffe2Job", "short", timeout=20)
    assert time.monotonic() - done >= 1.0, "deleted before its TTL"
    # Its pod and Service go with it (garbage collection through the owner references).
    wait_for(lambda: not ns.pods("short") and not ns.services("short"),
             lambda: f"the job's pods and Services to be collected: {ns.pod_summary('short')}",
             timeout=GC_TIMEOUT)


def test_suspend_deletes_pods_and_resume_recreates_them(ns: Namespace) -> None:
    ns.apply(job("TfJob", "pausable", {"Chief": replica("TfJob"), "Worker": replica("TfJob", 2)},
                 runPolicy={"backoffLimit": 0}))
    ns.wait_state("TfJob", "pausable", "Running")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in ns.pods("pausable")}
    assert len(before) == 3

    ns.patch_job("TfJob", "pausable", {"spec": {"runPolicy": {"suspend": True}}})
    ns.wait_condition("TfJob", "pausable", "Suspended")
    ns.wait_pods("pausable", {})
    status = ns.wait_state("TfJob", "pausable", "Suspended")
    assert true_conditions(status) == ["Created", "Suspended"], status
    assert status["observedGeneration"] == 2
    time.sleep(1.5)
    assert ns.pods("pausable") == [], "a suspended job's pods are not recreated"
    assert ns.status("TfJob", "pausable")["state"] == "Suspended"

    ns.patch_job("TfJob", "pausable", {"spec": {"runPolicy": {"suspend": False}}})
    status = ns.wait_state("TfJob", "pausable", "Running")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in ns.pods("pausable")}
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    suspended = condition(status, "Suspended")
    assert suspended is not None and suspended["status"] == "False", status
    # Suspending is not a failure: nothing counted toward backoffLimit 0.
    assert all(s["restarts"] == 0 for s in status["replicaStatuses"].values()), status
    reasons = ns.event_reasons("pausable")
    assert "JobSuspended" in reasons and "JobResumed" in reasons, reasons


def test_deleting_the_job_deletes_everything_it_owns(ns: Namespace) -> None:
    ns.apply(job("Caffe2Job", "owner", {"Worker": replica("Caffe2Job", 2)}))
    ns.wait_state("Caffe2Job", "owner", "Running")
    # Two workers, the managed Redis pod, and their Services.
    assert len(ns.pods("owner")) == 3 and len(ns.services("owner")) == 3
    ns.kubectl("delete", "caffe2job", "owner", "--wait=true")
    wait_for(lambda: not ns.pods("owner") and not ns.services("owner"),
             lambda: f"garbage collection of the job's objects: {ns.pod_summary('owner')}",
             timeout=GC_TIMEOUT)


def test_status_invariants_hold_while_a_job_runs_and_after(ns: Namespace) -> None:
    """Sample the status while a job starts, runs, keeps restarting workers that exit with a
    retryable code (Running <-> Restarting) and succeeds when its chief exits 0: at most one
    exclusive condition is True at any time, and once finished the job never shows Running
    again (also not while cleanPodPolicy deletes its pods afterwards)."""
    ns.apply(job("TfJob", "sampled", {
        "Chief": replica("TfJob", exit_code=0, run="4s"),
        "Worker": replica("TfJob", 3, exit_code=137, run="1s", restart_policy="ExitCode"),
        "PS": replica("TfJob"),
    }, runPolicy={"backoffLimit": 100}))
    seen: set[str] = set()
    states: list[str] = []
    samples = 0
    finished_at = None
    while finished_at is None or time.monotonic() - finished_at < 3:
        status = ns.status("TfJob", "sampled")
        check_invariants(status, seen, f"sample {samples}")
        samples += 1
        if status.get("state") and (not states or states[-1] != status["state"]):
            states.append(status["state"])
        if seen and finished_at is None:
            finished_at = time.monotonic()
        assert samples < 2000, f"the job did not finish: {status}"
        time.sleep(0.05)
    assert states[-1] == "Succeeded", states
    # It ran: the Running condition stays in the history (False now). Not "Running" among the
    # samples: with Workers restarting every second the job may be Running for less than a
    # sampling interval at a time, and a sample is no record.
    ran = condition(status, "Running")
    assert ran is not None and ran["status"] == "False", status
    assert samples > 20
