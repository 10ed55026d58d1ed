"""Kubernetes Events on jobs: creations, failures, restarts, completion.

Why best effort: an Event is for people (`kubectl describe`), never for correctness; failing to
write one is logged and otherwise ignored, so it can never stall a reconcile.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime

from trainjobs.api.models import Job
from trainjobs.kube import EVENTS, ApiError, Kube

__all__ = ["COMPONENT", "EventRecorder"]

log = logging.getLogger(__name__)
COMPONENT = "trainjobs-operator"


class EventRecorder:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def emit(self, job: Job, type_: str, reason: str, message: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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
            await self.kube.create(EVENTS, job.namespace, body)
        except ApiError as exc:
            log.debug("event %s for %s not recorded: %s", reason, job.key, exc)
