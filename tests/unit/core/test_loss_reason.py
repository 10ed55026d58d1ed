"""A lost replica's status names why, as the API said it (issue 27.9): the pod's
DisruptionTarget reason (PreemptionByScheduler, EvictionByEvictionAPI, TerminationByKubelet,
...), a Failed pod's status reason (Evicted), Deleted when it went with no such reason
(kubectl delete pod), Disappeared when the operator did not see it go. The reason of the
latest loss per replica type stays in `lastLostReason` until another loss replaces it."""

from __future__ import annotations

import pytest

from tests.unit.planner_helpers import mx_doc, running_world
from trainjobs.core.observed import GonePod, from_pod, loss_reason


@pytest.mark.parametrize(("cause", "reason"), [
    ("PreemptionByScheduler: Preempted by pod 1234 on node n1", "PreemptionByScheduler"),
    ("EvictionByEvictionAPI: Eviction API: evicting", "EvictionByEvictionAPI"),
    ("TerminationByKubelet: The node was low on resource: memory.", "TerminationByKubelet"),
    ("DeletionByTaintManager", "DeletionByTaintManager"),
    ("Evicted: The node was low on resource: ephemeral-storage.", "Evicted"),
    ("deleted by someone other than the operator", "Deleted"),
    ("its pod is being deleted by someone other than the operator", "Deleted"),
    ("its pod disappeared (deleted, preempted or evicted by someone other than the "
     "operator)", "Disappeared"),
])
def test_the_reason_is_the_apis_word_where_it_said_one(cause: str, reason: str) -> None:
    assert loss_reason(cause) == reason


def _disrupted_pod(name: str, uid: str, reason: str, phase: str = "Running") -> dict[str, object]:
    return {"metadata": {"name": name, "uid": uid, "labels": {
                "trainjobs.io/replica-type": "worker", "trainjobs.io/replica-index": "1"}},
            "status": {"phase": phase, "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": reason,
                 "message": "taken"}]}}


def test_the_status_names_each_loss_and_keeps_the_last() -> None:
    w = running_world(mx_doc(workers=3))
    # Preempted: the backend saw the DisruptionTarget condition before the pod went.
    seen = from_pod(_disrupted_pod("mx-worker-1", w.pods["mx-worker-1"].uid,
                                   "PreemptionByScheduler"), "mxnet")
    assert seen is not None and seen.disruption.startswith("PreemptionByScheduler")
    w.remove("mx-worker-1")
    w.lost_causes["mx-worker-1"] = GonePod(seen.uid, seen.disruption)
    w.step()
    assert w.status.replica_statuses["Worker"].last_lost_reason == "PreemptionByScheduler"
    assert w.status.replica_statuses["Server"].last_lost_reason == ""
    w.run()
    w.step()  # no new loss: the reason stays
    assert w.status.replica_statuses["Worker"].last_lost_reason == "PreemptionByScheduler"
    # Deleted with kubectl: no DisruptionTarget, the operator saw it go.
    w.remove("mx-worker-2")
    w.lost_causes["mx-worker-2"] = GonePod("uid-2", "deleted by someone other than the operator")
    w.step()
    worker = w.status.replica_statuses["Worker"]
    assert (worker.last_lost_reason, worker.lost) == ("Deleted", 2)
    # A pod the kubelet ended Failed with a disruption (node pressure): its reason.
    w.run()
    w.step()
    failed = from_pod(_disrupted_pod("mx-worker-0", w.pods["mx-worker-0"].uid,
                                     "TerminationByKubelet", phase="Failed"), "mxnet")
    assert failed is not None and failed.disrupted
    w.pods["mx-worker-0"] = failed
    p = w.step()
    assert any("TerminationByKubelet" in e.message for e in p.events if e.reason == "ReplicaLost")
    worker = w.status.replica_statuses["Worker"]
    assert (worker.last_lost_reason, worker.lost, worker.restarts) == ("TerminationByKubelet", 3, 0)


def test_a_loss_the_operator_did_not_see_is_disappeared() -> None:
    w = running_world(mx_doc(workers=2))
    w.remove("mx-worker-0")  # gone while no operator watched: no GonePod
    w.step()
    assert w.status.replica_statuses["Worker"].last_lost_reason == "Disappeared"
