"""What a kind declares it is, so that feature plugins act on what a job is, not on its kind's
name (since plugin API 1.9).

Why: a feature written for "jobs with TensorFlow parameter servers" or "jobs whose replicas meet
over Redis" must reach every kind that is so — Kubeflow's TFJob as well as TfJob, a third
party's kind as well as the built-in ones — without naming any of them. A kind lists its
capabilities in `Framework.capabilities`; a feature plugin asks
`ctx.framework.capability(TensorBoard)` and acts when it gets one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from trainjobs.api.models import Job, SpecModel
from trainjobs.plugin.cel import CelRule

__all__ = ["Capability", "ParameterServers", "RedisRendezvous", "TensorBoard",
           "TensorBoardSpec"]


@dataclass(frozen=True)
class Capability:
    """Base of every capability: one instance per capability in `Framework.capabilities`."""

    @property
    def cel_rules(self) -> tuple[CelRule, ...]:
        """Rules the capability adds to the kind's CRD, after `Framework.cel_rules`."""
        return ()


@dataclass(frozen=True)
class ParameterServers(Capability):
    """Replicas of `replica_type` are TensorFlow parameter servers that find their cluster in
    TF_CONFIG. One whose pod lacks the framework's container runs the standard TensorFlow gRPC
    server (the `tf_ps_server` feature plugin; make the type `container_optional` so that the
    core lets its template be left out)."""

    replica_type: str = "PS"


@dataclass(frozen=True)
class TensorBoard(Capability):
    """The kind's spec model has `tensorboard: TensorBoardSpec | None`; a job that sets it gets
    a TensorBoard Deployment and Service `<job>-tensorboard` (the `tensorboard` feature
    plugin)."""

    @property
    def cel_rules(self) -> tuple[CelRule, ...]:
        return (CelRule("!has(self.spec.tensorboard) || size(self.metadata.name) <= 51",
                        "metadata.name must have at most 51 characters with spec.tensorboard: "
                        "the Deployment <job>-tensorboard must fit in 63"),)


@dataclass(frozen=True)
class RedisRendezvous(Capability):
    """The replicas rendezvous through Redis. `managed(job)` is True when the job names no
    Redis of its own: the `managed_redis` feature plugin then runs one for the job and sets
    REDIS_HOST and REDIS_PORT in the replicas' framework container."""

    managed: Callable[[Job], bool] = field(compare=False)


class TensorBoardSpec(SpecModel):
    """A TensorBoard Deployment and Service `<job>-tensorboard` reading `logDir`."""

    log_dir: str = Field(description="Directory (usually on a shared volume) of the event files.")
    volumes: list[dict[str, Any]] = Field(default_factory=list,
                                          description="core/v1 Volumes for the TensorBoard pod.")
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list,
                                                description="core/v1 VolumeMounts.")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    image: str = Field(default="tensorflow/tensorflow:2.21.0",
                       description="Image that has the `tensorboard` command.")
