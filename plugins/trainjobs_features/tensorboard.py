"""Runs TensorBoard for a job that sets `spec.tensorboard`, of a kind that declares the
`TensorBoard` capability (TfJob, Kubeflow's TFJob): a Deployment and a Service.

Both are named `<job>-tensorboard` and owned by the job, so they go when the job goes. The
Deployment is watched (`trainjobs_owned_resources`): without that the operator could not see
it, and would POST it again on every pass of the job and read back the 409's owner. The
local backend does not run Deployments and says so; point a local TensorBoard at logDir.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainjobs.labels import LABEL_COMPONENT, LABEL_JOB_NAME
from trainjobs.plugin import (
    Job,
    OwnedResource,
    RenderContext,
    TensorBoard,
    TensorBoardSpec,
    hookimpl,
)

__all__ = ["TENSORBOARD_PORT", "trainjobs_extra_objects", "trainjobs_owned_resources"]

TENSORBOARD_PORT = 6006


@hookimpl
def trainjobs_owned_resources(
    controller_config: Mapping[str, object],
) -> Sequence[OwnedResource] | None:
    """TensorBoard's Deployment, watched so it is created once (and again only when it goes).
    It stays when the job's pods go (suspend, cleanup): it holds no training resources and
    garbage collection removes it with the job."""
    return [OwnedResource("apps/v1", "Deployment", "deployments")]


@hookimpl
def trainjobs_extra_objects(job: Job, ctx: RenderContext) -> Sequence[dict[str, Any]] | None:
    if ctx.framework.capability(TensorBoard) is None:
        return None
    board: TensorBoardSpec | None = getattr(job.spec, "tensorboard", None)
    if board is None:
        return None
    name = f"{job.name}-tensorboard"
    labels = {LABEL_JOB_NAME: job.name, LABEL_COMPONENT: "tensorboard"}
    container: dict[str, Any] = {
        "name": "tensorboard",
        "image": board.image,
        "command": ["tensorboard", f"--logdir={board.log_dir}", "--bind_all",
                    f"--port={TENSORBOARD_PORT}"],
        "ports": [{"name": "http", "containerPort": TENSORBOARD_PORT}],
    }
    if board.volume_mounts:
        container["volumeMounts"] = list(board.volume_mounts)
    pod_spec: dict[str, Any] = {"containers": [container]}
    if board.volumes:
        pod_spec["volumes"] = list(board.volumes)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "type": board.service_type,
            "selector": dict(labels),
            "ports": [{"name": "http", "port": 80, "targetPort": TENSORBOARD_PORT}],
        },
    }
    return [deployment, service]
