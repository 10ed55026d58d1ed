"""A pod left half-deleted (deletionTimestamp, grace period 0, still stored) is deleted again.

Found by the chaos suite's SIGKILL storm: the operator was killed while its DELETE of a failed
Worker was in flight; the API server had set the pod's deletionTimestamp (grace 0) but the
removal itself was cancelled with the request. Every later operator saw a pod `deleting`
forever (no kubelet finishes a zero-grace deletion) and the job stayed Restarting, `Worker
0/1`, for good.
"""

from __future__ import annotations

from tests.unit.planner_helpers import World, mx_doc, running_world
from trainjobs.core.observed import from_pod


def _half_deleted_world() -> World:
    w = running_world(mx_doc(workers=1, restart="ExitCode"))
    w.fail("mx-worker-0", exit_code=137)
    w.plan()  # the failure is counted ...
    # ... and the DELETE is cut off after deletionTimestamp was set (grace 0).
    w.set("mx-worker-0", deleting=True, delete_due=w.now)
    return w


def test_a_half_deleted_pod_is_deleted_again_after_the_grace() -> None:
    w = _half_deleted_world()
    early = w.plan()
    assert early.delete_pods == [] and early.requeue_after is not None
    assert 0 < early.requeue_after <= w.settings.unfinished_delete.total_seconds()
    w.advance(w.settings.unfinished_delete.total_seconds())
    assert w.plan().delete_pods == ["mx-worker-0"]


def test_the_job_recovers_instead_of_restarting_forever() -> None:
    w = _half_deleted_world()
    w.advance(60)
    w.settle()
    assert w.pods["mx-worker-0"].uid != "" and not w.pods["mx-worker-0"].deleting
    w.run()
    w.step()
    assert w.state == "Running"


def test_a_pod_being_deleted_gracefully_is_left_to_its_kubelet() -> None:
    w = running_world(mx_doc(workers=1))
    w.set("mx-worker-0", deleting=True)  # deletionTimestamp with a grace period: not ours
    w.advance(3600)
    assert "mx-worker-0" not in w.plan().delete_pods


def test_from_pod_reads_a_zero_grace_deletion_only() -> None:
    def pod(grace: int | None) -> dict[str, object]:
        meta: dict[str, object] = {
            "name": "mx-worker-0", "uid": "u",
            "labels": {"trainjobs.io/replica-type": "worker",
                       "trainjobs.io/replica-index": "0"},
            "deletionTimestamp": "2026-11-23T22:02:54Z"}
        if grace is not None:
            meta["deletionGracePeriodSeconds"] = grace
        return {"metadata": meta, "status": {"phase": "Failed"}}

    due = from_pod(pod(0), "mxnet")
    assert due is not None and due.deleting and due.delete_due is not None
    assert due.delete_due.isoformat().startswith("2026-11-23T22:02:54")
    graceful = from_pod(pod(30), "mxnet")
    assert graceful is not None and graceful.deleting and graceful.delete_due is None


def test_finished_and_suspended_jobs_delete_a_half_deleted_pod_again_too() -> None:
    for finish in ("succeed", "suspend"):
        w = running_world(mx_doc(workers=1))
        w.graceful = True  # what the finishing pass deletes stays, `deleting`
        if finish == "succeed":
            w.succeed("mx-worker-0")
            w.step()
            assert w.state == "Succeeded"
            w.step()  # cleanPodPolicy Running: the next pass deletes what still runs
        else:
            doc = mx_doc(workers=1)
            doc["spec"]["runPolicy"] = {"suspend": True}
            w.respec(doc)
            w.step()
            assert w.state == "Suspended"
        assert w.pods["mx-scheduler-0"].deleting, finish
        w.set("mx-scheduler-0", delete_due=w.now)
        w.advance(w.settings.unfinished_delete.total_seconds())
        assert "mx-scheduler-0" in w.plan().delete_pods, finish


def test_a_scaled_down_replica_half_deleted_is_deleted_again_too() -> None:
    """The running path's pods that are no longer desired go through the same sweep as the
    others: a scale-down whose DELETE was cut off does not leave that pod stored for good."""
    w = running_world(mx_doc(workers=2))
    w.graceful = True  # what the scale-down deletes stays, `deleting`
    w.respec(mx_doc(workers=1))
    w.step()
    assert w.pods["mx-worker-1"].deleting
    w.set("mx-worker-1", delete_due=w.now)
    early = w.plan()
    assert "mx-worker-1" not in early.delete_pods and early.requeue_after is not None
    w.advance(w.settings.unfinished_delete.total_seconds())
    assert "mx-worker-1" in w.plan().delete_pods
