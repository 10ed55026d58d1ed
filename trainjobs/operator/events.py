"""Kubernetes Events on jobs: creations, failures, restarts, completion — posted off the reconcile.

Why a poster (kopf's `posting.py`): an Event is for people (`kubectl describe`), never for
correctness. A reconcile only puts it on a bounded queue (`post`, no I/O, never blocks) and a
few poster tasks write it; so a slow or refusing API server delays Events, never a job's
reconcile. When the queue is full the Event is dropped and counted
(`trainjobs_events_dropped_total`): one tenant's burst of Events cannot grow the operator's
memory. Failing to write one is logged at debug and otherwise ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from trainjobs.api.models import Job
from trainjobs.kube import EVENTS, ApiError, Kube
from trainjobs.operator import metrics
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock

__all__ = ["COMPONENT", "EventRecorder"]

log = logging.getLogger(__name__)
COMPONENT = "trainjobs-operator"
#: Events waiting to be written; beyond it they are dropped (and counted).
DEFAULT_CAPACITY = 2048
#: Events written at once: the API server answers a create in milliseconds, so a few posters
#: keep up with thousands of jobs starting together.
DEFAULT_POSTERS = 4


class EventRecorder:
    """Queues Events for jobs (`post`) and writes them (`run`, a task of the operator's)."""

    def __init__(self, kube: Kube, clock: Clock = SYSTEM_CLOCK,
                 capacity: int = DEFAULT_CAPACITY, posters: int = DEFAULT_POSTERS) -> None:
        self.kube = kube
        self.clock = clock
        self.posters = posters
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(capacity)

    def post(self, job: Job, type_: str, reason: str, message: str) -> None:
        """Queue one Event about `job`, stamped now; dropped (and counted) when the queue is
        full."""
        now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{job.name}.{os.urandom(8).hex()}", "namespace": job.namespace},
            "involvedObject": {"apiVersion": job.api_version, "kind": job.kind, "name": job.name,
                               "namespace": job.namespace, "uid": job.metadata.uid},
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": os.environ.get("HOSTNAME", COMPONENT),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._queue.put_nowait((job.key, body))
        except asyncio.QueueFull:
            metrics.EVENTS_DROPPED.inc()
            log.debug("event %s for %s dropped: %d events wait already", reason, job.key,
                      self._queue.qsize())

    async def run(self) -> None:
        """Write queued Events until cancelled."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self.posters):
                group.create_task(self._post_forever())

    async def _post_forever(self) -> None:
        while True:
            key, body = await self._queue.get()
            try:
                await self.kube.create(EVENTS, body["metadata"]["namespace"], body)
            except ApiError as exc:
                log.debug("event %s for %s not recorded: %s", body["reason"], key, exc)
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Until every Event queued so far is written (or refused): for tests and shutdown."""
        await self._queue.join()

    async def close(self, timeout: float = 2.0) -> None:
        """Give the queued Events `timeout` seconds to go out (an operator stopping)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), timeout)
