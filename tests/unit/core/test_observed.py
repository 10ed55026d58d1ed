"""The observed view of a core/v1 Pod, and what a backoffLimit message says of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.unit.planner_helpers import World, tf_doc
from trainjobs.core.observed import PodPhase, from_pod
from trainjobs.core.planner import PlanInputs, plan


def _pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "tf-worker-0", "uid": "u1", "labels": {
        "trainjobs.io/replica-type": "worker", "trainjobs.io/replica-index": "0"}},
        "status": status}


def test_in_place_restart_keeps_the_last_exit() -> None:
    pod = from_pod(_pod(phase="Running", containerStatuses=[{
        "name": "tensorflow", "restartCount": 3, "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 42, "reason": "Error"}}}]), "tensorflow")
    assert pod is not None
    assert (pod.phase, pod.restarts, pod.last_exit_code, pod.last_reason) == (
        PodPhase.RUNNING, 3, 42, "Error")


def test_evicted_pod_is_a_disruption_and_not_a_replica_without_labels() -> None:
    evicted = from_pod(_pod(phase="Failed", reason="Evicted"), "tensorflow")
    assert evicted is not None and evicted.disrupted
    assert from_pod({"metadata": {"name": "x"}, "status": {}}, "tensorflow") is None


def test_backoff_limit_message_names_replica_and_last_exit_code() -> None:
    world = World.of(tf_doc(chief=0, workers=1, ps=0, restart="OnFailure", backoffLimit=2))
    world.settle()
    world.set("tf-worker-0", phase=PodPhase.RUNNING, restarts=3, last_exit_code=42,
              last_reason="Error")
    job = world.job
    decision = plan(job, world.desired, PlanInputs(list(world.pods.values()), world.services,
                                                   world.extras, now=datetime.now(UTC)),
                    lambda o: False)
    assert decision.status.state == "Failed"
    failed = next(c for c in decision.status.conditions if c.type == "Failed")
    assert failed.reason == "BackoffLimitExceeded"
    assert "replica Worker 0 (pod tf-worker-0) 3 times, last exit code 42 (Error)" in \
        failed.message
