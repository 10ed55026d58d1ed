"""Operator SIGKILLs: pods recreated under kills are created once per failure (issue 15.8: the
fake kubelet used to delete the operator's recreated pods), and a storm of kills loses no job,
duplicates no pod and leaves no orphan; a Caffe2Job's attempts never overlap, no shard is
created twice within one attempt (issue 29), and no attempt ends without a failed or lost pod
while a shard fails in consecutive attempts (issue 36)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest

from tests.chaos.harness import ChaosEnv, Figures
from tests.chaos.scenarios import StormMix, sigkill_storm
from tests.integration.operator_helpers import condition, job, replica, wait_for
from trainjobs.testing import pod_histories

pytestmark = pytest.mark.integration


def test_pods_recreated_under_operator_kills_are_created_once_per_failure(
    chaos_env: ChaosEnv,
) -> None:
    """8 MxJobs (4 with a Worker that fails every time), 3 Caffe2Jobs whose shard fails in 1,
    2 and 3 consecutive attempts (every shard restarts together each time), a TfJob and 4
    MxJobs with failure rules (2 escalating RecreatePod -> RestartJob -> spent, 2 ignoring
    until spent), under 5 operator SIGKILLs."""
    mix = StormMix(mx=8, caffe2=3, tf=1, failing_every=2, backoff=3, caffe2_failing_every=1,
                   caffe2_failures=3, ruled=4)
    figures = chaos_env.record(sigkill_storm(chaos_env, mix, kills=5, budget=120))
    assert figures.problems() == []
    # The scenario did exercise recreation: 4 failing jobs, each Worker failing 4 times.
    assert figures.failures_recreated >= 4 * 3, figures
    assert figures.max_creates_per_pod_name == 4, figures
    _assert_restarted_together(figures, 3)
    _assert_ruled(figures, mix)


def _assert_ruled(figures: Figures, mix: StormMix) -> None:
    """Every job with failure rules was checked, and matched what KWOK did (its counts and
    actions, decided once each despite the kills: figures.rule_mismatches, a problem)."""
    rules = figures.extra["failure_rules"]
    assert rules["jobs"] == rules["jobs_matching"] == mix.ruled, rules
    assert rules["shapes"] == {"escalate": mix.ruled // 2, "ignore": mix.ruled // 2}, rules


def _assert_restarted_together(figures: Figures, failing: int) -> None:
    """Caffe2Jobs whose shard failed restarted together, and the pod watch saw their attempts
    (so their 0 overlaps, 0 recreations and 0 attempts ended without a cause were measured,
    not assumed). A chosen shard may fail fewer times than chosen: an operator killed while
    creating an attempt leaves that attempt for a fresh one, which the shard runs in."""
    caffe2 = figures.per_kind["Caffe2Job"]
    fail = figures.extra["fail_attempts"]
    assert fail["chosen"] == failing, fail
    assert fail["failed"] >= (fail["attempts_to_fail"] + 1) // 2, fail
    assert caffe2["jobs_restarted_together"] >= 1 and caffe2["attempts_max"] >= 1, caffe2
    assert caffe2["attempt_overlaps"] == caffe2["recreated_in_attempt"] == 0, caffe2
    assert caffe2["attempts_without_cause"] == caffe2["restarts_over_failures"] == 0, caffe2
    assert caffe2["restarts_counted"] >= 1, caffe2
    assert figures.per_kind["MxJob"]["attempt_overlaps"] is None, figures.per_kind


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_sigkill_storm_200_jobs_20_kills(chaos_env: ChaosEnv) -> None:
    mix = StormMix(mx=60, caffe2=80, tf=40, failing_every=10, backoff=2,
                   caffe2_failing_every=2, caffe2_failures=3, ruled=20)
    figures = chaos_env.record(sigkill_storm(chaos_env, mix, kills=20, budget=400))
    assert figures.problems() == []
    assert figures.finished == mix.jobs == 200
    _assert_restarted_together(figures, 40)
    _assert_ruled(figures, mix)


def test_a_failed_pod_whose_removal_stalls_is_deleted_again(chaos_env: ChaosEnv) -> None:
    """The SIGKILL storm's lost jobs: the operator was killed mid-DELETE of a Failed Worker;
    the API server had set its deletionTimestamp (grace 0) but never removed it, no kubelet
    finishes such a pod on KWOK, and every later operator waited for it: the job stayed
    Restarting for ever. A finalizer holds the pod here in the state the operator saw then
    (Failed, deletionTimestamp, grace 0): the operator deletes it again 10 s later, not in a
    loop, and once it goes the Worker runs again and the job ends by its backoffLimit."""
    ns = chaos_env.ns
    audit0 = chaos_env.plane.audit_offset()
    chaos_env.operators.start("--log-level", "info")
    ns.apply(job("MxJob", "held", {
        "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
        "Worker": replica("MxJob", restart_policy="ExitCode")},
        runPolicy={"backoffLimit": 1}))
    worker = "held-worker-0"
    first = wait_for(lambda: ns.pod(worker), "the Worker pod")
    ns.kubectl("patch", "pod", worker, "--type=merge",
               "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))
    # Ended by the test once the finalizer holds it (not after a fixed run: on a loaded
    # machine the operator could delete the Failed pod before the patch above lands).
    ns.end_pod(worker, 137)
    def deleting() -> dict[str, Any] | None:
        pod = ns.pod(worker)
        return pod if pod is not None and "deletionTimestamp" in pod["metadata"] else None

    held = wait_for(deleting, "the operator's delete of the Failed Worker", timeout=30)
    assert held["metadata"]["uid"] == first["metadata"]["uid"]
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0, held["metadata"]
    assert held["status"]["phase"] == "Failed", held["status"]

    def deletes() -> list[str]:
        histories = pod_histories(chaos_env.plane.audit_events(audit0), ns.name)
        return [w.time for w in histories[worker].writes if w.verb == "delete"
                and w.agent == "operator" and w.uid == first["metadata"]["uid"]]

    times = wait_for(lambda: deletes()[1:] and deletes(), "a second delete", timeout=40)
    gap = _epoch(times[1]) - _epoch(times[0])
    # PlannerSettings.unfinished_delete: 10 s after the deletionTimestamp, which the API
    # server keeps to the second (so up to 1 s before the first delete), not at once.
    assert gap >= 8.5, times
    time.sleep(5)  # no loop: a due pod is deleted again when its job is reconciled, not more
    assert len(deletes()) <= 3, deletes()
    assert ns.status("MxJob", "held")["state"] == "Restarting"

    ns.kubectl("patch", "pod", worker, "--type=json",
               "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
    def recreated() -> bool:
        pod = ns.pod(worker)
        return pod is not None and pod["metadata"]["uid"] != first["metadata"]["uid"]

    wait_for(recreated, "the Worker created again", timeout=30)
    ns.end_pod(worker, 137)  # its second failure exceeds backoffLimit 1
    status = ns.wait_finished("MxJob", "held", timeout=60)
    assert status["state"] == "Failed", status
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded", status


HOLD = "chaos.trainjobs.io/hold"


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
