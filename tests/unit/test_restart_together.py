"""Replicas that restart together (Caffe2Job): one shard's retryable failure restarts every
shard as a new attempt with a new RUN_ID; the broken attempt's other failures are not
counted. Through the planner and the fake backend of planner_helpers."""

from __future__ import annotations

from trainjobs.api.models import ConditionType
from trainjobs.core.observed import GonePod, PodPhase

from .helpers import env_values
from .planner_helpers import World, c2_doc, mx_doc
from .test_planner import running_world as running

WORKERS = ["c2-worker-0", "c2-worker-1", "c2-worker-2"]


def run_ids(w: World) -> set[str]:
    return {env_values(p["spec"]["containers"][0])["RUN_ID"] for p in w.desired.pods.values()}


def test_one_shard_killed_restarts_every_shard_as_a_new_attempt() -> None:
    w = running(c2_doc(workers=3, restart="OnFailure", backoffLimit=1))
    assert run_ids(w) == {"00000000-0000-0000-0000-000000000000-0"}
    w.fail("c2-worker-1", exit_code=137)
    decision = w.step()
    assert sorted(decision.delete_pods) == WORKERS
    assert decision.create_pods == []  # nothing from the rendering of the attempt that ended
    assert w.status.attempt == 1
    assert w.restarts() == {"Worker": 1}
    assert w.state == "Restarting"
    assert [e.reason for e in decision.events] == ["ReplicaRestarting", "RestartingTogether"]
    assert run_ids(w) == {"00000000-0000-0000-0000-000000000000-1"}
    created = w.step()
    assert sorted(p["metadata"]["name"] for p in created.create_pods) == WORKERS
    assert {p["metadata"]["annotations"]["trainjobs.io/attempt"]
            for p in created.create_pods} == {"1"}
    w.run()
    w.step()
    w.succeed(*WORKERS)
    w.step()
    assert w.state == "Succeeded"
    assert w.restarts() == {"Worker": 1} and w.status.attempt == 1


def test_the_peers_failures_in_the_broken_attempt_are_not_counted_nor_permanent() -> None:
    # Gloo's peers abort (exit 1, or 134) as soon as one shard dies; with ExitCode, exit 1
    # would be permanent, and every failure a restart: one attempt ends, one restart counts.
    w = running(c2_doc(workers=3, restart="ExitCode", backoffLimit=1))
    w.fail("c2-worker-1", exit_code=137)
    w.fail("c2-worker-0", exit_code=1)
    w.fail("c2-worker-2", exit_code=134)
    w.step()
    assert w.state == "Restarting" and w.status.attempt == 1
    assert w.restarts() == {"Worker": 1}
    w.settle()
    assert w.status.attempt == 1 and w.restarts() == {"Worker": 1}
    assert sorted(w.pods) == WORKERS and all(p.attempt == 1 for p in w.pods.values())


def test_a_peer_that_fails_after_the_new_attempt_began_is_not_counted() -> None:
    w = running(c2_doc(workers=3, restart="OnFailure", backoffLimit=1), graceful=True)
    w.fail("c2-worker-1", exit_code=137)
    w.step()
    w.fail("c2-worker-0", exit_code=1)  # while it is being deleted, or not yet seen deleting
    w.set("c2-worker-0", deleting=False)
    decision = w.step()
    assert decision.events == [] or all(e.reason != "ReplicaRestarting" for e in decision.events)
    assert "c2-worker-0" in decision.delete_pods
    assert w.status.attempt == 1 and w.restarts() == {"Worker": 1}
    assert w.state == "Restarting"


def test_planning_the_same_state_twice_starts_one_attempt() -> None:
    w = running(c2_doc(workers=3, restart="OnFailure"), graceful=True)
    w.fail("c2-worker-2", exit_code=137)
    first, again = w.plan(), w.plan()
    assert first == again
    w.apply(first)
    # The failed pod is still visible (the cache lags): no second attempt, no second count.
    w.set("c2-worker-2", deleting=False)
    w.step()
    assert w.status.attempt == 1 and w.restarts() == {"Worker": 1}


def test_a_permanent_failure_alone_fails_the_job() -> None:
    w = running(c2_doc(workers=3, restart="ExitCode"))
    w.fail("c2-worker-1", exit_code=1)
    w.step()
    assert w.state == "Failed" and w.status.attempt == 0
    assert "exit code 1" in w.condition(ConditionType.FAILED).message


def test_backoff_limit_counts_attempts() -> None:
    w = running(c2_doc(workers=2, restart="OnFailure", backoffLimit=1))
    for attempt in (1, 2):
        w.fail("c2-worker-0", exit_code=137)
        w.fail("c2-worker-1", exit_code=1)
        w.step()
        if attempt == 2:
            break
        w.settle()
        w.run()
        w.step()
    assert w.state == "Failed"
    assert "2 restarts exceed backoffLimit 1" in w.condition(ConditionType.FAILED).message
    assert w.status.attempt == 1  # the attempt that would have followed never began


def test_a_disrupted_shard_restarts_all_without_counting() -> None:
    w = running(c2_doc(workers=3))  # restartPolicy Never: disruptions are still recreated
    w.fail("c2-worker-0", exit_code=None, reason="Preempted", disrupted=True)
    decision = w.step()
    assert sorted(decision.delete_pods) == WORKERS
    assert w.status.attempt == 1 and w.restarts() == {"Worker": 0}


def test_suspend_ends_the_attempt_and_resume_starts_the_next() -> None:
    doc = c2_doc(workers=2)
    w = running(doc)
    suspended = c2_doc(workers=2)
    suspended["spec"]["runPolicy"]["suspend"] = True
    w.respec(suspended)
    w.settle()
    assert w.state == "Suspended" and w.status.attempt == 1
    w.respec(doc)
    created = w.step().create_pods
    assert {p["metadata"]["annotations"]["trainjobs.io/attempt"] for p in created} == {"1"}


def test_kinds_whose_replicas_restart_alone_are_unchanged() -> None:
    w = running(mx_doc(workers=2, restart="OnFailure"))
    w.fail("mx-worker-1", exit_code=137)
    decision = w.step()
    assert decision.delete_pods == ["mx-worker-1"]
    assert w.status.attempt == 0
    assert all(p.phase is PodPhase.RUNNING for n, p in w.pods.items() if n != "mx-worker-1")


def test_a_shard_whose_pod_disappears_restarts_all_as_lost() -> None:
    """A preempted shard just vanishes (no Failed pod): its peers' Gloo group is broken too."""
    w = running(c2_doc(workers=3, backoffLimit=0))
    w.remove("c2-worker-1")
    w.lost_causes["c2-worker-1"] = GonePod("gone-uid", "PreemptionByScheduler: preempted")
    decision = w.step()
    assert sorted(decision.delete_pods) == ["c2-worker-0", "c2-worker-2"]
    assert decision.create_pods == []
    assert w.status.attempt == 1
    assert [e.reason for e in decision.events] == ["ReplicaLost", "RestartingTogether"]
    assert "PreemptionByScheduler" in decision.events[0].message
    worker = w.status.replica_statuses["Worker"]
    assert (worker.lost, worker.restarts) == (1, 0)
    assert w.state == "Restarting"
    created = w.step()  # the new attempt: every shard, and no second loss nor attempt
    assert sorted(p["metadata"]["name"] for p in created.create_pods) == WORKERS
    assert w.status.attempt == 1 and w.status.replica_statuses["Worker"].lost == 1
    w.run()
    w.step()
    assert w.state == "Running"
