"""The checkpoint gate: what the planner needs to checkpoint a job before it stops its pods
(issue 38), and the requests it hands out on the progress channel.

Why a gate: the planner decides when to ask and how long a stop waits (core/planner/
checkpoint.py: the same rules for `trainjobs run`); what it cannot know is which pod is the
kind's checkpointing replica (the `trainjobs_checkpoint_replica` hook), whether that replica
reports progress (asked in the reply to its reports, else by SIGTERM), and whether it has
answered. The request itself lives in `status.checkpointRequest`; the gate hands it out only
once the status that holds it is written (the job as the cache shows it), so its id and
deadline survive an operator restart: the next leader hands the same request out again, and
the library re-sends its answer to a request it has answered (trainjobs_progress).

Served on every operator: a job without `runPolicy.checkpointTimeoutSeconds` costs one
attribute read per pass. Without a progress endpoint (--progress-listen) every replica is
asked by SIGTERM.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from trainjobs.api.models import CheckpointMethod, CheckpointOutcome, Job, JobStatus
from trainjobs.core.checkpoint import CheckpointRequest
from trainjobs.core.observed import ObservedPod
from trainjobs.core.planner import CheckpointSeen
from trainjobs.core.render import RenderedJob
from trainjobs.kube.informer import Informer
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.gates.base import GateContext, Verdict
from trainjobs.operator.progress_store import ProgressStore
from trainjobs.operator.result import DONE, Result
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Framework

__all__ = ["CHECKPOINT", "CheckpointGate", "CheckpointGateFactory"]

log = logging.getLogger("trainjobs.operator.gates.checkpoint")

_NOTHING = Verdict()


class CheckpointGate:
    """Tells the planner of each job with checkpointTimeoutSeconds what it needs (see the
    module docstring)."""

    name = "checkpoint"

    def __init__(self, plugins: PluginManager, store: ProgressStore | None) -> None:
        self.plugins, self.store = plugins, store
        self._asking: dict[str, str] = {}  # job key -> uid whose request the store hands out

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return ()

    def watches_managed_by(self, manager: str) -> bool:
        return False

    async def decide(self, key: str, job: Job, framework: Framework, desired: RenderedJob,
                     pods: Sequence[ObservedPod]) -> Verdict:
        if job.spec.run_policy.checkpoint_timeout_seconds is None:
            self._stop_asking(key)
            return _NOTHING
        uid = job.metadata.uid or ""
        wanted = self.plugins.checkpoint_replica(job, framework)
        replica = wanted.object_name(job.name) if wanted is not None else ""
        self._hand_out(key, uid, job.status)
        store = self.store
        reporting = bool(replica) and (
            (store is not None and store.reports_from(uid, replica)) or
            (job.status.progress is not None and job.status.progress.replica == replica))
        saved = store.saved(uid) if store is not None else None
        return Verdict(inputs={"checkpoint": CheckpointSeen(replica, reporting, saved)})

    def _hand_out(self, key: str, uid: str, status: JobStatus) -> None:
        """The written status's pending request (asked by report) goes out in the replies to
        its replica; any other state takes it back."""
        request = status.checkpoint_request
        if self.store is None or request is None or \
                request.outcome is not CheckpointOutcome.PENDING or \
                request.method is not CheckpointMethod.REPORT:
            self._stop_asking(key)
            return
        if self._asking.get(key, uid) != uid:
            self._stop_asking(key)  # a new job of the same name
        self.store.ask(uid, CheckpointRequest(request.id, request.replica, request.attempt))
        self._asking[key] = uid

    def _stop_asking(self, key: str) -> None:
        uid = self._asking.pop(key, None)
        if uid is not None and self.store is not None:
            self.store.stop_asking(uid)

    def annotate(self, key: str, uid: str, status: JobStatus) -> JobStatus:
        return status

    async def job_gone(self, key: str) -> Result:
        self._stop_asking(key)
        return DONE

    def forget(self, key: str) -> None:
        self._stop_asking(key)


class CheckpointGateFactory:
    """Serves the checkpoint gate on every operator (it costs nothing to jobs that do not
    ask for checkpoints)."""

    name = "checkpoint"

    def watches(self, namespaces: Sequence[str | None], settings: ControllerSettings) -> int:
        return 0

    async def start(self, context: GateContext) -> CheckpointGate | None:
        if context.plugins is None:
            log.warning("checkpoints: no plugins given to the gates; jobs are not asked to "
                        "checkpoint before their pods stop")
            return None
        store = context.settings.progress
        log.info("checkpoints: jobs with runPolicy.checkpointTimeoutSeconds are asked to save "
                 "before their pods stop (%s)", "on the progress channel, else by SIGTERM"
                 if store is not None else "by SIGTERM: no --progress-listen")
        return CheckpointGate(context.plugins, store)


CHECKPOINT = CheckpointGateFactory()
