"""Data-parallel training over Gloo, rendezvous through Redis or a shared directory.

Caffe2's distributed training used Gloo for collectives and a key-value store for the
rendezvous: ``RedisStoreHandler(host, port, prefix=RUN_ID)`` or ``FileStoreHandler(path,
prefix=RUN_ID)``, with SHARD_ID / NUM_SHARDS naming each process. Caffe2 lives on as
PyTorch's ``torch.distributed``, whose ``gloo`` backend is that same Gloo library. This
program keeps the Caffe2 contract and does the same thing:

- ``REDIS_HOST``/``REDIS_PORT`` set: a ``torch.distributed.Store`` implemented in Python
  over redis-py (``RedisStore`` below), keys under ``trainjobs/<RUN_ID>/``;
- else ``NFS_PATH`` set: torch's ``FileStore`` on ``$NFS_PATH/trainjobs-<RUN_ID>.store``;
- else (one shard, backend ``none``): a private ``HashStore``.

Then ``init_process_group("gloo", store=..., rank=SHARD_ID, world_size=NUM_SHARDS)``, a small
MLP regression wrapped in DistributedDataParallel (gradients all-reduced by Gloo), data
sharded by SHARD_ID. At the end every shard all-gathers the parameter checksums and fails
if they differ.

Environment (the Caffe2 contract): SHARD_ID, NUM_SHARDS, RUN_ID, REDIS_HOST + REDIS_PORT or
NFS_PATH, CAFFE2_CONFIG (JSON, optional: checked against SHARD_ID/NUM_SHARDS; when this
shard's own host in it is a loopback address and GLOO_SOCKET_IFNAME is unset, Gloo is
pinned to the loopback interface).

Per step: ``shard I step N loss X``, and a progress report to trainjobs (a plain
``trainjobs_progress.report`` call). At the end: ``TRAINJOBS_RESULT {json}``. Exit 0 on success.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import ipaddress
import json
import os
import sys
import time
from collections.abc import Sequence

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist
import trainjobs_progress


def log(msg: str) -> None:
    print(msg, flush=True)


class RedisStore(dist.Store):
    """A torch.distributed Store over Redis: Gloo's Redis rendezvous, in Python.

    Values are bytes; counters (``add``) are Redis integers, which read back as their
    decimal text, as torch's own stores do. Blocking reads poll with a short back-off.
    """

    _CAS = """
    local cur = redis.call('GET', KEYS[1])
    if not cur then
      if ARGV[1] == '' then redis.call('SET', KEYS[1], ARGV[2]); return ARGV[2] end
      return ARGV[1]
    end
    if cur == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]); return ARGV[2] end
    return cur
    """

    def __init__(self, host: str, port: int, prefix: str, timeout: datetime.timedelta) -> None:
        super().__init__()
        import redis

        self._r = redis.Redis(host=host, port=port, socket_timeout=30, socket_connect_timeout=10)
        self._prefix = prefix
        self._timeout = timeout
        self._cas = self._r.register_script(self._CAS)
        deadline = time.monotonic() + timeout.total_seconds()
        while True:  # Redis may start after us (a managed Redis pod, say)
            try:
                self._r.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _k(self, key: str) -> str:
        return self._prefix + key

    @staticmethod
    def _b(value: str | bytes | Sequence[int]) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    def set(self, key: str, value: str | bytes) -> None:  # type: ignore[override]
        self._r.set(self._k(key), self._b(value))

    def get(self, key: str) -> bytes:  # type: ignore[override]
        self.wait([key])
        value = self._r.get(self._k(key))
        if value is None:
            raise RuntimeError(f"RedisStore: key {key!r} vanished")
        return value

    def add(self, key: str, amount: int) -> int:  # type: ignore[override]
        return int(self._r.incrby(self._k(key), amount))

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:  # type: ignore[override]
        return bytes(self._cas(keys=[self._k(key)], args=[self._b(expected), self._b(desired)]))

    def append(self, key: str, value: str | bytes) -> None:  # type: ignore[override]
        self._r.append(self._k(key), self._b(value))

    def multi_get(self, keys: list[str]) -> list[bytes]:  # type: ignore[override]
        return [self.get(k) for k in keys]

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:  # type: ignore[override]
        self._r.mset({self._k(k): self._b(v) for k, v in zip(keys, values, strict=True)})

    def check(self, keys: list[str]) -> bool:  # type: ignore[override]
        return bool(self._r.exists(*[self._k(k) for k in keys]) == len(keys))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:  # type: ignore[override]
        limit = (timeout or self._timeout).total_seconds()
        deadline = time.monotonic() + limit
        pause = 0.002
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise TimeoutError(f"RedisStore: timed out after {limit}s waiting for {keys}")
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def delete_key(self, key: str) -> bool:  # type: ignore[override]
        return bool(self._r.delete(self._k(key)))

    def num_keys(self) -> int:  # type: ignore[override]
        return sum(1 for _ in self._r.scan_iter(match=self._prefix + "*", count=1000))

    def set_timeout(self, timeout: datetime.timedelta) -> None:  # type: ignore[override]
        self._timeout = timeout

    def delete_all(self) -> int:
        keys = list(self._r.scan_iter(match=self._prefix + "*", count=1000))
        return int(self._r.delete(*keys)) if keys else 0


def contract() -> dict[str, object]:
    missing = [k for k in ("SHARD_ID", "NUM_SHARDS", "RUN_ID") if not os.environ.get(k)]
    if missing:
        raise SystemExit(f"train_gloo.py: missing environment: {', '.join(missing)}")
    shard, nshards, run_id = (
        int(os.environ["SHARD_ID"]),
        int(os.environ["NUM_SHARDS"]),
        os.environ["RUN_ID"],
    )
    if not 0 <= shard < nshards:
        raise SystemExit(f"train_gloo.py: SHARD_ID={shard} out of range for NUM_SHARDS={nshards}")
    own_host = None
    if os.environ.get("CAFFE2_CONFIG"):
        cfg = json.loads(os.environ["CAFFE2_CONFIG"])
        workers = cfg.get("cluster", {}).get("worker", [])
        task = cfg.get("task", {})
        if len(workers) != nshards or int(task.get("index", -1)) != shard:
            raise SystemExit(
                f"train_gloo.py: CAFFE2_CONFIG {cfg} disagrees with "
                f"SHARD_ID={shard}, NUM_SHARDS={nshards}"
            )
        own_host = workers[shard].rsplit(":", 1)[0]
    if os.environ.get("REDIS_HOST"):
        backend = "redis"
        if not os.environ.get("REDIS_PORT"):
            raise SystemExit("train_gloo.py: REDIS_HOST is set but REDIS_PORT is not")
    elif os.environ.get("NFS_PATH"):
        backend = "nfs"
    elif nshards == 1:
        backend = "none"
    else:
        raise SystemExit("train_gloo.py: NUM_SHARDS > 1 needs REDIS_HOST/REDIS_PORT or NFS_PATH")
    return {
        "shard": shard,
        "nshards": nshards,
        "run_id": run_id,
        "backend": backend,
        "own_host": own_host,
    }


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def make_store(c: dict[str, object], timeout: datetime.timedelta) -> dist.Store:
    run_id = str(c["run_id"])
    if c["backend"] == "redis":
        return RedisStore(
            os.environ["REDIS_HOST"], int(os.environ["REDIS_PORT"]), f"trainjobs/{run_id}/", timeout
        )
    if c["backend"] == "nfs":
        # The shared directory may not exist yet on a fresh machine (locally it is a plain path).
        os.makedirs(os.environ["NFS_PATH"], exist_ok=True)
        path = os.path.join(os.environ["NFS_PATH"], f"trainjobs-{run_id}.store")
        return dist.FileStore(path, int(c["nshards"]))  # type: ignore[arg-type]
    return dist.HashStore()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument(
        "--timeout", type=float, default=120.0, help="rendezvous/collective timeout (s)"
    )
    args = ap.parse_args()

    c = contract()
    shard, nshards = int(c["shard"]), int(c["nshards"])  # type: ignore[call-overload]
    if is_loopback(c["own_host"]) and "GLOO_SOCKET_IFNAME" not in os.environ:  # type: ignore[arg-type]
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=args.timeout)

    t0 = time.time()
    store = make_store(c, timeout)
    dist.init_process_group("gloo", store=store, rank=shard, world_size=nshards, timeout=timeout)
    log(
        f"shard {shard}/{nshards}: gloo process group up via {c['backend']} rendezvous "
        f"(RUN_ID={c['run_id']}) in {time.time() - t0:.1f}s"
    )

    g = torch.Generator().manual_seed(1234)  # same data everywhere; each shard takes its part
    x_all = torch.rand(args.samples, args.features, generator=g) * 2 - 1
    w_true = torch.randn(args.features, 1, generator=g)
    y_all = torch.tanh(x_all @ w_true) * 2 + 0.5 + 0.01 * torch.randn(args.samples, 1, generator=g)
    x, y = x_all[shard::nshards], y_all[shard::nshards]

    torch.manual_seed(42)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.features, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.MSELoss()

    losses: list[float] = []
    for step in range(1, args.steps + 1):
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP all-reduces (averages) the gradients over Gloo
        opt.step()
        losses.append(loss.item())
        log(f"shard {shard} step {step} loss {losses[-1]:.6f}")
        trainjobs_progress.report(step, total=args.steps, loss=losses[-1])

    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).contiguous()
        checksum = hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]
        full_loss = float(loss_fn(model(x_all), y_all))
        mean_final = torch.tensor([losses[-1]])
        dist.all_reduce(mean_final)  # a plain Gloo allreduce, too
    gathered: list[str | None] = [None] * nshards
    dist.all_gather_object(gathered, checksum)
    same = all(s == checksum for s in gathered)
    dist.barrier()
    if shard == 0 and isinstance(store, RedisStore):
        log(f"shard 0: removed {store.delete_all()} rendezvous keys of RUN_ID {c['run_id']}")
    # DDP's reducer holds Gloo work: let it go before its process group, or its C++ threads can
    # be torn down at interpreter exit and abort the process (std::terminate, exit code 134,
    # seen after a successful run).
    del ddp, opt
    gc.collect()
    dist.destroy_process_group()
    del store  # a FileStore removes its file when the last shard lets go of it

    log(
        f"shard {shard}: done in {time.time() - t0:.1f}s, full-data loss {full_loss:.6f}, "
        f"checksums {gathered}"
    )
    print(
        "TRAINJOBS_RESULT "
        + json.dumps(
            {
                "role": "worker",
                "index": shard,
                "num_shards": nshards,
                "backend": c["backend"],
                "steps": args.steps,
                "first_loss": losses[0],
                "final_loss": losses[-1],
                "mean_final_loss": float(mean_final) / nshards,
                "full_data_loss": full_loss,
                "param_checksum": checksum,
                "param_sum": float(flat.sum()),
                "checksums_agree": same,
            },
            sort_keys=True,
        ),
        flush=True,
    )
    if not same:
        log(f"shard {shard}: parameters differ across shards: {gathered}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
