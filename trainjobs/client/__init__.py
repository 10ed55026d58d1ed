"""Python client of trainjobs: create, watch, wait for and delete jobs on a cluster.

`Client` for scripts and notebooks, `AsyncClient` for asyncio code; both take and return the
project's pydantic `Job` model. See docs/client.md.
"""

from __future__ import annotations

from trainjobs.api.models import Job
from trainjobs.client.aio import AsyncClient
from trainjobs.client.errors import (
    AmbiguousJob,
    ClientError,
    ClusterUnreachable,
    JobFailed,
    JobNotFound,
    LogsUnavailable,
    NeverReached,
    WaitTimeout,
)
from trainjobs.client.sync import Client
from trainjobs.client.views import JobEvent, PodInfo, ReplicaProgress, progress

__all__ = [
    "AmbiguousJob",
    "AsyncClient",
    "Client",
    "ClientError",
    "ClusterUnreachable",
    "Job",
    "JobEvent",
    "JobFailed",
    "JobNotFound",
    "LogsUnavailable",
    "NeverReached",
    "PodInfo",
    "ReplicaProgress",
    "WaitTimeout",
    "progress",
]
