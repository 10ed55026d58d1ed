"""The Caffe2Job kind: data-parallel shards that rendezvous through Redis or a shared directory.

Environment contract (docs/api.md, "Environment contracts"), in the `caffe2` container:
SHARD_ID, NUM_SHARDS, RUN_ID (`<job uid>-<attempt>`: one per attempt; the shards restart
together), REDIS_HOST/REDIS_PORT (redis backend) or NFS_PATH (nfs backend), and CAFFE2_CONFIG.
The backend defaults to `none` for one worker and `redis` otherwise; a redis backend without
`redisHost` gets a managed Redis (the `managed_redis` feature plugin). The job succeeds when
every worker has succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from trainjobs.plugin import (
    CelRule,
    Framework,
    FrameworkPlugin,
    Job,
    JobSpec,
    RedisRendezvous,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
    ReplicaType,
    SpecError,
    SpecModel,
)

__all__ = ["CAFFE2", "BackendSpec", "Caffe2JobSpec", "Caffe2Plugin", "effective_backend",
           "plugin", "run_id", "wants_managed_redis"]

PLACEHOLDER_RUN_ID = "00000000-0000-0000-0000-000000000000"


class BackendSpec(SpecModel):
    """Where the shards rendezvous."""

    type: Literal["none", "redis", "nfs"] | None = Field(
        default=None, description="none, redis or nfs; default none for one worker, else redis.")
    redis_host: str | None = Field(default=None, description="An existing Redis; empty: managed.")
    redis_port: int = Field(default=6379, ge=1, le=65535, strict=True)
    nfs_path: str | None = Field(default=None, description="A directory every shard mounts.")


class Caffe2JobSpec(JobSpec):
    backend: BackendSpec = Field(default_factory=BackendSpec)


def effective_backend(job: Job) -> Literal["none", "redis", "nfs"]:
    spec: Caffe2JobSpec = job.spec  # type: ignore[assignment]
    if spec.backend.type is not None:
        return spec.backend.type
    workers = sum(r.replicas for r in spec.replica_specs.values())
    return "none" if workers <= 1 else "redis"


def wants_managed_redis(job: Job) -> bool:
    """A redis backend that names no host: the shards need a Redis run for the job."""
    spec: Caffe2JobSpec = job.spec  # type: ignore[assignment]
    return effective_backend(job) == "redis" and not spec.backend.redis_host


CAFFE2 = Framework(
    kind="Caffe2Job",
    plural="caffe2jobs",
    short_names=("c2j",),
    name="caffe2",
    # Gloo picks its own ports and exchanges them through the store: no shard listens on the
    # framework port (CAFFE2_CONFIG names it, as the seed's contract does; nothing binds it).
    replica_types=(ReplicaType("Worker", 1, None, listens=False, elastic=True,
                               description="The shards; all must succeed."),),
    container_name="caffe2",
    default_port=2222,
    spec_model=Caffe2JobSpec,
    # A restarted shard cannot rejoin a Gloo group that has moved on: all restart, anew.
    replicas_restart_together=True,
    # A redis backend without redisHost gets a managed Redis (the managed_redis plugin).
    capabilities=(RedisRendezvous(managed=wants_managed_redis),),
    cel_rules=(
        CelRule("!has(self.spec.backend) || !has(self.spec.backend.type) || "
                "self.spec.backend.type != 'none' || !('Worker' in self.spec.replicaSpecs) || "
                "self.spec.replicaSpecs['Worker'].replicas <= 1",
                "spec.backend.type 'none' cannot connect more than one shard; use redis or nfs"),
        CelRule("!has(self.spec.backend) || !has(self.spec.backend.type) || "
                "self.spec.backend.type != 'nfs' || has(self.spec.backend.nfsPath)",
                "spec.backend.nfsPath is required for the nfs backend"),
    ),
    description="A data-parallel Caffe2 (Gloo) job: shards rendezvous via Redis or NFS.",
)


def run_id(job: Job) -> str:
    """The same for every shard of one attempt, new for each: `<job uid>-<attempt>`.

    Every shard's rendezvous keys (Redis) or store file (NFS) live under it, so an attempt
    never reads what the previous one left (a shard that rendezvoused through stale keys
    aborted with Gloo's "Received data size doesn't match expected size")."""
    return f"{job.metadata.uid or PLACEHOLDER_RUN_ID}-{job.status.attempt}"


class Caffe2Plugin(FrameworkPlugin):
    framework = CAFFE2

    def checkpoint_replica(self, job: Job) -> Replica | None:
        """Shard 0 (Worker 0): data-parallel shards hold the same parameters."""
        key = next(iter(job.spec.replica_specs), None)
        return None if key is None else Replica(key, 0)

    def validate(self, job: Job) -> list[SpecError]:
        spec: Caffe2JobSpec = job.spec  # type: ignore[assignment]
        backend = effective_backend(job)
        if backend == "nfs" and not spec.backend.nfs_path:
            return [SpecError("spec.backend.nfsPath", "required for the nfs backend")]
        workers = sum(r.replicas for r in spec.replica_specs.values())
        if backend == "none" and workers > 1:
            return [SpecError("spec.backend.type", f"'none' cannot connect {workers} shards; "
                              "use redis or nfs")]
        return []

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> ReplicaEnv:
        spec: Caffe2JobSpec = job.spec  # type: ignore[assignment]
        workers = ctx.cluster.of_type(replica.type)
        values = {
            "SHARD_ID": str(replica.index),
            "NUM_SHARDS": str(len(workers)),
            "RUN_ID": run_id(job),
        }
        backend = effective_backend(job)
        if backend == "redis" and spec.backend.redis_host:
            values["REDIS_HOST"] = spec.backend.redis_host
            values["REDIS_PORT"] = str(spec.backend.redis_port)
        elif backend == "nfs" and spec.backend.nfs_path:
            values["NFS_PATH"] = spec.backend.nfs_path
        if ctx.backend == "local":
            # Gloo picks the interface of the host name; on one machine that must be loopback.
            values["GLOO_SOCKET_IFNAME"] = "lo"
        # The cluster is serialised once per rendering and spliced in (byte for byte what
        # json.dumps of the whole object writes), not again for every shard.
        cluster = ctx.cluster.shared(f"CAFFE2_CONFIG.cluster/{replica.type}", lambda: json.dumps(
            {"worker": [str(a) for a in workers]}, separators=(",", ":")))
        values["CAFFE2_CONFIG"] = (f'{{"cluster":{cluster},"task":{{"type":"worker",'
                                   f'"index":{replica.index}}}}}')
        return ReplicaEnv(values)

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        return bool(outcomes) and all(o.phase is ReplicaPhase.SUCCEEDED for o in outcomes)


plugin = Caffe2Plugin()
