"""Stalls (runPolicy.progressDeadlineSeconds): a Running job whose reported step has not
advanced for that long gets the Stalled condition, a Warning Event and the action it asked for;
a job without a deadline is never called stalled. Through the planner and planner_helpers'
fake backend, with its clock (`World.advance`)."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.planner_helpers import World, c2_doc, mx_doc, running_world
from trainjobs.api.models import Condition, ConditionType
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.planner import ProgressSeen

MX_PODS = ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]


def stalled(w: World) -> Condition | None:
    return next((c for c in w.status.conditions if c.type is ConditionType.STALLED), None)


def reported(w: World, step: int, ago: float = 0.0, replica: str = "mx-worker-0",
             others: dict[str, float] | None = None) -> None:
    """The replicas' reports as the backend hands them over: the step advanced `ago`
    seconds before the world's now; `others` maps replicas to their last report's age."""
    at = w.now - timedelta(seconds=ago)
    reports = {replica: at} | {r: w.now - timedelta(seconds=s) for r, s in (others or {}).items()}
    w.progress = ProgressSeen(last_progress=at, step=step, replica=replica, last_reports=reports)


def test_a_job_without_a_deadline_is_never_stalled_reporting_or_not() -> None:
    w = running_world(mx_doc(workers=2))
    w.advance(10 * 24 * 3600)
    assert w.step().requeue_after is None
    reported(w, step=5, ago=9 * 24 * 3600)
    w.step()
    assert stalled(w) is None and w.state == "Running"


def test_the_clock_starts_when_the_job_runs_and_moves_with_each_advance() -> None:
    w = running_world(mx_doc(workers=2, progressDeadlineSeconds=600))
    decision = w.step()
    assert decision.requeue_after == 600  # looked at again when the deadline would pass
    w.advance(500)
    reported(w, step=100)
    assert w.step().requeue_after == 600
    w.advance(599)
    w.step()
    assert stalled(w) is None
    w.advance(1)
    decision = w.step()
    cond = stalled(w)
    assert cond is not None and cond.status == "True" and cond.reason == \
        "ProgressDeadlineExceeded", cond
    assert "step 100" in cond.message and "mx-worker-0" in cond.message, cond.message
    assert [e.reason for e in decision.events] == ["ProgressDeadlineExceeded"]
    assert "action Report" in decision.events[0].message
    assert w.state == "Running" and decision.delete_pods == []  # Report: nothing more


def test_a_job_that_never_reports_stalls_from_when_it_started_running() -> None:
    w = running_world(mx_doc(workers=2, progressDeadlineSeconds=60))
    w.advance(60)
    w.step()
    cond = stalled(w)
    assert cond is not None and cond.status == "True"
    assert "no progress reported" in cond.message and "since the job started" in cond.message


def test_report_says_it_once_and_clears_when_the_step_advances() -> None:
    w = running_world(mx_doc(workers=2, progressDeadlineSeconds=60))
    reported(w, step=10, others={"mx-worker-1": 30})
    w.advance(61)
    first = w.step()
    assert [e.reason for e in first.events] == ["ProgressDeadlineExceeded"]
    assert "mx-worker-1 last reported" in stalled(w).message  # type: ignore[union-attr]
    w.advance(30)
    assert w.step().events == []  # still stalled: said once
    assert w.plan().actions == 0 and w.plan().status == w.status  # idempotent
    reported(w, step=11)
    w.step()
    cond = stalled(w)
    assert cond is not None and cond.status == "False" and cond.reason == "ProgressAdvanced"
    assert "step 11" in cond.message


def test_fail_fails_the_job_with_the_stall_named() -> None:
    w = running_world(mx_doc(workers=2, progressDeadlineSeconds=60,
                             progressDeadlineAction="Fail"))
    reported(w, step=3)
    w.advance(60)
    decision = w.step()
    assert w.state == "Failed"
    assert [e.reason for e in decision.events] == ["ProgressDeadlineExceeded"]  # one, not two
    failed = w.condition(ConditionType.FAILED)
    assert failed.reason == "ProgressDeadlineExceeded" and "step 3" in failed.message


def test_restart_recreates_every_pod_once_and_counts_one_restart() -> None:
    w = running_world(mx_doc(workers=2, progressDeadlineSeconds=60,
                             progressDeadlineAction="Restart", backoffLimit=3))
    reported(w, step=7, replica="mx-worker-0", others={"mx-worker-1": 50})
    w.advance(60)
    decision = w.step()
    assert sorted(decision.delete_pods) == MX_PODS
    assert {d.reason for d in decision.deletions.values()} == {DeleteReason.STALLED}
    assert w.state == "Restarting"
    assert w.restarts() == {"Scheduler": 0, "Server": 0, "Worker": 1}  # one, the quiet one's
    again = w.settle()
    assert sorted(w.pods) == MX_PODS and again.actions == 0
    w.run()
    w.step()
    assert w.state == "Running" and w.restarts()["Worker"] == 1
    w.step()  # (the pass after the write that said Running again)
    cond = stalled(w)
    assert cond is not None and cond.status == "False" and cond.reason == "Restarted"
    # The clock starts again with the new Running: no second stall before another minute.
    w.advance(59)
    assert w.step().delete_pods == []


def test_restart_is_counted_against_backoff_limit() -> None:
    w = running_world(mx_doc(workers=1, progressDeadlineSeconds=60,
                             progressDeadlineAction="Restart", backoffLimit=0))
    w.advance(60)
    w.step()
    assert w.state == "Failed"
    assert "1 restarts exceed backoffLimit 0" in w.condition(ConditionType.FAILED).message


def test_restart_of_replicas_that_restart_together_is_a_new_attempt() -> None:
    w = running_world(c2_doc(workers=2, progressDeadlineSeconds=60,
                             progressDeadlineAction="Restart"))
    w.advance(60)
    decision = w.step()
    assert sorted(decision.delete_pods) == ["c2-worker-0", "c2-worker-1"]
    assert {d.reason for d in decision.deletions.values()} == {DeleteReason.NEW_ATTEMPT}
    assert all("progressDeadlineSeconds" in d.detail for d in decision.deletions.values())
    assert w.status.attempt == 1 and w.restarts() == {"Worker": 1}
    w.settle()
    assert all(p.attempt == 1 for p in w.pods.values()) and len(w.pods) == 2


def test_removing_the_deadline_clears_the_condition() -> None:
    doc = mx_doc(workers=2, progressDeadlineSeconds=60)
    w = running_world(doc)
    w.advance(60)
    w.step()
    assert stalled(w).status == "True"  # type: ignore[union-attr]
    w.respec(mx_doc(workers=2))
    w.step()
    cond = stalled(w)
    assert cond is not None and cond.status == "False" and \
        cond.reason == "ProgressDeadlineRemoved"
