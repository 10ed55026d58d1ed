"""Restart policies on the real control plane (api.md, "Restart policies"): Never and ExitCode
1-127 fail the job naming the replica, exit code and reason; ExitCode 128-255 recreates the pod
(same name, new uid) and counts the restart; OnFailure restarts containers in place and those
restarts count toward backoffLimit; a pod deleted by someone else is recreated and not counted.
Every status the job goes through keeps the condition invariants."""

from __future__ import annotations

import time

import pytest

from tests.integration.operator_helpers import (
    EXIT_CODE_ANNOTATION,
    LABEL_JOB,
    Namespace,
    check_invariants,
    condition,
    job,
    replica,
    true_conditions,
    wait_for,
    watch_objects,
    watch_statuses,
)

pytestmark = pytest.mark.integration


def test_never_and_exit_code_1_are_permanent_failures(ns: Namespace) -> None:
    ns.apply(job("TfJob", "never", {
        "Chief": replica("TfJob"),
        "Worker": replica("TfJob", 2, exit_code=1),
    }))
    ns.apply(job("MxJob", "exitcode", {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", 1, exit_code=1, restart_policy="ExitCode"),
    }, runPolicy={"backoffLimit": 5}))
    ns.wait_condition("TfJob", "never", "Failed")
    ns.wait_condition("MxJob", "exitcode", "Failed")

    status = ns.status("TfJob", "never")
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "ReplicaFailed", status
    msg = failed["message"]
    # The replica, its exit code and the reason, e.g. "replica Worker 0 (pod never-worker-0)
    # failed with exit code 1 (Error); restartPolicy Never".
    assert "Worker" in msg and "never-worker-" in msg and "exit code 1" in msg, msg
    assert "Error" in msg and "Never" in msg, msg
    assert status["state"] == "Failed" and status.get("completionTime")

    status = ns.status("MxJob", "exitcode")
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "ReplicaFailed", status
    assert "exitcode-worker-0" in failed["message"] and "exit code 1" in failed["message"]
    assert "ExitCode" in failed["message"], failed["message"]
    # Permanent: never recreated, nothing counted.
    assert status["replicaStatuses"]["Worker"]["restarts"] == 0, status
    assert condition(status, "Restarting") is None, status
    # cleanPodPolicy Running (the default): the running chief/scheduler/server are deleted,
    # the failed pods stay for their logs.
    # (The first worker to fail fails the job; the other one may still be running then.)
    wait_for(lambda: set(ns.pod_phases("never").values()) == {"Failed"},
             lambda: f"only failed pods of never to remain: {ns.pod_summary('never')}")
    ns.wait_pods("exitcode", {"exitcode-worker-0": "Failed"})
    ns.wait_event("never", "ReplicaFailed")


def test_exit_code_retryable_exit_recreates_the_pod_then_the_job_succeeds(
    ns: Namespace
) -> None:
    """Exit 137 is retryable: the pod is recreated under the same name (new uid) and the
    restart counted; the recreated pod exits 0 and the job Succeeds. Every status written on
    the way keeps the invariants (watched, not sampled)."""
    name, pod_name = "retry", "retry-worker-0"
    pods_path = f"/api/v1/namespaces/{ns.name}/pods"
    with watch_statuses(ns, "Caffe2Job", name) as statuses, \
            watch_objects(ns, pods_path, {"labelSelector": f"{LABEL_JOB}={name}"}) as pods:
        ns.apply(job("Caffe2Job", name, {
            "Worker": replica("Caffe2Job", exit_code=137, run="3s", restart_policy="ExitCode"),
        }, runPolicy={"backoffLimit": 4}))
        first = wait_for(lambda: ns.pod(pod_name), "the first pod")
        uids = [first["metadata"]["uid"]]
        saw_restarting = False

        # Every recreated incarnation the poll sees is told to exit 0 instead (the first exits
        # 137). One it misses exits 137 too and is recreated: within backoffLimit, and counted
        # from the pod watch below, which sees every incarnation.
        deadline = time.monotonic() + 60
        while True:
            status = ns.status("Caffe2Job", name)
            saw_restarting |= status.get("state") == "Restarting"
            if set(true_conditions(status)) & {"Succeeded", "Failed"}:
                break
            assert time.monotonic() < deadline, f"not finished: {status}"
            pod = ns.pod(pod_name)
            if pod is not None and pod["metadata"]["uid"] not in uids and \
                    not pod["metadata"].get("deletionTimestamp"):
                uids.append(pod["metadata"]["uid"])
                ns.annotate_pod(pod_name, **{EXIT_CODE_ANNOTATION: "0"})
            time.sleep(0.1)

    status = ns.status("Caffe2Job", name)
    assert status["state"] == "Succeeded", status
    final = ns.pod(pod_name)
    assert final is not None and final["status"]["phase"] == "Succeeded"
    incarnations = list(dict.fromkeys(p["metadata"]["uid"] for p in pods
                                      if p["metadata"]["name"] == pod_name))
    assert incarnations[0] == uids[0] and set(uids) <= set(incarnations), (uids, incarnations)
    assert final["metadata"]["uid"] == incarnations[-1] != incarnations[0]
    worker = status["replicaStatuses"]["Worker"]
    assert worker["restarts"] == len(incarnations) - 1, (worker, incarnations)
    restarting = condition(status, "Restarting")
    assert saw_restarting or (restarting is not None and restarting["status"] == "False"), status
    assert "ReplicaRestarting" in ns.event_reasons(name)

    assert len(statuses) >= 3, statuses
    seen: set[str] = set()
    states = []
    for i, st in enumerate(statuses):
        check_invariants(st, seen, f"status version {i}")
        if not states or states[-1] != st.get("state"):
            states.append(st.get("state"))
    assert "Restarting" in states and states[-1] == "Succeeded", states


def test_on_failure_in_place_restarts_count_toward_backoff_limit(
    ns: Namespace
) -> None:
    # Fails 10 times in place; backoffLimit 2 -> the third restart fails the job.
    ns.apply(job("TfJob", "crashing", {
        "Worker": replica("TfJob", exit_code=1, fail_times=10, restart_policy="OnFailure"),
    }, runPolicy={"backoffLimit": 2}))
    # Fails twice in place, then succeeds: within backoffLimit 3.
    ns.apply(job("TfJob", "flaky", {
        "Worker": replica("TfJob", exit_code=1, fail_times=2, restart_policy="OnFailure"),
    }, runPolicy={"backoffLimit": 3}))
    ns.wait_condition("TfJob", "crashing", "Failed")
    ns.wait_condition("TfJob", "flaky", "Succeeded")

    status = ns.status("TfJob", "crashing")
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded", status
    assert "3 restarts exceed backoffLimit 2" in failed["message"], failed
    # The replica that restarted is named (its exit code is in the pod's lastState only).
    assert "replica Worker 0 (pod crashing-worker-0) 3 times" in failed["message"], failed
    assert status["replicaStatuses"]["Worker"]["restarts"] == 3, status
    pod = ns.pod("crashing-worker-0")
    # The pod itself was restarted in place, never recreated (cleanPodPolicy Running deletes
    # it once the job failed).
    assert pod is None or pod["metadata"].get("deletionTimestamp") or \
        pod["status"]["containerStatuses"][0]["restartCount"] == 3

    status = ns.status("TfJob", "flaky")
    assert status["replicaStatuses"]["Worker"]["restarts"] == 2, status
    pod = ns.pod("flaky-worker-0")
    assert pod is not None and pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 2
    assert pod["spec"]["restartPolicy"] == "OnFailure"


def test_a_pod_deleted_by_someone_else_is_recreated_and_not_counted(
    ns: Namespace
) -> None:
    ns.apply(job("TfJob", "lost", {
        "Worker": replica("TfJob", 2),
        "PS": replica("TfJob", restart_policy="ExitCode"),
    }))
    ns.wait_state("TfJob", "lost", "Running")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in ns.pods("lost")}
    for victim in ("lost-worker-1", "lost-ps-0"):
        ns.kubectl("delete", "pod", victim, "--wait=true")

    def recreated() -> bool:
        now = {p["metadata"]["name"]: (p["metadata"]["uid"], p["status"].get("phase"))
               for p in ns.pods("lost")}
        return set(now) == set(before) and all(
            now[v][0] != before[v] and now[v][1] == "Running"
            for v in ("lost-worker-1", "lost-ps-0"))

    wait_for(recreated, lambda: f"the deleted pods to be recreated: {ns.pod_summary('lost')}")
    assert ns.pod("lost-worker-0")["metadata"]["uid"] == before["lost-worker-0"]  # type: ignore[index]
    status = ns.wait_state("TfJob", "lost", "Running")
    time.sleep(1.5)  # let count-only status updates land
    status = ns.status("TfJob", "lost")
    assert status["state"] == "Running", status
    for rtype in ("Worker", "PS"):
        # Lost and recreated (issue 14): counted as lost, never as a failure.
        rstatus = status["replicaStatuses"][rtype]
        assert (rstatus["restarts"], rstatus["failed"]) == (0, 0), status
        assert (rstatus["lost"], rstatus["recreations"]) == (1, 1), status
    assert condition(status, "Failed") is None
    # It showed Restarting while they were gone, and says why.
    restarting = condition(status, "Restarting")
    assert restarting is not None and restarting["status"] == "False", status
    assert restarting["reason"] == "ReplicasLost", status
    lost = [e["message"] for e in ns.events(name="lost") if e["reason"] == "ReplicaLost"]
    assert len(lost) == 2, lost
    # Seen while terminating, or only once gone: either way the cause is named.
    assert any("(pod lost-worker-1) was lost:" in m and "someone other than the operator" in m
               for m in lost), lost
