"""A user's checkpoint request from the client (`trainjobs checkpoint`, `Client.checkpoint`):
the annotation value it writes, why a job cannot take one, when the operator has answered
it, and how `trainjobs status` shows a job's checkpoints.

Why pure functions here: the request is an annotation (trainjobs.io/checkpoint-request) that
the operator compares with status.observedCheckpointRequest, and its answer is read back from
the status; deciding each from a `Job` and a time is unit-tested without a cluster.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from trainjobs.api.models import (
    MANAGED_BY_OPERATOR,
    CheckpointOutcome,
    CheckpointRequestStatus,
    Job,
)
from trainjobs.client.errors import CheckpointRefused, JobNotFound, NeverReached, WaitTimeout
from trainjobs.core.status import is_finished
from trainjobs.labels import ANNOTATION_CHECKPOINT_REQUEST
from trainjobs.local.output import format_duration

if TYPE_CHECKING:
    from trainjobs.client.aio import AsyncClient

__all__ = [
    "ANSWER_GRACE_SECONDS",
    "answered",
    "checkpoint_lines",
    "declined",
    "managed_elsewhere",
    "outcome_line",
    "refusal",
    "request_value",
    "wait_for_answer",
]

#: `wait=True` waits checkpointTimeoutSeconds plus this: the operator ends every request by
#: its deadline (TimedOut at worst), then needs a reconcile to write that down.
ANSWER_GRACE_SECONDS = 60.0


def request_value(now: datetime) -> str:
    """The annotation's value: the request's UTC time, RFC 3339 with microseconds
    (`2026-11-28T09:00:00.123456Z`); a new value each time, which is what asks again."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def refusal(job: Job) -> str | None:
    """Why the job cannot be asked for a checkpoint from here, or None. A job managed by
    another controller (MultiKueue) is the caller's to explain: where its pods run."""
    what = f"{job.kind} {job.name}"
    if is_finished(job.status):
        return f"{what} has finished ({job.status.state or 'done'}): no replica to checkpoint"
    if job.spec.run_policy.checkpoint_timeout_seconds is None:
        return (f"{what} has no spec.runPolicy.checkpointTimeoutSeconds: the operator asks "
                "checkpoints only of jobs that set it")
    if job.spec.run_policy.suspend:
        return f"{what} is suspended (spec.runPolicy.suspend): no replica runs to checkpoint"
    return None


def managed_elsewhere(job: Job) -> bool:
    """Whether another controller (MultiKueue, say) runs the job, not this cluster's
    operator."""
    return job.spec.manager() != MANAGED_BY_OPERATOR


def answered(job: Job, value: str, before: CheckpointRequestStatus | None) -> bool:
    """Whether the operator has answered the request `value`: it took it up
    (observedCheckpointRequest) and the request it recorded, newer than `before` (the one
    recorded when the annotation was written; still pending then, it may be the same one),
    has ended."""
    request = job.status.checkpoint_request
    if job.status.observed_checkpoint_request != value or request is None:
        return False
    if request.outcome == CheckpointOutcome.PENDING:
        return False
    return (before is None or request.id != before.id
            or before.outcome == CheckpointOutcome.PENDING)


def declined(job: Job, value: str, before: CheckpointRequestStatus | None) -> bool:
    """Whether the operator took the request `value` up without asking anyone (its
    checkpointing replica does not run, or does not report progress: the job's
    CheckpointNotAsked Event says which). It writes observedCheckpointRequest and the new
    request in one status update, so an unchanged request beside the taken-up value is a
    refusal, not a request still to come."""
    if job.status.observed_checkpoint_request != value:
        return False
    ended_before = before is None or before.outcome != CheckpointOutcome.PENDING
    return ended_before and job.status.checkpoint_request == before


def outcome_line(job: Job) -> str:
    """What `trainjobs checkpoint --wait` prints once answered: `saved at step S to URI`,
    `timed out ...`, or how else the request ended."""
    request = job.status.checkpoint_request
    last = job.status.last_checkpoint
    name = f"{job.kind.lower()}/{job.name}"
    if request is None:
        return f"{name}: no checkpoint request recorded"
    if request.outcome == CheckpointOutcome.SAVED and last is not None:
        return f"{name}: saved at step {last.step} to {last.uri}"
    if request.outcome == CheckpointOutcome.TIMED_OUT:
        timeout = job.spec.run_policy.checkpoint_timeout_seconds
        within = f" within {timeout}s" if timeout else ""
        return f"{name}: timed out: {request.replica} did not say it saved{within}"
    return f"{name}: checkpoint request {request.id} ended {request.outcome} ({request.replica})"


def _ago(when: datetime, now: datetime) -> str:
    return format_duration(max((now - when).total_seconds(), 0.0)) + " ago"


def checkpoint_lines(job: Job, now: datetime) -> list[str]:
    """`trainjobs status`'s checkpoint section: the last checkpoint, then the newest request
    (pending: time left; else how it ended), then a request the operator has not taken up
    yet. None for a job that never checkpointed nor was asked to."""
    status = job.status
    lines = []
    last = status.last_checkpoint
    if last is not None:
        by = f", by {last.replica}" if last.replica else ""
        lines.append(f"step {last.step} saved to {last.uri} {_ago(last.time, now)} "
                     f"(attempt {last.attempt}{by})")
    request = status.checkpoint_request
    if request is not None:
        head = f"request {request.id} ({request.reason}) to {request.replica} by {request.method}"
        if request.outcome == CheckpointOutcome.PENDING:
            left = format_duration(max((request.deadline - now).total_seconds(), 0.0))
            lines.append(f"{head}: pending, {left} left")
        else:
            lines.append(f"{head} {_ago(request.request_time, now)}: {request.outcome}")
    asked = job.metadata.annotations.get(ANNOTATION_CHECKPOINT_REQUEST)
    if asked and asked != status.observed_checkpoint_request and not is_finished(status):
        lines.append(f"asked at {asked} ({ANNOTATION_CHECKPOINT_REQUEST}); "
                     "not taken up by the operator yet")
    return lines


async def wait_for_answer(client: AsyncClient, job: Job, value: str,
                          before: CheckpointRequestStatus | None, timeout: float) -> Job:
    """The job once the operator has answered the checkpoint request `value`."""
    last = [job]

    async def run() -> Job:
        async for seen in client.watch(job.name, job.kind, job.namespace):
            last[0] = seen
            if answered(seen, value, before):
                return seen
            if declined(seen, value, before):
                raise CheckpointRefused(f"{job.kind} {job.name}: the operator asked no "
                                        "replica (its checkpointing replica is not "
                                        "running or does not report progress; the job's "
                                        "CheckpointNotAsked Event says which)")
            if is_finished(seen.status):
                raise NeverReached(f"{job.kind} {job.name} {seen.status.state} before its "
                                   f"checkpoint request was answered", seen)
        raise JobNotFound(f"{job.name} was deleted while waiting for its checkpoint")

    try:
        return await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        seen = last[0]
        request = seen.status.checkpoint_request
        if seen.status.observed_checkpoint_request != value:
            state = "the operator has not taken the request up"
        elif request is None:
            state = "no request recorded"
        else:
            state = f"request {request.id} ({request.reason}) {request.outcome}"
        raise WaitTimeout(f"no answer to the checkpoint request of {job.kind} {job.name} "
                          f"after {timeout:g}s: {state}", seen) from None
