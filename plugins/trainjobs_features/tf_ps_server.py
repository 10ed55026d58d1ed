"""Gives a parameter server without the framework's container a standard TensorFlow gRPC server:
the replicas of the type a kind declares with the `ParameterServers` capability (TfJob's and
Kubeflow TFJob's PS).

This is the seed behaviour of the original TfJob: a parameter server usually runs no user code,
only `tf.distribute.Server` for the cluster in TF_CONFIG, so `PS: {replicas: 2}` with no
template at all is a complete replica spec. The container added here receives TF_CONFIG like
any framework container (the core injects the environment after this hook). Its image, as the
original operator's `tfImage`: the job's `spec.tfImage`, else the controller config's
`tfImage`, else PS_SERVER_IMAGE.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainjobs.plugin import (
    Job,
    ParameterServers,
    PluginError,
    RenderContext,
    Replica,
    config_section,
    hookimpl,
)

__all__ = ["CONFIG_KEY", "PS_SERVER_IMAGE", "PS_SERVER_PROGRAM", "parse_tf_image",
           "ps_server_image", "trainjobs_adjust_pod", "trainjobs_check_config"]

PS_SERVER_IMAGE = "tensorflow/tensorflow:2.21.0"
CONFIG_KEY = "tfImage"  # in --controller-config-file, as the original operator's
# Kept small and dependency-free so that it runs in any TensorFlow image, and locally.
PS_SERVER_PROGRAM = """\
import json, os
import tensorflow as tf
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=task["type"],
                              task_index=task["index"], protocol="grpc", start=True)
print(f"trainjobs: TensorFlow gRPC server {task['type']}:{task['index']} at {server.target}",
      flush=True)
server.join()
"""


def parse_tf_image(value: object) -> str:
    """The controller config's `tfImage` (None when absent: the default image); a
    `PluginError` naming the key when it is not an image name."""
    if value is None:
        return PS_SERVER_IMAGE
    if not (isinstance(value, str) and value):
        raise PluginError(f"controller config {CONFIG_KEY}: expected an image name, "
                          f"got {value!r}")
    return value


@hookimpl
def trainjobs_check_config(controller_config: Mapping[str, object]) -> None:
    config_section(controller_config, CONFIG_KEY, parse_tf_image)


def ps_server_image(job: Job, ctx: RenderContext) -> str:
    """The job's `tfImage`, else the controller config's, else the built-in default."""
    own = getattr(job.spec, "tf_image", None)
    if own:
        return str(own)
    return config_section(ctx.controller_config, CONFIG_KEY, parse_tf_image)


@hookimpl
def trainjobs_adjust_pod(job: Job, replica: Replica, pod: dict[str, Any],
                         ctx: RenderContext) -> None:
    framework = ctx.framework
    servers = framework.capability(ParameterServers)
    rtype = framework.replica_type(replica.type)
    if servers is None or rtype is None or rtype.name != servers.replica_type:
        return
    containers = pod["spec"]["containers"]
    if any(c.get("name") == framework.container_name for c in containers):
        return
    containers.insert(0, {
        "name": framework.container_name,
        "image": ps_server_image(job, ctx),
        "command": ["python", "-u", "-c", PS_SERVER_PROGRAM],
    })
