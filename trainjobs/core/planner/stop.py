"""The paths of a job that runs nothing: a finished one (`_finish`: cleanPodPolicy, then the
TTL), a suspended one (`_suspend`) and one Kueue has not admitted (`_queue`); the last two
share their rules (`_stop_replicas`, `_idle`), and a resume reads the suspension's words."""

from __future__ import annotations

from collections.abc import Sequence

from trainjobs.api.models import CleanPodPolicy, ConditionType
from trainjobs.core.admission import Admission
from trainjobs.core.deletions import DeleteReason
from trainjobs.core.observed import ObservedPod
from trainjobs.core.status import current_condition

from .counts import _refresh_active
from .inputs import Event, PlanInputs, PlannerSettings
from .state import _after, _ensure_condition, _set_exclusive, _State
from .sweep import _sweep, _without_replicas


def _finish(state: _State, inputs: PlanInputs, settings: PlannerSettings) -> None:
    """A finished job: apply cleanPodPolicy, then the TTL. Nothing is ever created again."""
    job, plan_, pods = state.job, state.plan, inputs.pods
    policy = job.spec.run_policy.clean_pod_policy
    _sweep(state, pods, settings, lambda pod: policy is CleanPodPolicy.ALL or
           (policy is CleanPodPolicy.RUNNING and pod.active), DeleteReason.FINISHED)
    if policy is not CleanPodPolicy.NONE:
        # A replica's Service goes with its pod, and so does one whose pod is already going or
        # gone (its first delete failed, or someone else deleted the pod): a finished job's
        # Service without a pod serves nothing, and this pass may be the last one.
        kept = {p.name for p in pods if not p.deleting} - set(plan_.delete_pods)
        plan_.delete_services.extend(sorted(inputs.services - kept))
        # Pods a plugin added for the replicas (a managed Redis) serve them until they end and
        # run forever otherwise: like running replicas, they go when the job has finished.
        _without_replicas(state, pods, inputs.extras, settings)
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    completed = job.status.completion_time
    if ttl is not None and completed is not None:
        expires = _after(completed, ttl)
        if state.now >= expires:
            plan_.delete_job = True
            plan_.events.append(Event("Normal", "TTLExpired", f"deleting {job.kind} {job.name}:"
                                      f" finished more than {ttl}s ago"))
        else:
            plan_.requeue_after = (expires - state.now).total_seconds()
    _refresh_active(state, pods)


def _suspend_words(state: _State, what: str, reason: str, message: str) -> tuple[str, str]:
    """The Suspended condition's reason and message: trainjobs' (`reason`, `message`), or, for
    a kind of suspend_style "kubeflow", training-operator's (`NewReason(kind, "Suspended")`,
    "TFJob <name> is suspended.")."""
    if state.kind.suspend_style != "kubeflow":
        return reason, message
    job = state.job
    return f"{job.kind}{what}", f"{job.kind} {job.name} is {what.lower()}."


def _suspend(state: _State, inputs: PlanInputs, settings: PlannerSettings) -> None:
    """A suspended job runs nothing: its pods and Services go, whatever cleanPodPolicy says
    (as training-operator's suspend), and the pods plugins added for them and the objects
    that exist only with the replicas (all come back when the job resumes). Replicas that
    restart together come back as a new attempt: the suspended one's rendezvous is stale.
    Kubeflow style also sets a True Running False with the suspension's words and keeps
    startTime (training-operator resets it on resume)."""
    job = state.job
    if state.kind.restart_together and \
            current_condition(job.status) is not ConditionType.SUSPENDED:
        state.status.attempt = job.status.attempt + 1
    _stop_replicas(state, inputs, settings, DeleteReason.SUSPENDED)
    reason, message = _suspend_words(state, "Suspended", "JobSuspended",
                                     f"{job.kind} {job.name} is suspended")
    if current_condition(job.status) is not ConditionType.SUSPENDED:
        state.plan.events.append(Event("Normal", reason, "suspended: pods deleted"))
    if state.kind.suspend_style == "kubeflow" and current_condition(job.status) is \
            ConditionType.RUNNING:
        conds = state.status.conditions
        for i, cond in enumerate(conds):
            if cond.type is ConditionType.RUNNING:
                conds[i] = cond.model_copy(update={"reason": reason, "message": message})
    _idle(state, inputs.pods, ConditionType.SUSPENDED, reason, message,
          keep_start=state.kind.suspend_style == "kubeflow")


def _queue(state: _State, inputs: PlanInputs, admission: Admission,
           settings: PlannerSettings) -> None:
    """Kueue has not admitted the job (or evicted it): as suspended, no replica exists (its
    pods, Services and the objects that exist only with them go, none is created, no restart
    or loss is counted, backoffLimit is untouched), and the Queued condition says why in
    Kueue's words; an eviction says by what. It runs again, as a resume, when admitted."""
    job = state.job
    live = [p for p in inputs.pods if not p.deleting]
    if state.kind.restart_together and any(p.attempt in (None, job.status.attempt)
                                           for p in live):
        # The rendezvous is stale (once: pods kept for a checkpoint are of the old attempt).
        state.status.attempt = job.status.attempt + 1
    _stop_replicas(state, inputs, settings, DeleteReason.QUEUED)
    _ensure_condition(state, ConditionType.CREATED, "JobCreated",
                      f"{job.kind} {job.name} is created")
    eviction = admission.eviction
    if eviction is not None:
        reason, message = "Evicted", f"{eviction.reason}: {eviction.message}"
        was = next((c for c in job.status.conditions if c.type is ConditionType.QUEUED), None)
        if live or was is None or was.status != "True" or was.reason != "Evicted":
            state.plan.events.append(Event("Warning", "Evicted", f"evicted by Kueue: {message}"
                                           + ("; pods deleted" if live else "")))
    else:
        reason = admission.reason or "Queued"
        message = admission.message or "waiting for Kueue to admit the job"
    _idle(state, inputs.pods, ConditionType.QUEUED, reason, message)


def _stop_replicas(state: _State, inputs: PlanInputs, settings: PlannerSettings,
                   reason: DeleteReason) -> None:
    """No replica may run now (suspended, or not admitted): every pod and Service goes, and
    so does what goes with the replicas; all come back when the job may run again."""
    _sweep(state, inputs.pods, settings, lambda pod: True, reason)
    state.plan.delete_services.extend(sorted(inputs.services))
    _without_replicas(state, inputs.pods, inputs.extras, settings)


def _idle(state: _State, pods: Sequence[ObservedPod], ctype: ConditionType, reason: str,
          message: str, keep_start: bool = False) -> None:
    """The plan of a job that runs nothing now (suspended or queued): `ctype` its exclusive
    condition, no index started, and the deadline clock restarts when it runs again (like
    batch/v1 Jobs, startTime is cleared meanwhile, unless `keep_start`: training-operator
    keeps it until the resume)."""
    _set_exclusive(state, ctype, reason, message)
    if not keep_start:
        state.status.start_time = None
    _refresh_active(state, pods, suspended=True)
