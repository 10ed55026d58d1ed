"""The progress gate: what the job's replicas report reaches its status, its metrics and the
stall rule.

Why a gate: progress does not decide admission, but it is what the planner needs besides the
pods to decide a stall (`PlanInputs.progress`), and what the status shows of training
(`status.progress`); a gate is the one place the controller asks about a job each pass, so the
controller knows nothing of reports (issue 34: a second gate is one module and one line in
`gates.FACTORIES`). Served only with `--progress-listen` (the operator's endpoint fills the
`ProgressStore` the gate reads; operator/progress_server.py).

A report asks for the job's next pass, at most once per `progress_status_interval` per job
(the status would not be written sooner: operator/status_write.py), so 5,000 jobs reporting
every few seconds cost a pass per job per interval, not one per report. After an operator
restart the store is empty until the replicas report again: the stall rule then reads what
the status kept (`status.progress.lastProgressTime`), so a restart neither forgets a stall's
clock nor restarts it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from trainjobs.api.models import Job, JobStatus, ProgressStatus
from trainjobs.core.observed import ObservedPod
from trainjobs.core.planner import ProgressSeen
from trainjobs.core.progress_status import progress_status
from trainjobs.core.render import RenderedJob
from trainjobs.kube.informer import Informer
from trainjobs.operator import metrics
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.gates.base import GateContext, Verdict
from trainjobs.operator.progress_store import ProgressStore
from trainjobs.operator.result import DONE, Result
from trainjobs.plugin.types import Framework

__all__ = ["PROGRESS", "ProgressGate", "ProgressGateFactory"]

log = logging.getLogger("trainjobs.operator.gates.progress")


class ProgressGate:
    """Reads the leader's `ProgressStore` for the controller (see the module docstring)."""

    name = "progress"

    def __init__(self, store: ProgressStore, context: GateContext) -> None:
        self.store, self.clock = store, context.clock
        self.enqueue, self.enqueue_after = context.enqueue, context.enqueue_after
        self.interval = context.settings.progress_status_interval
        self._uids: dict[str, str] = {}  # job key -> uid of the job the store knows
        self._passed: dict[str, float] = {}  # job key -> when its last pass read the store
        store.activate(self.on_report)

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return ()

    def watches_managed_by(self, manager: str) -> bool:
        return False

    def on_report(self, key: str, answered: bool = False) -> None:
        """An accepted report: the job's next pass, now if none read the store within the
        interval or it answered the job's checkpoint request (the stop waits for it), else
        when the interval is over (the queue keeps one timer per job: the reports meanwhile
        add nothing)."""
        passed = self._passed.get(key)
        waited = None if passed is None else self.clock.monotonic() - passed
        if answered or waited is None or waited >= self.interval:
            self.enqueue(key)
        else:
            self.enqueue_after(key, self.interval - waited)

    async def decide(self, key: str, job: Job, framework: Framework, desired: RenderedJob,
                     pods: Sequence[ObservedPod]) -> Verdict:
        uid = job.metadata.uid or ""
        if self._uids.get(key, uid) != uid:
            self.store.forget(self._uids[key])  # a new job of the same name
        self._uids[key] = uid
        self._passed[key] = self.clock.monotonic()
        return Verdict(inputs={"progress": self._seen(uid, job.status.progress)})

    def _seen(self, uid: str, kept: ProgressStatus | None) -> ProgressSeen | None:
        """What the planner's stall rule reads: the store's reports, or after an operator
        restart (nothing reported to this process yet) what the status kept."""
        stored = self.store.snapshot(uid)
        if stored is not None:
            board = stored.view
            return ProgressSeen(last_progress=stored.last_progress, step=board.step,
                                replica=board.replica, last_reports=stored.last_reports)
        if kept is None or kept.last_progress_time is None:
            return None
        return ProgressSeen(last_progress=kept.last_progress_time, step=kept.step,
                            replica=kept.replica,
                            last_reports={kept.replica: kept.last_report_time}
                            if kept.replica and kept.last_report_time else {})

    def annotate(self, key: str, uid: str, status: JobStatus) -> JobStatus:
        stored = self.store.snapshot(uid)
        if stored is None:
            return status
        progress = progress_status(stored.view, stored.last_report, stored.last_progress)
        if progress == status.progress:
            return status
        namespace, name = key.split("/", 2)[1:]  # the gauges move only with the status
        metrics.PROGRESS.observe(namespace, name, key.split("/", 1)[0], progress)
        return status.model_copy(update={"progress": progress})

    async def job_gone(self, key: str) -> Result:
        return DONE

    def forget(self, key: str) -> None:
        uid = self._uids.pop(key, None)
        if uid is not None:
            self.store.forget(uid)
        self._passed.pop(key, None)
        namespace, name = key.split("/", 2)[1:]
        metrics.PROGRESS.forget(namespace, name)


class ProgressGateFactory:
    """Serves the progress gate when the operator receives reports (--progress-listen)."""

    name = "progress"

    def watches(self, namespaces: Sequence[str | None], settings: ControllerSettings) -> int:
        return 0

    async def start(self, context: GateContext) -> ProgressGate | None:
        store = context.settings.progress
        if store is None:
            return None
        log.info("progress reports: the operator's endpoint feeds status.progress and the "
                 "stall rule (written at most every %gs per job)",
                 context.settings.progress_status_interval)
        return ProgressGate(store, context)


PROGRESS = ProgressGateFactory()
