"""The standard TensorFlow gRPC server for one task of a TfJob.

This is what a PS replica runs when its pod template has no ``tensorflow`` container, and
what the workers of a ParameterServerStrategy job run: it reads TF_CONFIG through
TensorFlow's TFConfigClusterResolver and serves
``tf.distribute.Server(cluster_spec, job_name=<task type>, task_index=<task index>)``
until it is told to stop. The coordinator (the chief, ``train_ps.py``) places variables on
the ``ps`` tasks and runs functions on the ``worker`` tasks through these servers.

It never exits by itself (``server.join()`` does not return); SIGTERM or SIGINT ends it with
status 0 and a ``TRAINJOBS_RESULT`` line. Exit status 1 when TF_CONFIG is missing or names a
task that is not in the cluster, or when the server cannot start (e.g. port in use).

Note: TensorFlow's gRPC server listens on all interfaces (0.0.0.0/[::]) at the port of its
own cluster entry; the host part of the entry only tells the *other* tasks where to connect.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# As in TensorFlow's parameter-server guide: let RPCs wait for a restarting peer.
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")


def log(msg: str) -> None:
    print(msg, flush=True)


def master_as_chief() -> str | None:
    """TF2's strategies reject a ``master`` job ("Disallowed task type found in cluster
    spec"); the TfJob contract writes ``master`` when the user wrote Master. Rename it to
    ``chief`` in TF_CONFIG (before TensorFlow reads it). Returns the original task type."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    cfg = json.loads(raw)
    task_type = cfg.get("task", {}).get("type")
    cluster = cfg.get("cluster", {})
    if "master" in cluster and "chief" not in cluster:
        cluster["chief"] = cluster.pop("master")
        if task_type == "master":
            cfg["task"]["type"] = "chief"
        os.environ["TF_CONFIG"] = json.dumps(cfg)
    return task_type if isinstance(task_type, str) else None


def main() -> int:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        log("ps_server.py: TF_CONFIG is not set")
        return 1
    original_type = master_as_chief()
    tf_config = json.loads(os.environ["TF_CONFIG"])

    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = resolver.cluster_spec()
    task_type, task_id = resolver.task_type, resolver.task_id
    jobs = cluster.as_dict()
    if task_type is None or task_id is None:
        log(f"ps_server.py: TF_CONFIG has no task: {tf_config}")
        return 1
    if task_type not in jobs or int(task_id) >= len(cluster.task_indices(task_type)):
        log(f"ps_server.py: task {task_type}:{task_id} is not in the cluster {jobs}")
        return 1
    protocol = resolver.rpc_layer or "grpc"

    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        got.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    server = tf.distribute.Server(
        cluster, job_name=task_type, task_index=int(task_id), protocol=protocol, start=True
    )
    log(f"{task_type} {task_id}: TensorFlow server {server.target} for cluster {jobs}")
    t0 = time.time()
    # join() blocks in C++ where Python signal handlers cannot run: join in a daemon thread
    # and wait for a signal here.
    joiner = threading.Thread(target=server.join, daemon=True)
    joiner.start()
    while not stop.is_set() and joiner.is_alive():
        stop.wait(1.0)
    if not stop.is_set():
        log(f"{task_type} {task_id}: server stopped unexpectedly")
        return 1
    log(f"{task_type} {task_id}: signal {got[0]} after {time.time() - t0:.1f}s, stopping")
    print(
        "TRAINJOBS_RESULT "
        + json.dumps(
            {
                "role": original_type or task_type,
                "index": int(task_id),
                "first_loss": None,
                "final_loss": None,
                "param_checksum": None,
                "served_seconds": round(time.time() - t0, 1),
            },
            sort_keys=True,
        ),
        flush=True,
    )
    # The gRPC server has no clean shutdown in TF; leave without running its destructors.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
