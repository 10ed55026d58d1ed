"""A Redis for a job whose replicas rendezvous over Redis (its kind declares `RedisRendezvous`,
as Caffe2Job does) and that names no Redis of its own: a Pod and a Service `<job>-redis`.

The shards get REDIS_HOST/REDIS_PORT pointing at it. On Kubernetes it is a `redis` image pod;
the local backend runs the same pod's command (`redis-server`) as a process on 127.0.0.1.
Redis keeps nothing on disk: the rendezvous lives only as long as the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainjobs.labels import LABEL_COMPONENT, LABEL_JOB_NAME
from trainjobs.plugin import Job, RedisRendezvous, RenderContext, Replica, ReplicaEnv, hookimpl

__all__ = ["REDIS_IMAGE", "REDIS_PORT", "needs_managed_redis", "trainjobs_extra_objects",
           "trainjobs_replica_env"]

REDIS_IMAGE = "redis:7.4-alpine"
REDIS_PORT = 6379
COMPONENT = "redis"


def needs_managed_redis(job: Job, ctx: RenderContext) -> bool:
    """Whether the job's kind rendezvous over Redis and this job names no Redis itself."""
    rendezvous = ctx.framework.capability(RedisRendezvous)
    return rendezvous is not None and rendezvous.managed(job)


@hookimpl
def trainjobs_replica_env(job: Job, replica: Replica, ctx: RenderContext) -> ReplicaEnv | None:
    if not needs_managed_redis(job, ctx):
        return None
    address = ctx.cluster.component(COMPONENT, REDIS_PORT)
    return ReplicaEnv({"REDIS_HOST": address.host, "REDIS_PORT": str(address.port)})


@hookimpl
def trainjobs_extra_objects(job: Job, ctx: RenderContext) -> Sequence[dict[str, Any]] | None:
    if not needs_managed_redis(job, ctx):
        return None
    address = ctx.cluster.component(COMPONENT, REDIS_PORT)
    bind = "127.0.0.1" if ctx.backend == "local" else "0.0.0.0"
    name = f"{job.name}-{COMPONENT}"
    labels = {LABEL_JOB_NAME: job.name, LABEL_COMPONENT: COMPONENT}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "restartPolicy": "Always",
            "containers": [{
                "name": "redis",
                "image": REDIS_IMAGE,
                "command": ["redis-server", "--port", str(address.port), "--bind", bind,
                            "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                "ports": [{"name": "redis", "containerPort": address.port}],
            }],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"selector": dict(labels),
                 "ports": [{"name": "redis", "port": address.port, "targetPort": address.port}]},
    }
    return [pod, service]
