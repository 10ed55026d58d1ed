"""Which status changes the controller writes at once and which wait for the coalescing
(issue 28: a Worker that succeeded was written at once, so Workers ending 0.01 s apart cost a
status write each and `--status-coalesce 30` no longer coalesced them)."""

from __future__ import annotations

from trainjobs.operator.controller import _replicas_forgotten

from .planner_helpers import running_world, tf_doc


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
