"""The cluster commands of `trainjobs`: submit, status, list, wait, logs, checkpoint, delete.

Why one module on the client: each command is a few lines over `AsyncClient` and `follow`,
and one place maps the client's errors to the documented exit codes (docs/client.md):
0 done / Succeeded, 1 the job Failed, 2 an invalid job or usage, 3 a timeout, 4 the cluster
unreachable, 5 refused (no such job, the API server said no, logs unavailable), 130 Ctrl-C
(the job keeps running on the cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from trainjobs.api.models import (
    MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_OPERATOR,
    CheckpointOutcome,
    Job,
)
from trainjobs.client.aio import AsyncClient, finish_message
from trainjobs.client.checkpoint import checkpoint_lines, outcome_line
from trainjobs.client.errors import (
    ClientError,
    ClusterUnreachable,
    JobFailed,
    NeverReached,
    WaitTimeout,
)
from trainjobs.client.failure_text import failure_lines
from trainjobs.client.follow import Display, follow
from trainjobs.client.progress_text import progress_cells, progress_lines
from trainjobs.client.views import progress
from trainjobs.errors import SpecInvalid
from trainjobs.kube import ApiError
from trainjobs.local.output import Console

__all__ = ["COMMANDS", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_INVALID", "EXIT_REFUSED",
           "EXIT_TIMEOUT", "EXIT_UNREACHABLE", "run_command"]

EXIT_FAILED, EXIT_INVALID, EXIT_TIMEOUT, EXIT_UNREACHABLE, EXIT_REFUSED = 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130

Command = Callable[[AsyncClient, argparse.Namespace], Awaitable[int]]


def run_command(name: str, args: argparse.Namespace) -> int:
    """Runs the cluster command `name` (a key of COMMANDS) to its exit code."""
    return asyncio.run(_guarded(COMMANDS[name], args))


async def _guarded(command: Command, args: argparse.Namespace) -> int:
    """The command with the client's errors turned into messages and exit codes."""
    async with AsyncClient(args.kubeconfig, args.namespace) as client:
        try:
            return await command(client, args)
        except SpecInvalid as exc:
            return _error(exc.summary(), EXIT_INVALID)
        except JobFailed as exc:
            return _error(str(exc), EXIT_FAILED)
        except NeverReached as exc:
            return _error(str(exc), EXIT_FAILED)
        except WaitTimeout as exc:
            return _error(f"timed out: {exc}; the job is left as it is", EXIT_TIMEOUT)
        except ClusterUnreachable as exc:
            return _error(f"cannot reach the cluster: {exc}", EXIT_UNREACHABLE)
        except ClientError as exc:
            return _error(str(exc), EXIT_REFUSED)
        except ApiError as exc:
            return _error(f"the API server refused: {exc.message} ({exc.status} "
                          f"{exc.status_reason or exc.reason})", EXIT_REFUSED)


def _error(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


async def _submit(client: AsyncClient, args: argparse.Namespace) -> int:
    parsed = client.parse(Path(args.job))
    if args.wait and len(parsed) != 1:
        return _error(f"--wait follows one job; {args.job} holds {len(parsed)}", EXIT_INVALID)
    jobs = await client.create_all(Path(args.job), args.namespace)
    for job in jobs:
        print(f"{job.kind.lower()}/{job.name} created in namespace {job.namespace}")
    if not args.wait:
        return 0
    job = jobs[0]
    display = Display(sys.stdout, colour=False if args.no_color else None)
    try:
        final = await follow(client, job, display, args.timeout)
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels us, then raises
        print(f"\ninterrupted: stopped following; {job.kind.lower()}/{job.name} keeps running "
              f"on the cluster (trainjobs status {job.name} -n {job.namespace}; "
              f"trainjobs delete {job.name} -n {job.namespace} to stop it)",
              file=sys.stderr, flush=True)
        raise
    return 0 if final.status.state == "Succeeded" else EXIT_FAILED


async def _status(client: AsyncClient, args: argparse.Namespace) -> int:
    if not args.job:
        return await _print_jobs(client, await client.list(namespace=args.namespace), False)
    job = await client.get(args.job, namespace=args.namespace)
    pods = await client.pods(job.name, job.kind, job.namespace)
    events = await client.events(job.name, job.kind, job.namespace)
    state = job.status.state or "Created"
    since = job.status.start_time or job.metadata.creation_timestamp
    print(f"{job.kind} {job.name} (namespace {job.namespace}): {state}"
          + (f", started {_age(since)} ago" if since else ""))
    manager = job.spec.manager()
    if manager != MANAGED_BY_OPERATOR:
        print(f"  managed by {manager} (spec.managedBy): this cluster's operator leaves it "
              "alone" + (": Kueue's MultiKueue runs it in a worker cluster and copies that "
                         "copy's status here" if manager == MANAGED_BY_MULTIKUEUE else ""))
        if not pods:
            where = await client.worker_cluster(job)
            print(f"  runs in worker cluster {where} (its Workload's status.clusterName); "
                  "its pods, events and logs are there" if where else
                  "  no worker cluster named on its Workload yet; its pods will run there")
    message = finish_message(job)
    if message:
        print(f"  {message}")
    lines = progress_lines(job.status.progress, datetime.now(UTC))
    if lines:
        print("progress:")
        for line in lines:
            print(f"  {line}")
    lines = checkpoint_lines(job, datetime.now(UTC))
    if lines:
        print("checkpoint:")
        for line in lines:
            print(f"  {line}")
    lines = failure_lines(job, datetime.now(UTC))
    if lines:
        print("failures:")
        for line in lines:
            print(f"  {line}")
    print("replicas:")
    for replica in progress(job, pods):
        print(f"  {replica.describe()}")
    if pods:
        print("pods:")
        for pod in pods:
            code = "" if pod.exit_code is None else f" exit {pod.exit_code}"
            why = f" {pod.reason}" if pod.reason else ""
            print(f"  {pod.replica:<14} {pod.name:<40} {pod.phase}{why}{code}"
                  + (f" on {pod.node}" if pod.node else ""))
    if events:
        print("events:")
        for event in events[-15:]:
            print(f"  {_age(event.time) if event.time else '?':>6}  {event.type:<7} "
                  f"{event.reason:<20} {event.object}: {event.message}")
    return 0


async def _list(client: AsyncClient, args: argparse.Namespace) -> int:
    jobs = await client.list(args.kind, args.namespace, label_selector=args.selector,
                             all_namespaces=args.all_namespaces)
    return await _print_jobs(client, jobs, args.all_namespaces)


async def _print_jobs(client: AsyncClient, jobs: list[Job], namespaces: bool) -> int:
    if not jobs:
        where = "any namespace" if namespaces else f"namespace {client.namespace}"
        print(f"no jobs in {where}", file=sys.stderr)
        return 0
    rows = [((j.namespace,) if namespaces else ()) + (
        j.name, j.kind, j.status.state or "Created", j.status.replica_summary or "-",
        *progress_cells(j.status.progress),
        _age(j.metadata.creation_timestamp) if j.metadata.creation_timestamp else "?")
        for j in jobs]
    head = (("NAMESPACE",) if namespaces else ()) + ("NAME", "KIND", "STATE", "REPLICAS",
                                                      "PROGRESS", "ETA", "AGE")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


async def _wait(client: AsyncClient, args: argparse.Namespace) -> int:
    job = await client.wait(args.job, namespace=args.namespace, until=args.until,
                            timeout=args.timeout)
    print(f"{job.kind.lower()}/{job.name} {args.until}")
    return 0


async def _logs(client: AsyncClient, args: argparse.Namespace) -> int:
    console = Console(sys.stdout)
    async for replica, line in client.logs(args.job, namespace=args.namespace,
                                           replica=args.replica, follow=args.follow,
                                           container=args.container):
        if args.replica:
            print(line, flush=True)
        else:
            console.line(replica, line)
    return 0


async def _checkpoint(client: AsyncClient, args: argparse.Namespace) -> int:
    job = await client.checkpoint(args.job, args.kind, args.namespace, wait=args.wait)
    if args.wait is False:
        print(f"{job.kind.lower()}/{job.name}: asked for a checkpoint (trainjobs status "
              f"{job.name} -n {job.namespace} shows the answer)")
        return 0
    print(outcome_line(job))
    outcome = job.status.checkpoint_request.outcome if job.status.checkpoint_request else None
    if outcome == CheckpointOutcome.SAVED:
        return 0
    return EXIT_TIMEOUT if outcome == CheckpointOutcome.TIMED_OUT else EXIT_FAILED


async def _delete(client: AsyncClient, args: argparse.Namespace) -> int:
    job = await client.delete(args.job, namespace=args.namespace, wait=args.wait)
    print(f"{job.kind.lower()}/{job.name} deleted")
    return 0


def _age(when: datetime) -> str:
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


COMMANDS: dict[str, Command] = {"submit": _submit, "status": _status, "list": _list,
                                "wait": _wait, "logs": _logs, "checkpoint": _checkpoint,
                                "delete": _delete}
