"""Python client of trainjobs: create, watch, wait for and delete jobs on a cluster.

`Client` for scripts and notebooks, `AsyncClient` for asyncio code; both take and return the
project's pydantic `Job` model. See docs/client.md.
"""

from __future__ import annotations

from trainjobs.api.models import Job
from trainjobs.client import errors
from trainjobs.client.aio import AsyncClient
from trainjobs.client.errors import *  # noqa: F403  (the client's errors, re-exported)
from trainjobs.client.sync import Client
from trainjobs.client.views import JobEvent, PodInfo, ReplicaProgress, progress

__all__ = [
    "AsyncClient",
    "Client",
    "Job",
    "JobEvent",
    "PodInfo",
    "ReplicaProgress",
    "progress",
    *errors.__all__,
]
