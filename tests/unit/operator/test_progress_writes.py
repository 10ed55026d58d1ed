"""When status.progress is written (issue 37.4): a change of progress alone at most once per
interval per job and within the global budget; any other change carries it for free; what a
newer progress dropped is removed on the API server; the planner keeps it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.unit.controller_harness import T0, TFJOBS, Harness, running_controller
from tests.unit.helpers import PLUGINS
from trainjobs.api.models import Job, JobStatus, ProgressStatus
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.status_write import StatusWrite


async def _running(h: Harness, name: str = "tf") -> None:
    h.submit(name)
    await h.reconcile(name)
    for pod in h.pod_names():
        if pod.startswith(f"{name}-"):
            h.set_pod(pod, "Running")
    await h.reconcile(name)
    assert h.status(name)["state"] == "Running"


def _job(h: Harness, name: str) -> Job:
    mem = h.memory(name)
    assert mem is not None and mem.parsed is not None and mem.parsed.packed is not None
    return mem.parsed.packed.unpack().model_copy(
        update={"status": JobStatus.model_validate(h.status(name))})


def progress(step: int, **fields: Any) -> ProgressStatus:
    doc: dict[str, Any] = {"step": step, "totalSteps": 100, "percent": float(step),
                           "etaSeconds": 100 - step, "summary": f"{step}/100 ({step}%)",
                           "metrics": {"loss": 1.0 / (step + 1)}, "replica": "tf-worker-0",
                           "lastReportTime": T0.isoformat(), "lastProgressTime": T0.isoformat()}
    doc.update(fields)
    return ProgressStatus.model_validate({k: v for k, v in doc.items() if v is not None})


async def report(h: Harness, p: ProgressStatus, name: str = "tf",
                 **changes: Any) -> StatusWrite:
    """What the progress gate will do: the job's status with `p` (and `changes`) written."""
    job = _job(h, name)
    mem = h.memory(name)
    assert mem is not None
    new = job.status.model_copy(update={"progress": p, **changes})
    fw = PLUGINS.framework_for("TfJob")
    assert fw is not None
    write = await h.controller.writer.write(mem, job, fw, TFJOBS, new)
    await h.sync()
    return write


async def test_progress_alone_at_most_once_per_interval() -> None:
    async with running_controller(status_coalesce_seconds=1.0, progress_status_interval=30.0,
                                  progress_status_writes_per_second=20.0) as h:
        await _running(h)
        writes = h.status_writes()
        first = await report(h, progress(10))
        assert first.written is not None and h.status_writes() == writes + 1  # at once
        assert h.status()["progress"]["step"] == 10
        h.clock.advance(10)
        waiting = await report(h, progress(20))
        assert waiting == StatusWrite(wait=20.0) and h.status_writes() == writes + 1
        h.clock.advance(19.9)
        assert (await report(h, progress(30))).wait is not None
        h.clock.advance(0.1)
        assert (await report(h, progress(40))).written is not None
        assert h.status_writes() == writes + 2
        assert h.status()["progress"]["step"] == 40  # the newest, not the one that waited


async def test_the_global_budget_spreads_jobs_into_turns() -> None:
    async with running_controller(status_coalesce_seconds=0.0, progress_status_interval=5.0,
                                  progress_status_writes_per_second=1.0) as h:
        for name in ("a", "b", "c"):
            await _running(h, name)
        writes = h.status_writes()
        results = [await report(h, progress(1), name) for name in ("a", "b", "c")]
        assert results[0].written is not None
        assert [r.wait for r in results[1:]] == [1.0, 2.0]  # each its own turn
        assert h.status_writes() == writes + 1
        budget = h.controller.writer.progress_budget
        h.clock.advance(1.0)
        left = budget.available()
        # b's turn has come: written without asking the budget again; c still waits.
        assert (await report(h, progress(2), "b")).written is not None
        assert (await report(h, progress(2), "c")).wait == 1.0
        assert budget.available() == left
        h.clock.advance(1.0)
        assert (await report(h, progress(3), "c")).written is not None
        assert h.status_writes() == writes + 3
        assert [h.status(n)["progress"]["step"] for n in "abc"] == [1, 2, 3]


async def test_another_change_carries_progress_for_free() -> None:
    async with running_controller(status_coalesce_seconds=0.0, progress_status_interval=30.0,
                                  progress_status_writes_per_second=1.0) as h:
        await _running(h)
        await report(h, progress(10))
        writes, budget = h.status_writes(), h.controller.writer.progress_budget
        assert budget.available() == 0.0  # the first write took the one token
        h.clock.advance(5)
        assert (await report(h, progress(20))).wait == 25.0
        # A change that is written anyway (here a new attempt) takes the newest progress along.
        written = await report(h, progress(30), attempt=1)
        assert written.written is not None and h.status_writes() == writes + 1
        assert h.status()["progress"]["step"] == 30 and h.status()["attempt"] == 1
        assert budget.available() == 1.0  # refilled to its burst: nothing taken since
        # ... and the interval counts from that write.
        h.clock.advance(29)
        assert (await report(h, progress(40), attempt=1)).wait == 1.0


async def test_what_a_newer_progress_dropped_is_removed() -> None:
    async with running_controller(status_coalesce_seconds=0.0,
                                  progress_status_interval=0.0) as h:
        await _running(h)
        await report(h, progress(10, metrics={"loss": 0.5, "acc": 0.7}))
        assert set(h.status()["progress"]["metrics"]) == {"loss", "acc"}
        await report(h, progress(11, etaSeconds=None, metrics={"loss": 0.4}))
        body = h.kube.made("PATCH", "TfJob")[-1].body
        assert body is not None
        sent = body["status"]["progress"]
        assert sent["etaSeconds"] is None and sent["metrics"] == {"loss": 0.4, "acc": None}
        stored = h.status()["progress"]
        assert "etaSeconds" not in stored and stored["metrics"] == {"loss": 0.4}


async def test_the_planner_keeps_progress_through_other_writes() -> None:
    async with running_controller(status_coalesce_seconds=0.0) as h:
        await _running(h)
        await report(h, progress(10, lastReportTime=(T0 + timedelta(seconds=3)).isoformat()))
        h.set_pod("tf-worker-0", "Succeeded", exit_code=0)
        writes = h.status_writes()
        await h.reconcile("tf")
        assert h.status_writes() == writes + 1
        status = h.status()
        assert status["replicaStatuses"]["Worker"]["succeeded"] == 1
        assert status["progress"]["step"] == 10
        assert status["progress"]["lastReportTime"] == "2024-01-01T12:00:03Z"


async def test_the_settings_reach_the_writer() -> None:
    assert (ControllerSettings().progress_status_interval,
            ControllerSettings().progress_status_writes_per_second) == (30.0, 20.0)
    async with running_controller(progress_status_interval=7.0,
                                  progress_status_writes_per_second=3.0) as h:
        writer = h.controller.writer
        assert writer.progress_interval == 7.0
        assert (writer.progress_budget.rate, writer.progress_budget.burst) == (3.0, 3.0)
