"""The leader's progress store (trainjobs/operator/progress_store.py): applies only while
active, keeps per job the furthest replica's view with the wall times of the last report and
of the last advance, refuses without changing anything, and stays bounded in jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.unit.controller_harness import T0, FakeClock
from trainjobs.core.progress import ProgressReport, ReportRefused
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
