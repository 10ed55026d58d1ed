"""What the client raises beyond the API error tree (`trainjobs.kube.errors`).

Why separate classes: a notebook or script reacts differently to "the cluster is not there",
"no such job", "the job failed" and "it took too long"; the CLI maps each to its own exit code.
API refusals (403, 409 AlreadyExists, 422 Invalid...) stay the typed `ApiError`s they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainjobs.errors import TrainjobsError

if TYPE_CHECKING:
    from trainjobs.api.models import Job

__all__ = [
    "AmbiguousJob",
    "CheckpointRefused",
    "ClientError",
    "ClusterUnreachable",
    "JobFailed",
    "JobNotFound",
    "LogsUnavailable",
    "NeverReached",
    "PodsElsewhere",
    "WaitTimeout",
]


class ClientError(TrainjobsError):
    """Base of the client's own errors."""


class ClusterUnreachable(ClientError):
    """No kubeconfig (nor in-cluster account), or the API server did not answer."""


class JobNotFound(ClientError):
    """No job of that name (of any installed kind, unless one was named) in the namespace."""


class AmbiguousJob(ClientError):
    """Jobs of several kinds have that name; name one as KIND/NAME."""


class CheckpointRefused(ClientError):
    """The job cannot be asked for a checkpoint: it has finished, is suspended, does not set
    spec.runPolicy.checkpointTimeoutSeconds, or runs in another cluster (MultiKueue)."""


class LogsUnavailable(ClientError):
    """The cluster cannot serve the pod's log (no kubelet behind the node, as with KWOK, or
    the container has not started)."""


class PodsElsewhere(LogsUnavailable):
    """The job is managed by another controller (Kueue's MultiKueue): its pods run in a worker
    cluster, not in this one; the message names the worker when the Workload does."""


class _JobError(ClientError):
    def __init__(self, message: str, job: Job) -> None:
        super().__init__(message)
        self.job = job


class WaitTimeout(_JobError):
    """The condition was not reached in time; `job` is the last version seen."""


class JobFailed(_JobError):
    """The job Failed while something else was awaited; `job` says why (its conditions)."""


class NeverReached(_JobError):
    """The job finished in a state from which the awaited condition can never come."""
