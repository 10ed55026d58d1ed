"""Multi-worker synchronous training with tf.distribute.MultiWorkerMirroredStrategy.

Every replica of the TfJob (chief and workers) runs this same program. The cluster comes
from TF_CONFIG through TensorFlow's own TFConfigClusterResolver (the contract:
``{"cluster": {"chief": [...], "worker": [...]}, "task": {"type": ..., "index": ...},
"environment": "cloud"}``). Without TF_CONFIG it trains alone with the default strategy.

A small Keras (tf-keras, i.e. Keras 2 as ``tf.keras``) regression model is fitted on data
generated in the program; the dataset is sharded across workers by tf.data
(AutoShardPolicy.DATA) and gradients are all-reduced by the collective ops, so every worker
ends with the same weights. ``--model-dir`` saves the weights (the chief writes them; the
other workers write to a scratch copy, as TF requires).

Per step: ``<type> <index> step N loss X``. At the end: ``TRAINJOBS_RESULT {json}``.
Exit status 0 on success.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Keras 2 (the tf-keras package) as tf.keras: Keras 3's model.fit breaks under a multi-worker
# MultiWorkerMirroredStrategy (keras-team/keras#20585). Must be set before importing TF.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-per-replica", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--model-dir", default=None, help="save the final weights here (chief)")
    ap.add_argument(
        "--collective-timeout",
        type=float,
        default=120.0,
        help="seconds before a collective op gives up on a missing peer",
    )
    args = ap.parse_args()

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    t0 = time.time()
    original_type = master_as_chief()
    tf_config = json.loads(os.environ["TF_CONFIG"]) if os.environ.get("TF_CONFIG") else None
    if tf_config:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        task_type, task_id = resolver.task_type, int(resolver.task_id)
        if task_type not in ("chief", "worker"):
            raise SystemExit(f"train_mwms.py: task type {task_type!r} does not train in MWMS")
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING,
            timeout_seconds=args.collective_timeout,
        )
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
        cluster = resolver.cluster_spec().as_dict()
        n_workers = sum(len(v) for k, v in cluster.items() if k in ("chief", "master", "worker"))
        # "environment" is accepted and ignored by TF2 (only the removed TF1 distribute
        # coordinator read it).
        log(
            f"{task_type} {task_id}: MultiWorkerMirroredStrategy over {cluster} "
            f"({n_workers} workers, TF_CONFIG environment={tf_config.get('environment')!r})"
        )
    else:
        task_type, task_id, n_workers = "chief", 0, 1
        strategy = tf.distribute.get_strategy()
        log("no TF_CONFIG: training in a single process")
    tag = f"{task_type} {task_id}"
    is_chief = task_type == "chief" or (
        tf_config is not None
        and "chief" not in tf_config.get("cluster", {})
        and task_type == "worker"
        and task_id == 0
    )
    role = original_type or task_type  # report "master" if the job said Master

    rng = np.random.RandomState(1234)  # same data everywhere; tf.data shards it per worker
    x = rng.uniform(-1, 1, size=(args.samples, args.features)).astype("float32")
    w = rng.normal(size=(args.features, 1)).astype("float32")
    y = (np.tanh(x @ w) * 2.0 + 0.5 + 0.01 * rng.normal(size=(args.samples, 1))).astype("float32")

    global_batch = args.batch_per_replica * strategy.num_replicas_in_sync
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(opts)

    with strategy.scope():
        tf.keras.utils.set_random_seed(42)
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(args.features,)),
                tf.keras.layers.Dense(16, activation="tanh"),
                tf.keras.layers.Dense(1),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9), loss="mse"
        )

    losses: list[float] = []

    class StepLog(tf.keras.callbacks.Callback):
        # One step per epoch, so the epoch's loss is exactly that step's loss.
        def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
            value = float((logs or {})["loss"])
            losses.append(value)
            log(f"{tag} step {epoch + 1} loss {value:.6f}")

    # Progress to trainjobs (step, total, loss) from every worker, through the Keras adapter.
    from trainjobs_progress.keras import ProgressCallback

    model.fit(ds, epochs=args.steps, steps_per_epoch=1, verbose=0,
              callbacks=[StepLog(), ProgressCallback()])

    weights = model.get_weights()
    blob = b"".join(np.ascontiguousarray(a, dtype="float32").tobytes() for a in weights)
    checksum = hashlib.sha256(blob).hexdigest()[:16]
    full = model(x, training=False).numpy()
    full_loss = float(((full - y) ** 2).mean())

    saved = None
    if args.model_dir:
        # Every worker saves (TF's rule for MWMS); only the chief keeps its copy.
        target = args.model_dir if is_chief else tempfile.mkdtemp(prefix="mwms-scratch-")
        os.makedirs(target, exist_ok=True)
        path = os.path.join(target, "model.weights.h5")
        model.save_weights(path)
        if is_chief:
            saved = path
        else:
            shutil.rmtree(target, ignore_errors=True)

    log(f"{tag}: done in {time.time() - t0:.1f}s, full-data loss {full_loss:.6f}")
    print(
        "TRAINJOBS_RESULT "
        + json.dumps(
            {
                "role": role,
                "index": task_id,
                "num_workers": n_workers,
                "steps": args.steps,
                "first_loss": losses[0],
                "final_loss": losses[-1],
                "full_data_loss": full_loss,
                "param_checksum": checksum,
                "param_sum": float(sum(float(a.sum()) for a in weights)),
                "saved": saved,
            },
            sort_keys=True,
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
