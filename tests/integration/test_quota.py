"""Quotas wait (issue 14.3), on the real API server with a real ResourceQuota: a job whose pods
the quota refuses is not Failed; it says why (Created reason QuotaExceeded, pendingReason, an
event naming the quota), retries with back-off, and runs once the quota is raised. The typed
error tree meets the real server's answers here too (403 quota vs 409 AlreadyExists)."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.operator_helpers import Namespace, condition, job, replica, wait_for

pytestmark = pytest.mark.integration


def _quota(ns: Namespace, pods: int) -> None:
    ns.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-a"},
        "spec": {"hard": {"pods": str(pods)}}}))


def test_a_job_over_its_quota_waits_and_runs_when_the_quota_is_raised(ns: Namespace) -> None:
    # A pod that is not the job's fills the quota, so every pod of the job is refused. (With
    # room for one of them, which one gets it is a race: the operator creates a job's pods in
    # parallel, and a Worker that takes the room and ends frees it. CI once saw the job succeed
    # that way before the quota was raised; the planner's test_quota_wait covers that path.)
    _quota(ns, 1)
    # The quota controller must have counted the namespace, or the admission plugin answers
    # "status unknown for quota" (which waits the same way, but is not what this tests).
    wait_for(lambda: json.loads(ns.kubectl("get", "resourcequota", "team-a", "-o",
                                           "json").stdout).get("status", {}).get("used"),
             lambda: "the quota controller to count namespace usage")
    ns.kubectl("run", "blocker", "--image=example.invalid/blocker:1", "--restart=Never")
    ns.apply(job("MxJob", "quota", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2, exit_code=0, run="2s")}))

    def waiting() -> dict[str, object] | None:
        status = ns.status("MxJob", "quota")
        created = condition(status, "Created")
        return status if created and created["reason"] == "QuotaExceeded" else None

    status = wait_for(waiting, lambda: f"QuotaExceeded on the job: {ns.status('MxJob', 'quota')}")
    created = condition(status, "Created")
    assert created is not None and created["status"] == "True"
    assert "exceeded quota: team-a" in created["message"], created
    assert status["state"] == "Created", status
    assert condition(status, "Failed") is None
    pending = [s.get("pendingReason", "") for s in status["replicaStatuses"].values()]
    assert pending and all(r.startswith("QuotaExceeded: ") for r in pending), status
    events = [e for e in ns.events(name="quota") if e["reason"] == "QuotaExceeded"]
    assert events and "ResourceQuota team-a refuses the job's pods" in events[0]["message"]
    assert ns.pods("quota") == []
    # Back-off: a job held by its quota does not hammer the API server (1 s, 2 s, 4 s...).
    time.sleep(6)
    tries = [e for e in ns.events(name="quota") if e["reason"] == "QuotaExceeded"]
    assert sum(int(e.get("count") or 1) for e in tries) <= 5, tries
    assert condition(ns.status("MxJob", "quota"), "Failed") is None
    assert ns.pods("quota") == []

    _quota(ns, 10)
    status = ns.wait_state("MxJob", "quota", "Succeeded", timeout=90)
    created = condition(status, "Created")
    assert created is not None and created["reason"] == "JobCreated", status
    assert status["replicaStatuses"]["Worker"]["succeeded"] == 2, status
