"""Parameter-server training with tf.distribute.ParameterServerStrategy (TF2).

Every replica of the TfJob can run this program: the chief runs it as the *coordinator*;
on ``ps`` and ``worker`` tasks it serves a plain ``tf.distribute.Server`` (the code of
``ps_server.py``, beside this file, which those tasks may also run directly). The cluster comes from
TF_CONFIG via TensorFlow's TFConfigClusterResolver:
``{"cluster": {"chief": [..], "worker": [..], "ps": [..]}, "task": {"type": "chief", "index": 0}}``.

The model's variables are created on the parameter servers; each training step is a
tf.function that the ClusterCoordinator schedules onto a worker, which reads the variables
from the ps tasks, computes gradients on its own copy of the (generated) data and applies
SGD to the variables on the ps tasks. The coordinator fetches each step's loss and, at the
end, the final parameters.

Per step: ``chief 0 step N loss X`` and a progress report (``trainjobs_progress.report``).
At the end: ``TRAINJOBS_RESULT {json}``. Exit 0 on success; with ``--steps`` small and
everything local it runs in seconds.

Checkpoint, then stop (``--checkpoint-dir DIR``, with the job's
``runPolicy.checkpointTimeoutSeconds``): the chief is the replica trainjobs asks; on
``checkpoint_requested()`` it saves the variables (read from the ps tasks) through
``tf.train.CheckpointManager`` numbered by the step just finished, answers
``checkpoint_saved(step, path)`` and trains on until stopped. Resumed (``last_checkpoint()``,
``trainjobs run --resume``), it restores them with ``tf.train.Checkpoint.restore`` and trains
from the saved step + 1 to ``--steps``; the input pipeline starts again from its beginning.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")


def log(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--checkpoint-dir", default="",
                    help="the chief saves here when trainjobs asks for a checkpoint")
    ap.add_argument("--step-delay", type=float, default=0.0,
                    help="seconds to sleep after each step (to interrupt a demo by hand)")
    args = ap.parse_args()

    if not os.environ.get("TF_CONFIG"):
        log("train_ps.py: TF_CONFIG is not set (ParameterServerStrategy needs a cluster)")
        return 1

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ps_server  # beside this file: the server loop and master_as_chief()

    original_type = ps_server.master_as_chief()

    import numpy as np
    import tensorflow as tf
    import trainjobs_progress

    t0 = time.time()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task_type, task_id = resolver.task_type, int(resolver.task_id or 0)
    jobs = resolver.cluster_spec().as_dict()
    if task_type != "chief":
        # Workers and parameter servers only serve; the coordinator sends them work.
        return ps_server.main()
    if not jobs.get("ps") or not jobs.get("worker"):
        log(f"train_ps.py: the cluster needs ps and worker tasks: {jobs}")
        return 1
    if original_type == "master":
        log("train_ps.py: TF_CONFIG names this task master; TF2 needs chief, renamed")

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    log(f"{task_type} {task_id}: coordinator for {jobs} ready in {time.time() - t0:.1f}s")

    rng = np.random.RandomState(1234)
    x = rng.uniform(-1, 1, size=(args.samples, args.features)).astype("float32")
    w = rng.normal(size=(args.features, 1)).astype("float32")
    y = (np.tanh(x @ w) * 2.0 + 0.5 + 0.01 * rng.normal(size=(args.samples, 1))).astype("float32")

    with strategy.scope():
        init = np.random.RandomState(42)
        params = [
            tf.Variable(
                init.normal(scale=0.5, size=(args.features, 16)).astype("float32"), name="w1"
            ),
            tf.Variable(np.zeros(16, "float32"), name="b1"),
            tf.Variable(init.normal(scale=0.5, size=(16, 1)).astype("float32"), name="w2"),
            tf.Variable(np.zeros(1, "float32"), name="b2"),
        ]
    devices = sorted({v.device for v in params})
    log(f"{task_type} {task_id}: variables placed on {devices}")
    checkpoint = tf.train.Checkpoint(w1=params[0], b1=params[1], w2=params[2], b2=params[3])
    start = 1
    last = trainjobs_progress.last_checkpoint()
    if last is not None:
        checkpoint.restore(last["uri"]).assert_existing_objects_matched()
        start = last["step"] + 1
        log(f"{task_type} {task_id}: resumed from step {last['step']} ({last['uri']})")
    manager = tf.train.CheckpointManager(checkpoint, args.checkpoint_dir, max_to_keep=3) \
        if args.checkpoint_dir else None

    def model(xb: tf.Tensor) -> tf.Tensor:
        return tf.matmul(tf.tanh(tf.matmul(xb, params[0]) + params[1]), params[2]) + params[3]

    def dataset_fn() -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(args.samples, seed=7)
        return ds.repeat().batch(args.batch, drop_remainder=True)

    per_worker_iter = iter(coordinator.create_per_worker_dataset(dataset_fn))
    lr = args.lr

    @tf.function
    def train_step(iterator):  # type: ignore[no-untyped-def]
        def replica_fn(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb) - yb))
            grads = tape.gradient(loss, params)
            for v, g in zip(params, grads, strict=True):
                v.assign_sub(lr * g)
            return loss

        xb, yb = next(iterator)
        return strategy.run(replica_fn, args=(xb, yb))

    losses: list[float] = []
    for step in range(start, args.steps + 1):
        remote = coordinator.schedule(train_step, args=(per_worker_iter,))
        value = float(remote.fetch())  # this step's update is applied on the ps tasks
        losses.append(value)
        log(f"{task_type} {task_id} step {step} loss {value:.6f}")
        trainjobs_progress.report(step, total=args.steps, loss=value)  # the coordinator's view
        if manager is not None and trainjobs_progress.checkpoint_requested():
            path = os.path.abspath(manager.save(checkpoint_number=step))
            log(f"{task_type} {task_id}: checkpoint at step {step}: {path}")
            trainjobs_progress.checkpoint_saved(step, path)  # then trainjobs stops us
        if args.step_delay:
            time.sleep(args.step_delay)
    coordinator.join()

    values = [v.numpy() for v in params]  # read back from the ps tasks
    blob = b"".join(np.ascontiguousarray(a, dtype="float32").tobytes() for a in values)
    checksum = hashlib.sha256(blob).hexdigest()[:16]
    h = np.tanh(x @ values[0] + values[1]) @ values[2] + values[3]
    full_loss = float(((h - y) ** 2).mean())
    log(f"{task_type} {task_id}: done in {time.time() - t0:.1f}s, full-data loss {full_loss:.6f}")
    print(
        "TRAINJOBS_RESULT "
        + json.dumps(
            {
                "role": original_type or task_type,
                "index": task_id,
                "num_workers": len(jobs["worker"]),
                "num_ps": len(jobs["ps"]),
                "steps": args.steps,
                "first_step": start,
                "first_loss": losses[0],
                "final_loss": losses[-1],
                "full_data_loss": full_loss,
                "param_checksum": checksum,
                "param_sum": float(sum(float(a.sum()) for a in values)),
                "variable_devices": devices,
            },
            sort_keys=True,
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
