"""What a status means (trainjobs/core/status.py): finished, state, a job failed outright, and
which changes are written at once rather than coalesced (issue 28: a Worker that succeeded was
written at once, so Workers ending 0.01 s apart cost a status write each and
`--status-coalesce 30` no longer coalesced them)."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.planner_helpers import World, running_world, tf_doc
from trainjobs.api.models import JobStatus
from trainjobs.core.status import failed, is_finished, must_write_now, state_of
from trainjobs.core.status import replicas_forgotten as _replicas_forgotten


def test_a_replica_that_succeeds_is_a_count_change_that_may_wait() -> None:
    w = running_world(tf_doc(chief=1, workers=3, ps=0))
    before = w.status
    w.succeed(*w.pod_names("Worker")[:1])
    after = w.plan().status
    assert after.replica_statuses["Worker"].completed_indexes == "0"
    assert after.replica_statuses["Worker"].started_indexes == "1-2"
    assert not _replicas_forgotten(before, after)


def test_a_started_index_that_goes_without_succeeding_is_written_at_once() -> None:
    w = running_world(tf_doc(chief=1, workers=3, ps=0))
    before = w.status
    w.remove(w.pod_names("Worker")[1])  # lost: its index is no longer started
    after = w.plan().status
    assert after.replica_statuses["Worker"].started_indexes == "0,2"
    assert _replicas_forgotten(before, after)


def test_a_replica_that_fails_and_is_recreated_is_written_at_once() -> None:
    w = running_world(tf_doc(chief=1, workers=3, ps=0, restart="OnFailure"))
    before = w.status
    w.fail(w.pod_names("Worker")[2], exit_code=137)
    after = w.plan().status
    assert after.replica_statuses["Worker"].started_indexes == "0-1"
    assert after.replica_statuses["Worker"].completed_indexes == ""
    assert _replicas_forgotten(before, after)


def test_failing_a_job_outright_leaves_one_exclusive_condition_true() -> None:
    w = running_world(tf_doc(chief=1, workers=1, ps=0))
    now = w.now + timedelta(seconds=30)
    out = failed(w.status, "NameConflict", "Pod tf-worker-0 is someone else's", now, 3)
    assert out.state == "Failed" and is_finished(out)
    assert [c.type.value for c in out.conditions if c.status == "True"] == \
        ["Created", "Failed"]
    running = next(c for c in out.conditions if c.type.value == "Running")
    assert running.status == "False" and running.last_transition_time == now
    assert out.completion_time == now and out.start_time == w.status.start_time
    assert out.observed_generation == 3
    assert state_of(out.conditions) == "Failed"


def test_finished_is_read_from_the_state_or_the_conditions() -> None:
    assert is_finished(JobStatus(state="Succeeded"))
    assert not is_finished(JobStatus(state="Running"))
    w = running_world(tf_doc(chief=1, workers=1, ps=0))
    w.succeed(*w.pod_names())
    w.step()
    by_conditions = w.status.model_copy(update={"state": ""})
    assert is_finished(by_conditions)


def test_what_is_written_at_once() -> None:
    w = World.of(tf_doc(chief=1, workers=2, ps=0))
    first = w.plan().status
    assert first.state == "Created"
    assert not must_write_now(w.status, first)  # a new job's first status may wait
    w.apply(w.plan())
    w.run()
    running = w.plan().status
    assert must_write_now(w.status, running)  # Running: a new state
    w.apply(w.plan())
    w.succeed(w.pod_names("Worker")[0])
    counts = w.plan().status
    assert not must_write_now(w.status, counts)  # counts only


def test_progress_alone_is_never_urgent_and_is_told_apart() -> None:
    from trainjobs.api.models import ProgressStatus
    from trainjobs.core.status import progress_only
    base = JobStatus(state="Running", replica_summary="Worker 1/1")
    moved = base.model_copy(update={"progress": ProgressStatus(step=5, replica="w-0")})
    assert progress_only(base, moved) and not must_write_now(base, moved)
    both = moved.model_copy(update={"replica_summary": "Worker 0/1"})
    assert not progress_only(base, both)  # written as any other change, progress along
    assert not progress_only(moved, moved)  # no change at all
