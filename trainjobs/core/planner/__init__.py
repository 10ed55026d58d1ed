"""The reconcile decision: from a job and what exists, what to create, delete and report.

Why a pure function: it is the one place where restart, success, failure, suspension, deadline
and cleanup semantics live, shared by the Kubernetes backend and the local runtime, and it can
be tested exhaustively without I/O (tests/unit/core/planner/test_planner.py, including
hypothesis-generated states). It never performs an action; the backend does, then calls it
again with the new state. Calling it again on the state its own plan produced must ask for
nothing new (idempotence).

One pass takes one of four paths: a finished, suspended or queued job's (`stop`: `_finish`,
`_suspend`, `_queue`) or a running one's (`run`: `_run`, with `attempts` for replicas that
restart together and `stall` for a job whose progress stopped), then `checkpoint`, which holds
a stop's deletions back while the job saves; what holds on every path is
written once: the sweep over the job's pods (`sweep`: what goes, and a deletion cut off
half-way done again), what goes with the replicas
(`_without_replicas`), what the status counts (`counts`), and the status, edited typed
(`state._Status`) and built into a `JobStatus` once, at the end. The modules import one way:
inputs, state, then counts and sweep, attempts, stall, checkpoint, stop, run, and this one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from trainjobs.api.models import Job
from trainjobs.core.indexes import parse_indexes
from trainjobs.core.render import RenderedJob
from trainjobs.core.status import EXCLUSIVE_CONDITIONS, is_finished
from trainjobs.plugin.types import ReplicaOutcome

from .checkpoint import _checkpoint_first
from .counts import _restart_totals
from .inputs import (
    CheckpointSeen,
    Event,
    KindRules,
    Plan,
    PlanInputs,
    PlannerSettings,
    ProgressSeen,
    retryable,
)
from .run import _run
from .state import _requeue, _State, _Status
from .stop import _finish, _queue, _suspend

__all__ = ["EXCLUSIVE_CONDITIONS", "CheckpointSeen", "Event", "KindRules", "Plan", "PlanInputs",
           "PlannerSettings", "ProgressSeen", "plan", "retryable"]


def plan(
    job: Job,
    desired: RenderedJob,
    inputs: PlanInputs,
    succeeded: Callable[[Sequence[ReplicaOutcome]], bool],
    settings: PlannerSettings = PlannerSettings(),
    kind: KindRules = KindRules(),
) -> Plan:
    """Decide the next actions and the status for `job`.

    `desired` is the job rendered by the plugins; `inputs` what the backend knows of it (see
    `PlanInputs`); `succeeded` the kind's success rule; `kind` its other rules (`KindRules`).
    """
    decision = _decide(job, desired, inputs, succeeded, settings, kind)
    if kind.restart_together:
        decision.owe = inputs.owed | {p["metadata"]["name"] for p in decision.create_pods}
    if inputs.creates_held > 0 and (decision.create_pods or decision.create_services or
                                    decision.create_extras):
        # Creates refused a moment ago (a full quota): not again before the back-off ends.
        decision.create_pods, decision.create_services, decision.create_extras = [], [], []
        _requeue(decision, inputs.creates_held)
    return decision


def _decide(
    job: Job,
    desired: RenderedJob,
    inputs: PlanInputs,
    succeeded: Callable[[Sequence[ReplicaOutcome]], bool],
    settings: PlannerSettings,
    kind: KindRules,
) -> Plan:
    """The plan, as if every create the backend is asked for could be made now: one of four
    paths (finished, suspended, queued, running) fills it, and its status is built once."""
    old = job.status
    if job.metadata.deletion_timestamp is not None:
        return Plan(status=old)
    state = _State(job, inputs.now or datetime.now(UTC), Plan(), _Status.of(old),
                   lost_causes=inputs.lost_causes, create_refused=inputs.create_refused,
                   kind=kind,
                   counted=frozenset(old.counted_failures),
                   recreations=_restart_totals(old))
    for key in job.spec.replica_specs:
        rstatus = old.replica_statuses.get(key)
        state.started[key] = parse_indexes(rstatus.started_indexes) if rstatus else set()
        state.completed[key] = parse_indexes(rstatus.completed_indexes) if rstatus else set()
        state.lost[key] = 0
        if rstatus is not None and rstatus.restarted_at is not None:
            state.restart_marks[key] = rstatus.restarted_at
    if is_finished(old):
        _finish(state, inputs, settings)
    elif job.spec.run_policy.suspend:
        _suspend(state, inputs, settings)
    elif inputs.admission is not None and not inputs.admission.admitted:
        _queue(state, inputs, inputs.admission, settings)
    else:
        _run(state, desired, inputs, succeeded, settings)
    _checkpoint_first(state, inputs)
    state.plan.status = state.status.built(old, job.metadata.generation)
    return state.plan
