"""Checkpoint, then stop (runPolicy.checkpointTimeoutSeconds): before a stop of running pods the
planner asks the checkpointing replica, holds the stop's deletions while the request is
pending, stops that replica first and the rest once it is gone; a job that does not ask stops
as before. Through the planner and planner_helpers' fake backend, with its clock."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.planner_helpers import World, c2_doc, mx_doc, running_world, tf_doc
from trainjobs.api.models import CheckpointMethod, CheckpointOutcome
from trainjobs.core.admission import Admission, Eviction
from trainjobs.core.checkpoint import SavedCheckpoint
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.observed import PodPhase
from trainjobs.core.planner import CheckpointSeen, ProgressSeen
from trainjobs.core.render import render_job
from trainjobs.labels import ANNOTATION_CHECKPOINT_REQUEST

MX_PODS = ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]
SAVER = "mx-worker-0"  # MxJob: Worker 0 saves


def asking(w: World, reporting: bool = True, saver: str = SAVER) -> None:
    w.checkpoint = CheckpointSeen(saver, reporting=reporting)


def answered(w: World, step: int = 120, uri: str = "/ckpt/120") -> None:
    request = w.status.checkpoint_request
    assert request is not None
    w.checkpoint = CheckpointSeen(request.replica, True, SavedCheckpoint(
        request.id, step, uri, request.attempt, request.replica, w.now))


def suspend(w: World, doc: dict) -> None:  # type: ignore[type-arg]
    doc["spec"]["runPolicy"]["suspend"] = True
    w.respec(doc)


def events(decision: object) -> list[str]:
    return [e.reason for e in decision.events]  # type: ignore[attr-defined]


def test_a_job_without_the_timeout_stops_at_once_as_before() -> None:
    doc = mx_doc(workers=2)
    w = running_world(doc)
    asking(w)
    suspend(w, doc)
    decision = w.step()
    assert sorted(decision.delete_pods) == MX_PODS
    assert w.status.checkpoint_request is None and "CheckpointRequested" not in events(decision)


def test_suspend_asks_holds_everything_then_stops_the_saver_first() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    w = running_world(doc, graceful=True)
    asking(w)
    suspend(w, doc)
    first = w.step()
    assert first.delete_pods == [] and first.delete_services == []
    assert first.requeue_after == 0  # handed out once the request is written
    assert "CheckpointRequested" in events(first) and w.state == "Suspended"
    request = w.status.checkpoint_request
    assert request is not None and request.id == 1 and request.replica == SAVER
    assert request.method is CheckpointMethod.REPORT and request.reason == "Suspended"
    assert request.deadline == request.request_time + timedelta(seconds=60)
    assert request.outcome is CheckpointOutcome.PENDING
    w.advance(20)
    held = w.step()
    assert held.delete_pods == [] and held.requeue_after == 40 and held.events == []
    assert w.plan().actions == 0 and w.plan().status == w.status  # idempotent while waiting
    answered(w, step=120)
    saved = w.step()
    assert saved.delete_pods == [SAVER] and saved.delete_services == []
    assert saved.deletions[SAVER].reason is DeleteReason.SUSPENDED
    assert "CheckpointSaved" in events(saved)
    last = w.status.last_checkpoint
    assert last is not None and (last.step, last.uri, last.replica) == (120, "/ckpt/120", SAVER)
    assert w.status.checkpoint_request.outcome is CheckpointOutcome.SAVED  # type: ignore[union-attr]
    # The saver terminates: the rest wait for it (its save may need the scheduler/servers).
    again = w.step()
    assert again.delete_pods == [] and again.delete_services == []
    w.gc()
    rest = w.step()
    assert sorted(rest.delete_pods) == [p for p in MX_PODS if p != SAVER]
    assert rest.delete_services  # and the Services with them
    assert "CheckpointRequested" not in events(rest)  # asked once per stop


def test_a_silent_replica_costs_the_bound_then_everything_stops_at_once() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=30)
    w = running_world(doc)
    asking(w)
    suspend(w, doc)
    w.step()
    w.advance(29)
    assert w.step().delete_pods == []
    w.advance(1)
    decision = w.step()
    assert sorted(decision.delete_pods) == MX_PODS
    assert "CheckpointTimedOut" in events(decision)
    timed_out = next(e for e in decision.events if e.reason == "CheckpointTimedOut")
    assert "30s" in timed_out.message and "since its start" in timed_out.message
    assert w.status.checkpoint_request.outcome is CheckpointOutcome.TIMED_OUT  # type: ignore[union-attr]
    assert w.status.last_checkpoint is None


def test_a_replica_that_never_reported_is_asked_by_sigterm_its_pod_first() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    w = running_world(doc, graceful=True)
    asking(w, reporting=False)
    suspend(w, doc)
    first = w.step()
    assert first.delete_pods == [SAVER]  # SIGTERM is the ask
    assert w.status.checkpoint_request.method is CheckpointMethod.SIGNAL  # type: ignore[union-attr]
    assert w.step().delete_pods == []  # the rest wait while it terminates
    w.gc()
    decision = w.step()
    assert sorted(decision.delete_pods) == [p for p in MX_PODS if p != SAVER]
    assert "CheckpointStopped" in events(decision)


def test_a_stuck_terminating_saver_holds_the_rest_only_until_the_deadline() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    w = running_world(doc, graceful=True)
    asking(w, reporting=False)
    suspend(w, doc)
    w.step()
    w.advance(59)
    assert w.step().delete_pods == []
    w.advance(1)
    assert sorted(w.step().delete_pods) == [p for p in MX_PODS if p != SAVER]


def test_kueue_eviction_keeps_the_ps_until_the_chief_is_gone() -> None:
    w = running_world(tf_doc(chief=1, workers=1, ps=1, checkpointTimeoutSeconds=60),
                      graceful=True)
    asking(w, saver="tf-chief-0")
    w.admission = Admission(admitted=False, reason="Preempted", message="preempted",
                            eviction=Eviction("Preempted", "preempted by default/high"))
    first = w.step()
    assert first.delete_pods == [] and w.state == "Queued"
    assert w.status.checkpoint_request.reason == "Queued"  # type: ignore[union-attr]
    answered(w)
    assert w.step().delete_pods == ["tf-chief-0"]
    assert w.step().delete_pods == []  # PS and worker outlive the chief
    w.gc()
    assert sorted(w.step().delete_pods) == ["tf-ps-0", "tf-worker-0"]


def test_a_checkpoint_that_is_not_running_is_not_waited_for() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    w = running_world(doc)
    w.set(SAVER, phase=PodPhase.PENDING)
    asking(w)
    suspend(w, doc)
    decision = w.step()
    assert sorted(decision.delete_pods) == MX_PODS and w.status.checkpoint_request is None


def test_an_answer_to_another_request_is_not_taken() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    w = running_world(doc)
    asking(w)
    suspend(w, doc)
    w.step()
    w.checkpoint = CheckpointSeen(SAVER, True, SavedCheckpoint(7, 5, "/old", 0, SAVER, w.now))
    assert w.step().delete_pods == [] and w.status.last_checkpoint is None


def test_an_operator_restart_mid_wait_keeps_the_request_and_its_deadline() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    w = running_world(doc)
    asking(w)
    suspend(w, doc)
    w.step()
    before = w.status.checkpoint_request
    w.advance(45)
    w.checkpoint = CheckpointSeen(SAVER, reporting=False)  # a new process has heard nothing
    decision = w.step()
    assert decision.delete_pods == [] and decision.events == []
    assert w.status.checkpoint_request == before and decision.requeue_after == 15


def test_restart_together_asks_once_and_the_attempt_moves_once() -> None:
    w = running_world(c2_doc(workers=3, restart="OnFailure", checkpointTimeoutSeconds=60),
                      graceful=True)
    asking(w, saver="c2-worker-0")
    w.fail("c2-worker-2", exit_code=137)
    first = w.step()
    assert w.status.attempt == 1 and "c2-worker-0" not in first.delete_pods
    assert w.status.checkpoint_request.reason == "NewAttempt"  # type: ignore[union-attr]
    assert w.status.checkpoint_request.attempt == 0  # type: ignore[union-attr]
    for _ in range(3):
        w.advance(5)
        w.step()
        assert w.status.attempt == 1 and "c2-worker-0" in w.pods
    answered(w)
    w.step()
    w.gc()
    w.settle()
    assert sorted(w.pods) == ["c2-worker-0", "c2-worker-1", "c2-worker-2"]
    assert w.status.attempt == 1
    assert all(p.attempt == 1 for p in w.pods.values())


def test_a_stall_restart_waits_for_the_checkpoint_then_recreates_every_pod_once() -> None:
    w = running_world(mx_doc(workers=2, progressDeadlineSeconds=60,
                             progressDeadlineAction="Restart", checkpointTimeoutSeconds=60),
                      graceful=True)
    w.progress = ProgressSeen(last_progress=w.now, step=7, replica=SAVER,
                              last_reports={SAVER: w.now})
    asking(w)
    w.advance(60)
    first = w.step()
    assert first.delete_pods == [] and w.state == "Restarting"
    assert w.status.checkpoint_request.reason == "Stalled"  # type: ignore[union-attr]
    w.advance(5)
    assert w.step().delete_pods == []  # the stall's decision is remembered while it waits
    answered(w, step=7)
    assert w.step().delete_pods == [SAVER]
    w.gc()
    assert sorted(w.step().delete_pods) == [p for p in MX_PODS if p != SAVER]
    w.gc()
    w.settle()
    assert sorted(w.pods) == MX_PODS
    w.run()
    w.step()
    assert w.state == "Running" and w.restarts()["Worker"] == 1
    assert w.step().delete_pods == []  # the new pods are not the stall's


def test_a_user_request_asks_once_per_value_and_stops_nothing() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    doc["metadata"].setdefault("annotations", {})[ANNOTATION_CHECKPOINT_REQUEST] = "t1"
    w = running_world(doc)
    asking(w)
    w.respec(doc)
    first = w.step()
    assert first.delete_pods == [] and "CheckpointRequested" in events(first)
    assert w.status.observed_checkpoint_request == "t1"
    assert w.status.checkpoint_request.reason == "UserRequest"  # type: ignore[union-attr]
    answered(w, step=42)
    w.step()
    assert w.status.last_checkpoint.step == 42  # type: ignore[union-attr]
    assert "CheckpointRequested" not in events(w.step())  # the same value: not again
    doc["metadata"]["annotations"][ANNOTATION_CHECKPOINT_REQUEST] = "t2"
    w.respec(doc)
    assert "CheckpointRequested" in events(w.step())
    assert w.status.checkpoint_request.id == 2  # type: ignore[union-attr]


def test_a_user_request_of_a_replica_that_does_not_report_is_refused_in_an_event() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    doc["metadata"].setdefault("annotations", {})[ANNOTATION_CHECKPOINT_REQUEST] = "t1"
    w = running_world(doc)
    asking(w, reporting=False)
    w.respec(doc)
    decision = w.step()
    assert "CheckpointNotAsked" in events(decision) and decision.delete_pods == []
    assert w.status.checkpoint_request is None


def test_the_deadline_asks_the_margin_before_and_still_fails_on_time() -> None:
    w = running_world(mx_doc(workers=2, activeDeadlineSeconds=600,
                             checkpointTimeoutSeconds=60))
    asking(w)
    assert w.step().requeue_after == 540  # looked at again when it is time to ask
    w.advance(539)
    assert "CheckpointRequested" not in events(w.step())
    w.advance(1)
    asked = w.step()
    assert "CheckpointRequested" in events(asked) and asked.delete_pods == []
    assert w.status.checkpoint_request.reason == "ActiveDeadline"  # type: ignore[union-attr]
    answered(w, step=900)
    w.step()
    w.advance(60)
    w.step()
    assert w.state == "Failed" and w.status.last_checkpoint.step == 900  # type: ignore[union-attr]


def test_the_next_pods_start_from_the_last_checkpoint() -> None:
    doc = mx_doc(workers=2, checkpointTimeoutSeconds=60)
    w = running_world(doc)
    asking(w)
    suspend(w, doc)
    w.step()
    answered(w, step=120, uri="s3://bucket/ckpt-120")
    w.settle()
    doc["spec"]["runPolicy"]["suspend"] = False
    w.respec(doc)
    w.settle()
    desired = render_job(w.job, w.framework, w.plugins)
    for pod in desired.pods.values():
        for container in pod["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            assert env["TRAINJOBS_CHECKPOINT_STEP"] == "120"
            assert env["TRAINJOBS_CHECKPOINT_URI"] == "s3://bucket/ckpt-120"
