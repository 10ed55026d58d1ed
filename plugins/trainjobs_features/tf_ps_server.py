"""Gives a TfJob PS replica without a `tensorflow` container a standard TensorFlow gRPC server.

This is the seed behaviour of the original TfJob: a parameter server usually runs no user code,
only `tf.distribute.Server` for the cluster in TF_CONFIG. The container added here receives
TF_CONFIG like any framework container (the core injects the environment after this hook).
"""

from __future__ import annotations

from typing import Any

from trainjobs.plugin import Job, RenderContext, Replica, hookimpl

__all__ = ["PS_SERVER_IMAGE", "PS_SERVER_PROGRAM", "trainjobs_adjust_pod"]

PS_SERVER_IMAGE = "tensorflow/tensorflow:2.21.0"
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


@hookimpl
def trainjobs_adjust_pod(job: Job, replica: Replica, pod: dict[str, Any],
                         ctx: RenderContext) -> None:
    framework = ctx.framework
    if framework.kind != "TfJob":
        return
    rtype = framework.replica_type(replica.type)
    if rtype is None or rtype.name != "PS":
        return
    containers = pod["spec"]["containers"]
    if any(c.get("name") == framework.container_name for c in containers):
        return
    containers.insert(0, {
        "name": framework.container_name,
        "image": PS_SERVER_IMAGE,
        "command": ["python", "-u", "-c", PS_SERVER_PROGRAM],
    })
