"""Distributed MXNet training over the ps-lite parameter server (kvstore ``dist_sync``).

One program for every replica of an MxJob; the role comes from the environment contract:

- ``DMLC_ROLE=scheduler|server``: ``import mxnet`` itself starts the ps-lite node and runs
  the server loop (``mxnet.kvstore.kvstore_server._init_kvstore_server_module``); it returns
  (via ``SystemExit``) once every worker has finalised the kvstore.
- ``DMLC_ROLE=worker``: trains a small MLP regression with ``gluon.Trainer`` on
  ``mx.kv.create('dist_sync')``; the optimizer runs on the servers (update_on_kvstore), the
  data is sharded by ``kv.rank``.

Environment read (the MXNet contract): DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT,
DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_WORKER_ID (workers), MX_CONFIG (optional, JSON).
ps-lite also reads DMLC_NODE_HOST / DMLC_INTERFACE to choose the address a server or worker
advertises; locally the runner sets DMLC_NODE_HOST=127.0.0.1.

Workers report their progress (step, loss) to trainjobs with ``trainjobs_progress``'s MXNet
batch-end callback. Every replica ends with one line ``TRAINJOBS_RESULT {json}``; exit status
0 on success.

Checkpoint, then stop (``--checkpoint-dir DIR``, with the job's
``runPolicy.checkpointTimeoutSeconds``): when trainjobs asks (``checkpoint_requested()``,
only ever asked of worker 0), worker 0 saves its parameters after the step it just finished
(``save_parameters``; after the pull they are the servers' copy, the same on every worker),
answers ``checkpoint_saved(step, path)`` and trains on until it is stopped. A resumed run
(``last_checkpoint()``: ``trainjobs run --resume``) has every worker load that file before
the kvstore is initialised (so whichever worker has rank 0 broadcasts the saved values) and
train from the saved step + 1 to ``--steps``. The optimizer's momentum lives on the servers
(update_on_kvstore) and is not saved: it starts again from zero on resume.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

# Small CPU footprint: several replicas share a couple of cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
os.environ.setdefault("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice")

REQUIRED = (
    "DMLC_ROLE",
    "DMLC_PS_ROOT_URI",
    "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER",
    "DMLC_NUM_WORKER",
)


def log(msg: str) -> None:
    print(msg, flush=True)


def result(**fields: object) -> None:
    print("TRAINJOBS_RESULT " + json.dumps(fields, sort_keys=True), flush=True)


def contract() -> dict[str, object]:
    missing = [k for k in REQUIRED if not os.environ.get(k)]
    if missing:
        raise SystemExit(f"train_dist.py: missing environment: {', '.join(missing)}")
    role = os.environ["DMLC_ROLE"]
    if role not in ("scheduler", "server", "worker"):
        raise SystemExit(f"train_dist.py: DMLC_ROLE={role!r} is not scheduler|server|worker")
    mx_config = json.loads(os.environ["MX_CONFIG"]) if os.environ.get("MX_CONFIG") else None
    index: int | None = None
    if mx_config is not None:
        task = mx_config.get("task", {})
        if task.get("type") != role:
            raise SystemExit(
                f"train_dist.py: MX_CONFIG task type {task.get('type')!r} != DMLC_ROLE {role!r}"
            )
        index = int(task.get("index", 0))
    if role == "worker" and os.environ.get("DMLC_WORKER_ID") is not None:
        wid = int(os.environ["DMLC_WORKER_ID"])
        if index is not None and index != wid:
            raise SystemExit(
                f"train_dist.py: DMLC_WORKER_ID={wid} but MX_CONFIG task index={index}"
            )
        index = wid
    if role == "scheduler" and index is None:
        index = 0
    return {
        "role": role,
        "index": index,
        "num_server": int(os.environ["DMLC_NUM_SERVER"]),
        "num_worker": int(os.environ["DMLC_NUM_WORKER"]),
        "root": f"{os.environ['DMLC_PS_ROOT_URI']}:{os.environ['DMLC_PS_ROOT_PORT']}",
        "mx_config": mx_config,
    }


def run_server(c: dict[str, object]) -> int:
    log(f"{c['role']} {c['index']}: starting ps-lite node, scheduler at {c['root']}")
    t0 = time.time()
    try:
        import mxnet  # noqa: F401  -- runs the scheduler/server loop, then sys.exit()
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    else:  # pragma: no cover - would mean MXNet thinks this process is a worker
        log(f"{c['role']}: mxnet returned without running the server loop")
        return 1
    log(f"{c['role']} {c['index']}: all workers finished after {time.time() - t0:.1f}s")
    result(role=c["role"], index=c["index"], first_loss=None, final_loss=None, param_checksum=None)
    return 0


def make_data(n: int, d: int):
    import numpy as np

    rng = np.random.RandomState(1234)  # same data on every worker; each takes its shard
    x = rng.uniform(-1, 1, size=(n, d)).astype("float32")
    w = rng.normal(size=(d, 1)).astype("float32")
    y = (np.tanh(x @ w) * 2.0 + 0.5 + 0.01 * rng.normal(size=(n, 1))).astype("float32")
    return x, y


def run_worker(c: dict[str, object], args: argparse.Namespace) -> int:
    import mxnet as mx
    import numpy as np
    import trainjobs_progress
    from mxnet import autograd, gluon
    from trainjobs_progress.mxnet import BatchEndCallback

    t0 = time.time()
    kv = mx.kv.create("dist_sync")
    rank, nworkers = kv.rank, kv.num_workers
    if nworkers != c["num_worker"]:
        raise SystemExit(f"kvstore reports {nworkers} workers, DMLC_NUM_WORKER={c['num_worker']}")
    log(
        f"worker {c['index']}: kvstore {kv.type} rank {rank}/{nworkers} "
        f"({c['num_server']} servers, scheduler {c['root']}) ready in {time.time() - t0:.1f}s"
    )

    x_all, y_all = make_data(args.samples, args.features)
    x, y = x_all[rank::nworkers], y_all[rank::nworkers]
    log(f"worker {c['index']}: shard {len(x)} of {len(x_all)} samples (rank {rank})")

    mx.random.seed(42)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="tanh"), gluon.nn.Dense(1))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net(mx.nd.array(x[:1]))  # materialise shapes
    start = 1
    last = trainjobs_progress.last_checkpoint()
    if last is not None:
        # Every worker loads the same file before the kvstore's first init (the trainer's
        # first step), so the values broadcast from rank 0 are the saved ones whichever
        # worker rank 0 is.
        net.load_parameters(last["uri"], ctx=mx.cpu())
        start = last["step"] + 1
        log(f"worker {c['index']}: resumed from step {last['step']} ({last['uri']})")
    trainer = gluon.Trainer(
        net.collect_params(), "sgd", {"learning_rate": args.lr, "momentum": 0.9}, kvstore=kv
    )
    loss_fn = gluon.loss.L2Loss()
    xb, yb = mx.nd.array(x), mx.nd.array(y)

    # Progress to trainjobs, through the callback Module.fit would call after each batch.
    metric = mx.metric.Loss()
    report_progress = BatchEndCallback(total=args.steps)
    report_progress.step = start - 1  # the callback counts batches from here
    first = final = None
    for step in range(start, args.steps + 1):
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(len(x))  # push grads, servers apply SGD, pull weights (dist_sync)
        value = float(loss.mean().asscalar())
        if first is None:
            first = value
        final = value
        log(f"worker {c['index']} step {step} loss {value:.6f}")
        metric.reset()
        metric.update(None, [loss])
        report_progress(mx.model.BatchEndParam(epoch=0, nbatch=step - 1, eval_metric=metric,
                                               locals=None))
        if args.checkpoint_dir and trainjobs_progress.checkpoint_requested():
            path = os.path.abspath(os.path.join(args.checkpoint_dir, f"mlp-{step:06d}.params"))
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            net.save_parameters(path)
            log(f"worker {c['index']}: checkpoint at step {step}: {path}")
            trainjobs_progress.checkpoint_saved(step, path)  # then trainjobs stops us
        if args.step_delay:
            time.sleep(args.step_delay)

    # Weights after the last pull are the servers' copy: identical on every worker.
    params = [p.data().asnumpy() for p in net.collect_params().values()]
    blob = b"".join(np.ascontiguousarray(p, dtype="float32").tobytes() for p in params)
    checksum = hashlib.sha256(blob).hexdigest()[:16]
    full_loss = float(((net(mx.nd.array(x_all)).asnumpy() - y_all) ** 2).mean() / 2)
    log(f"worker {c['index']}: done in {time.time() - t0:.1f}s, full-data loss {full_loss:.6f}")
    result(
        role="worker",
        index=c["index"],
        rank=rank,
        num_workers=nworkers,
        steps=args.steps,
        first_step=start,
        first_loss=first,
        final_loss=final,
        full_data_loss=full_loss,
        param_checksum=checksum,
        param_sum=float(sum(float(p.sum()) for p in params)),
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--checkpoint-dir", default="",
                    help="worker 0 saves here when trainjobs asks for a checkpoint")
    ap.add_argument("--step-delay", type=float, default=0.0,
                    help="seconds to sleep after each step (to interrupt a demo by hand)")
    args = ap.parse_args()
    c = contract()
    if c["role"] == "worker":
        return run_worker(c, args)
    return run_server(c)


if __name__ == "__main__":
    sys.exit(main())
