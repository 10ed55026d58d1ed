"""The leader's progress store (trainjobs/operator/progress_store.py): applies only while
active, keeps per job the furthest replica's view with the wall times of the last report and
of the last advance, refuses without changing anything, and stays bounded in jobs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.unit.controller_harness import T0, FakeClock
from trainjobs.core.checkpoint import CheckpointRequest
from trainjobs.core.progress import CheckpointAck, ProgressReport, ReportRefused
from trainjobs.operator.progress_store import ProgressStore


def report(step: int, uid: str = "u1", job: str = "mnist", replica: str = "mnist-worker-0",
           session: str = "s1", **metrics: float) -> ProgressReport:
    return ProgressReport(namespace="ns", job=job, uid=uid, replica=replica,
                          replica_type="Worker", replica_index=0, attempt=0, session=session,
                          seq=1, step=step, total=100, epoch=None, metrics=metrics)


def active_store(clock: FakeClock, max_jobs: int = 10_000) -> tuple[ProgressStore, list[str]]:
    store = ProgressStore(clock, max_jobs=max_jobs)
    seen: list[str] = []
    store.activate(lambda key, answered: seen.append(key))
    return store, seen


def test_an_inactive_store_refuses_with_503_and_keeps_nothing() -> None:
    store = ProgressStore(FakeClock())
    assert not store.active
    with pytest.raises(ReportRefused) as caught:
        store.apply(report(1), "MxJob/ns/mnist")
    assert caught.value.status == 503
    assert store.snapshot("u1") is None


def test_snapshot_times_last_report_and_last_advance() -> None:
    clock = FakeClock()
    store, seen = active_store(clock)
    store.apply(report(10, loss=0.5), "MxJob/ns/mnist")
    clock.advance(30)
    store.apply(report(10, loss=0.4), "MxJob/ns/mnist")  # no advance
    snap = store.snapshot("u1")
    assert snap is not None
    assert snap.view.step == 10 and snap.view.metrics == {"loss": 0.4}
    assert snap.last_report == T0 + timedelta(seconds=30)
    assert snap.last_progress == T0
    assert snap.last_report.tzinfo is not None
    clock.advance(10)
    store.apply(report(20), "MxJob/ns/mnist")
    snap = store.snapshot("u1")
    assert snap is not None and snap.last_progress == T0 + timedelta(seconds=40)
    assert snap.view.reports == 3
    assert seen == ["MxJob/ns/mnist"] * 3


def test_a_refused_report_changes_nothing_and_calls_nobody() -> None:
    clock = FakeClock()
    store, seen = active_store(clock)
    store.apply(report(50), "MxJob/ns/mnist")
    clock.advance(5)
    with pytest.raises(ReportRefused) as caught:
        store.apply(report(40), "MxJob/ns/mnist")
    assert caught.value.status == 409
    snap = store.snapshot("u1")
    assert snap is not None and snap.view.step == 50 and snap.last_report == T0
    assert seen == ["MxJob/ns/mnist"]


def test_the_store_is_bounded_evicting_the_job_idle_longest() -> None:
    clock = FakeClock()
    store, _ = active_store(clock, max_jobs=3)
    for uid in ("a", "b", "c"):
        store.apply(report(1, uid=uid), f"MxJob/ns/{uid}")
        clock.advance(1)
    store.apply(report(2, uid="a"), "MxJob/ns/a")  # a is fresh again; b idles longest
    store.apply(report(1, uid="d"), "MxJob/ns/d")
    assert len(store) == 3 and store.evicted == 1
    assert store.snapshot("b") is None
    assert all(store.snapshot(uid) is not None for uid in ("a", "c", "d"))


def test_forget_and_deactivate_drop_reports() -> None:
    store, _ = active_store(FakeClock())
    store.apply(report(1, uid="a"), "MxJob/ns/a")
    store.apply(report(1, uid="b"), "MxJob/ns/b")
    store.forget("a")
    assert store.snapshot("a") is None and store.snapshot("b") is not None
    store.deactivate()
    assert not store.active and store.snapshot("b") is None


def ack(step: int, rid: int, uid: str = "u1", replica: str = "mnist-worker-0",
        attempt: int = 0) -> ProgressReport:
    return replace(report(step, uid=uid, replica=replica), attempt=attempt,
                    checkpoint=CheckpointAck(rid, step, f"/ckpt/{step}"))


def test_a_checkpoint_request_goes_only_to_its_replica_until_answered() -> None:
    store, _ = active_store(FakeClock())
    answered: list[bool] = []
    store.activate(lambda key, done: answered.append(done))
    assert store.apply(report(1), "MxJob/ns/mnist") is None  # nothing asked yet
    store.ask("u1", CheckpointRequest(3, "mnist-worker-0", 0))
    assert store.apply(report(2), "MxJob/ns/mnist") == {"id": 3}
    assert store.apply(report(2, replica="mnist-worker-1"), "MxJob/ns/mnist") is None
    assert store.reports_from("u1", "mnist-worker-0")
    assert not store.reports_from("u1", "mnist-worker-9")
    # A wrong id, another attempt, another replica: refused, nothing changes.
    for bad in (ack(3, rid=2), ack(3, rid=3, attempt=1), ack(3, rid=3, replica="mnist-worker-1")):
        with pytest.raises(ReportRefused) as caught:
            store.apply(bad, "MxJob/ns/mnist")
        assert caught.value.status == 409
    assert store.saved("u1") is None and answered == [False, False, False]
    assert store.apply(ack(4, rid=3), "MxJob/ns/mnist") is None  # answered: asked no more
    saved = store.saved("u1")
    assert saved is not None and (saved.id, saved.step, saved.uri) == (3, 4, "/ckpt/4")
    assert answered[-1] is True  # the job's pass comes now, not after the interval
    store.ask("u1", CheckpointRequest(3, "mnist-worker-0", 0))  # the gate, not yet told
    assert store.apply(report(5), "MxJob/ns/mnist") is None
    store.stop_asking("u1")
    with pytest.raises(ReportRefused, match="no checkpoint is outstanding"):
        store.apply(ack(6, rid=3), "MxJob/ns/mnist")  # a late answer
    assert store.saved("u1") is None


def test_an_answer_with_no_request_is_refused_and_deactivate_forgets_requests() -> None:
    store, _ = active_store(FakeClock())
    with pytest.raises(ReportRefused) as caught:
        store.apply(ack(1, rid=1), "MxJob/ns/mnist")
    assert caught.value.status == 409 and store.snapshot("u1") is None
    store.ask("u1", CheckpointRequest(1, "mnist-worker-0", 0))
    store.deactivate()
    store.activate(lambda key, done: None)
    assert store.apply(report(1), "MxJob/ns/mnist") is None  # a new leader asks again itself


def test_the_snapshot_says_when_each_replica_last_reported() -> None:
    clock = FakeClock()
    store, _ = active_store(clock)
    store.apply(report(1, replica="mnist-worker-1"), "MxJob/ns/mnist")
    first = clock.now()
    clock.advance(40)
    store.apply(report(5), "MxJob/ns/mnist")
    stored = store.snapshot("u1")
    assert stored is not None
    assert stored.last_reports == {"mnist-worker-1": first, "mnist-worker-0": clock.now()}
