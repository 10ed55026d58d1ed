"""Data-parallel training with torch.distributed over Gloo, for the PyTorchJob example.

Reads only Kubeflow's PyTorchJob environment contract, the one the trainjobs-pytorch plugin
sets: ``init_process_group("gloo")`` with the default ``env://`` init reads MASTER_ADDR,
MASTER_PORT, WORLD_SIZE and RANK; rank 0 (the Master) hosts the rendezvous store. The PET_*
variables (torchrun's options) are checked for consistency with them.

Then a small MLP regression wrapped in DistributedDataParallel (Gloo all-reduces the
gradients), each rank on its own shard of generated data. At the end every rank all-gathers
the parameter checksums and fails if they differ.

Loopback: torch's TCPStore server listens on every interface. When MASTER_ADDR is a loopback
address (`trainjobs run`), the master binds the store's socket to that address itself, hosts
the store on it, and joins ``env://`` as a client, the way torchrun's agent does
(TORCHELASTIC_USE_AGENT_STORE); on Kubernetes (MASTER_ADDR the master's Service) it is plain
``env://``. Gloo binds the interface named by GLOO_SOCKET_IFNAME (the plugin sets ``lo``
locally).

Per step (1..--steps): ``<role> <rank> step N loss X``, and a progress report to trainjobs (a
plain ``trainjobs_progress.report`` call: the core gives every replica of every kind, this
plugin's included, the environment it reads; ``pip install trainjobs-progress`` in the image).
At the end: ``TRAINJOBS_RESULT {json}`` with role, rank, index, world_size, first_step, steps,
first_loss, final_loss and param_checksum (the first 16 hex digits of the SHA-256 of the
final float32 parameters). Exit 0 on success, 1 on a failure of training, 2 for a missing or
inconsistent environment.

Checkpoints (``--checkpoint-dir DIR``, with the job's ``runPolicy.checkpointTimeoutSeconds``):
trainjobs asks the Master (rank 0; the plugin's ``checkpoint_replica``); on
``checkpoint_requested()`` it saves the model's and the optimizer's ``state_dict`` and the
step with ``torch.save`` to ``DIR/step-N.pt``, answers ``checkpoint_saved(N, path)`` and
trains on (until trainjobs stops it, or on, after ``trainjobs checkpoint``). Only rank 0
saves: under DDP every rank holds the same parameters and optimizer state. Started again with
a checkpoint (``last_checkpoint()``: ``trainjobs run --resume``, or the operator's next pods),
every rank loads that file and trains from step N + 1. On Kubernetes DIR must be storage that
every pod mounts (a ReadWriteMany volume), as the loading ranks read rank 0's file.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import ipaddress
import json
import os
import socket
import sys
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist
import trainjobs_progress
from torch.nn.parallel import DistributedDataParallel

CONTRACT = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def log(msg: str) -> None:
    print(msg, flush=True)


def bad_environment(message: str) -> SystemExit:
    print(f"train_ddp.py: {message}", file=sys.stderr, flush=True)
    return SystemExit(2)


def contract() -> tuple[int, int]:
    """RANK and WORLD_SIZE, after checking the environment is complete and consistent."""
    missing = [k for k in CONTRACT if not os.environ.get(k)]
    if missing:
        raise bad_environment(f"missing environment: {', '.join(missing)}")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    expected = {"PET_MASTER_ADDR": os.environ["MASTER_ADDR"],
                "PET_MASTER_PORT": os.environ["MASTER_PORT"], "PET_NODE_RANK": str(rank)}
    if os.environ.get("PET_NPROC_PER_NODE", "1") == "1":
        expected["PET_NNODES"] = str(world)
    wrong = {k: os.environ.get(k) for k, v in expected.items()
             if k in os.environ and os.environ[k] != v}
    if not 0 <= rank < world or wrong:
        raise bad_environment(f"inconsistent environment: RANK={rank} WORLD_SIZE={world} "
                              f"{wrong}")
    return rank, world


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_store_on_loopback(rank: int, world: int,
                           timeout: datetime.timedelta) -> tuple[Any, socket.socket] | None:
    """On rank 0 with a loopback MASTER_ADDR: serve the rendezvous store on that address only."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank != 0 or not _is_loopback(host):
        return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1" if host == "localhost" else host, port))
    sock.listen(128)
    store = dist.TCPStore(host, port, world, is_master=True, timeout=timeout,
                          wait_for_workers=False, master_listen_fd=sock.fileno())
    # env:// now connects to this store as a client instead of starting a second server.
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = str(True)
    return store, sock


def checksum(model: torch.nn.Module) -> str:
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]


def save(directory: str, step: int, model: torch.nn.Module,
         optimizer: torch.optim.Optimizer) -> str:
    """The step's state to DIR/step-N.pt (written whole, then renamed: a reader never sees
    half a file); its absolute path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.abspath(os.path.join(directory, f"step-{step}.pt"))
    torch.save({"step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=128, help="samples per rank")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for peers (rendezvous and collectives)")
    parser.add_argument("--checkpoint-dir", default="",
                        help="rank 0 saves here when trainjobs asks for a checkpoint")
    parser.add_argument("--step-delay", type=float, default=0.0,
                        help="seconds to sleep after each step (to interrupt it in tests)")
    args = parser.parse_args(argv)

    rank, world = contract()
    role = "master" if rank == 0 else "worker"
    index = 0 if rank == 0 else rank - 1
    timeout = datetime.timedelta(seconds=args.timeout)
    served = host_store_on_loopback(rank, world, timeout)
    dist.init_process_group("gloo", timeout=timeout)  # init_method env://
    if (dist.get_rank(), dist.get_world_size()) != (rank, world):
        raise bad_environment("the process group disagrees with RANK/WORLD_SIZE")
    log(f"{role} {rank}: joined a world of {world} at "
        f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")

    # Every rank builds the same model (DDP broadcasts rank 0's parameters anyway) and fits
    # y = x . w + b with its own shard of generated samples.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    ddp = DistributedDataParallel(model)
    truth = torch.Generator().manual_seed(1234)
    w, b = torch.randn(8, 1, generator=truth), torch.randn(1, generator=truth)
    shard = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(args.batch, 8, generator=shard)
    y = x @ w + b + 0.01 * torch.randn(args.batch, 1, generator=shard)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    start = 1
    last = trainjobs_progress.last_checkpoint()
    if last is not None:  # every rank loads the same state (DDP needs them equal)
        state = torch.load(last["uri"], map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"]) + 1
        log(f"{role} {rank}: resumed from step {state['step']} ({last['uri']})")

    losses: list[float] = []
    for step in range(start, args.steps + 1):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # gradients all-reduced (averaged) across ranks here
        optimizer.step()
        losses.append(loss.item())
        log(f"{role} {rank} step {step} loss {losses[-1]:.6f}")
        trainjobs_progress.report(step, total=args.steps, loss=losses[-1])
        if rank == 0 and args.checkpoint_dir and trainjobs_progress.checkpoint_requested():
            path = save(args.checkpoint_dir, step, model, optimizer)
            log(f"{role} {rank}: checkpoint at step {step}: {path}")
            trainjobs_progress.checkpoint_saved(step, path)
        if args.step_delay:
            time.sleep(args.step_delay)

    mine = checksum(model)
    everyone: list[str | None] = [None] * world
    dist.all_gather_object(everyone, mine)
    if len(set(everyone)) != 1:
        log(f"{role} {rank}: parameters differ across ranks: {everyone}")
        return 1
    result = {"role": role, "rank": rank, "index": index, "world_size": world,
              "first_step": start, "steps": args.steps,
              "first_loss": losses[0] if losses else None,
              "final_loss": losses[-1] if losses else None, "param_checksum": mine}
    log("TRAINJOBS_RESULT " + json.dumps(result))
    # Every rank has printed its result before the master may exit: its exit ends the job.
    dist.barrier()
    dist.destroy_process_group()
    del served
    return 0


if __name__ == "__main__":
    sys.exit(main())
