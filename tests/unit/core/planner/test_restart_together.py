"""Replicas that restart together (Caffe2Job): one shard's retryable failure restarts every
shard as a new attempt with a new RUN_ID; the broken attempt's other failures are not
counted. Through the planner and the fake backend of planner_helpers."""

from __future__ import annotations

from tests.unit.core.planner.test_planner import running_world as running
from tests.unit.helpers import env_values
from tests.unit.planner_helpers import World, c2_doc, mx_doc
from trainjobs.api.models import ConditionType
from trainjobs.core.deletions import DeleteReason, PodDeletion
from trainjobs.core.observed import GonePod, ObservedPod, PodPhase

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


def attempts(w: World) -> dict[str, int | None]:
    return {n: p.attempt for n, p in sorted(w.pods.items())}


def test_no_pod_of_the_next_attempt_while_one_of_the_last_still_runs() -> None:
    """The barrier (issue 29): a pod being deleted runs until its kubelet stops it (its grace
    period; slow under load); the next attempt's pods wait for every one of the last, then
    all come from one decision."""
    w = running(c2_doc(workers=3, restart="OnFailure"), graceful=True)
    w.fail("c2-worker-1", exit_code=137)
    w.step()
    assert w.status.attempt == 1 and all(p.deleting for p in w.pods.values())
    del w.pods["c2-worker-1"], w.pods["c2-worker-2"]  # gone; worker-0 still terminating
    assert w.pods["c2-worker-0"].phase is PodPhase.RUNNING
    decision = w.step()
    assert decision.create_pods == [] and decision.delete_pods == []
    assert w.state == "Restarting"
    w.gc()
    created = w.step().create_pods
    assert sorted(p["metadata"]["name"] for p in created) == WORKERS
    assert set(attempts(w).values()) == {1}


def test_a_finished_pod_of_an_earlier_attempt_may_linger_where_no_name_is_needed() -> None:
    w = running(c2_doc(workers=2, restart="OnFailure"))
    w.respec(c2_doc(workers=1, restart="OnFailure"))  # scaled down: a new attempt of one
    w.step()
    w.pods.clear()
    w.pods["c2-worker-1"] = ObservedPod("c2-worker-1", "u-old", "worker", 1, PodPhase.FAILED,
                                        attempt=0, exit_code=1, deleting=True)
    assert [p["metadata"]["name"] for p in w.plan().create_pods] == ["c2-worker-0"]
    w.set("c2-worker-1", phase=PodPhase.RUNNING)
    assert w.plan().create_pods == []  # but not while one still runs


def test_a_pod_of_an_attempt_that_is_over_going_is_no_loss() -> None:
    """The backend sees the last attempt's pods go (deleted by an operator since restarted,
    so not expected here): that is no loss of the new attempt, which must not end too."""
    w = running(c2_doc(workers=3, restart="OnFailure"))
    w.fail("c2-worker-1", exit_code=137)
    w.step()
    w.lost_causes = {n: GonePod(f"old-{n}", "deleted by someone other than the operator", 0)
                     for n in WORKERS}
    decision = w.step()
    assert sorted(p["metadata"]["name"] for p in decision.create_pods) == WORKERS
    assert w.status.attempt == 1 and "ReplicaLost" not in [e.reason for e in decision.events]
    assert w.status.replica_statuses["Worker"].lost == 0


def test_an_attempt_found_half_created_is_replaced_not_completed() -> None:
    """An operator restarted between two creates of an attempt (or a pod of it deleted
    before anyone saw it run): creating the rest would put two generations of one RUN_ID
    in one rendezvous. The attempt is given up: its pods go, then a fresh one starts."""
    w = running(c2_doc(workers=3, restart="OnFailure"))
    w.fail("c2-worker-1", exit_code=137)
    w.step()
    w.step()  # attempt 1 created
    del w.pods["c2-worker-2"]  # never created (or deleted before it ran)
    decision = w.step()
    assert decision.create_pods == []
    assert sorted(decision.delete_pods) == ["c2-worker-0", "c2-worker-1"]
    assert w.status.attempt == 2 and w.restarts() == {"Worker": 1}
    w.settle()
    assert attempts(w) == dict.fromkeys(WORKERS, 2)


def test_an_owed_pod_of_the_attempt_is_created_in_it() -> None:
    """The same operator's create that failed (a 500, a quota) is retried in the attempt."""
    w = running(c2_doc(workers=3, restart="OnFailure"))
    w.fail("c2-worker-1", exit_code=137)
    w.step()
    w.step()
    del w.pods["c2-worker-2"]
    w.owed = frozenset({"c2-worker-2"})
    decision = w.step()
    assert [p["metadata"]["name"] for p in decision.create_pods] == ["c2-worker-2"]
    assert decision.delete_pods == [] and w.status.attempt == 1


def test_a_pod_of_the_attempt_deleted_before_it_ran_starts_a_fresh_attempt() -> None:
    w = World.of(c2_doc(workers=2))
    w.step()  # created, still Pending: no index has started
    w.set("c2-worker-1", deleting=True)  # deleted by someone else
    decision = w.step()
    assert w.status.attempt == 1 and decision.create_pods == []
    assert decision.delete_pods == ["c2-worker-0"]


def test_pods_of_a_later_attempt_than_the_status_make_the_next_one_fresh() -> None:
    w = running(c2_doc(workers=2))
    w.set("c2-worker-1", attempt=4)
    w.step()
    assert w.status.attempt == 5
    w.settle()
    assert attempts(w) == dict.fromkeys(["c2-worker-0", "c2-worker-1"], 5)


def test_the_plan_says_why_each_pod_goes() -> None:
    """Issue 36: every deletion carries its reason; the live peers of the attempt that ends
    are pods the job still wanted, deleted because the next attempt begins, and why it does."""
    w = running(c2_doc(workers=3, restart="OnFailure"))
    w.fail("c2-worker-1", exit_code=137)
    why = w.step().deletions
    assert (why["c2-worker-1"].reason, why["c2-worker-1"].wanted) == (DeleteReason.FAILED, False)
    for name in ("c2-worker-0", "c2-worker-2"):
        assert why[name] == PodDeletion(DeleteReason.NEW_ATTEMPT, "attempt 1 begins: pod "
                                        "c2-worker-1 failed with exit code 137", wanted=True)


def test_a_broken_attempt_says_what_broke_it() -> None:
    w = World.of(c2_doc(workers=3))
    w.step()  # created, still Pending: no index has started
    w.set("c2-worker-2", deleting=True)  # deleted by someone else
    decision = w.step()
    assert sorted(decision.delete_pods) == ["c2-worker-0", "c2-worker-1"]
    assert {decision.deletions[n].detail for n in decision.delete_pods} == {
        "attempt 1 begins: attempt 0 is broken: pod c2-worker-2 is being deleted"}
    assert all(decision.deletions[n].wanted for n in decision.delete_pods)
