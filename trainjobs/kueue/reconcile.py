"""One reconcile of a job against Kueue, in the order of Kueue's own job reconciler.

Why one pure function: ReconcileGenericJob (pkg/controller/jobframework/reconciler.go,
v0.19.2, lines 297-673) is a precise sequence of checks, each of which may make one write
and end the pass; the next pass starts over on the new state (the write's watch event
triggers it). `decide` follows that sequence and returns the one write (`action`) plus the
`Admission` the planner must obey in this pass. The Admission is computed from the state
alone, so the planner stops an evicted job's pods in the same pass that writes, say, PodsReady.

The mapping of Kueue's GenericJob to a trainjobs job: Kueue suspends a job by editing its
spec; trainjobs instead holds the job's replicas (the planner creates none while the
Admission says no), so Kueue's "job is suspended" is "the job has no active pod"
(`JobState.active`), `stopJob` is an `Eviction` (pods deleted, not counted as a failure) and
`startJob` an admitted Admission with the flavors' changes applied to the pods. The user's
`runPolicy.suspend` deactivates the Workload (Kueue's JobWithCustomWorkloadActivation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainjobs.api.models import Job
from trainjobs.core.admission import Admission, Eviction, PodSetConflict, merge_into_pod
from trainjobs.core.render import LABEL_JOB_NAME
from trainjobs.kube.selector import LabelSelector, parse_selector
from trainjobs.kueue import constants as k
from trainjobs.kueue.assignment import FlavorNotFound, pod_set_changes, waiting_reason
from trainjobs.kueue.conditions import (
    condition_of,
    finished_conditions,
    pods_ready_condition,
    release_quota_patch,
)
from trainjobs.kueue.equivalence import workload_matches
from trainjobs.kueue.integrations import DEFAULT_CONFIG_MAP, IntegrationMode, parse_config_map
from trainjobs.kueue.model import MissingObject, PodSet, ResourceFlavor, Workload
from trainjobs.kueue.workload import (
    PriorityClasses,
    PriorityClassNotFound,
    build_workload,
    maximum_execution_time_seconds,
    owner_reference,
    prebuilt_workload_name,
    queue_name,
    resolve_priority,
)

__all__ = [
    "ApplyCondition",
    "CreateWorkload",
    "DeleteWorkloads",
    "JobState",
    "KueueSettings",
    "PatchWorkload",
    "Step",
    "decide",
    "finalize_orphan",
    "finish_workload",
    "without_finalizer",
]


@dataclass(frozen=True)
class KueueSettings:
    # Kueue's manageJobsWithoutQueueName: jobs without the queue label are managed too (in
    # the namespaces `managed_jobs_namespace_selector` matches; the operator checks that).
    manage_jobs_without_queue_name: bool = False
    # Kueue's managedJobsNamespaceSelector: which namespaces' unlabelled jobs are managed.
    managed_jobs_namespace_selector: LabelSelector = field(
        default_factory=lambda: parse_selector(k.DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR))
    # Write the PodsReady condition (reconciler.go:547 does it when Kueue's
    # waitForPodsReady is enabled; the operator cannot read Kueue's Configuration, and the
    # condition is harmless otherwise).
    report_pods_ready: bool = True
    # Who admits a kind Kueue can integrate itself (Kubeflow's TFJob): integrations.py.
    kubeflow_integration: IntegrationMode = IntegrationMode.AUTO
    # With `auto`: the ConfigMap (namespace, name) holding Kueue's Configuration.
    config_map: tuple[str, str] = field(
        default_factory=lambda: parse_config_map(DEFAULT_CONFIG_MAP))


@dataclass(frozen=True)
class JobState:
    """What the reconcile knows of the job (Kueue's GenericJob methods)."""

    job: Job
    pod_sets: tuple[PodSet, ...]  # workload.job_pod_sets of the job as rendered now
    active: bool                  # IsActive: a pod of the job is pending or running
    pods_ready: bool              # PodsReady: the job is Running (Kubeflow's rule)
    finished: tuple[bool, str] | None = None  # Finished: (succeeded, message) once finished
    local: bool = True            # False: spec.managedBy names another controller (MultiKueue)


@dataclass(frozen=True)
class CreateWorkload:
    manifest: dict[str, Any]


@dataclass(frozen=True)
class DeleteWorkloads:
    """workload.Delete per Workload: remove Kueue's finalizer (a merge patch of
    metadata.finalizers with the resourceVersion), then DELETE unless already deleting."""

    workloads: tuple[Workload, ...]


@dataclass(frozen=True)
class PatchWorkload:
    """A JSON merge patch of the Workload (`subresource` "status" for its status)."""

    name: str
    patch: dict[str, Any]
    subresource: str = ""


@dataclass(frozen=True)
class ApplyCondition:
    """A server-side apply of one condition of the Workload's status, field manager
    `trainjobs-<type>` (workload.SetConditionAndUpdate: Kueue's default, an apply per
    condition type with force). The Workload's conditions are a list map keyed by type, so
    the apply changes that one condition and no other: it needs no resourceVersion, and a
    Workload that Kueue changed a moment earlier (it writes QuotaReserved and Admitted right
    after the Workload is created) is not refused with 409. Kueue's strict apply carries the
    resourceVersion; this one is its WithLooseOnApply, since a condition computed on a stale
    Workload is corrected by the next pass."""

    name: str
    condition: dict[str, Any]

    @property
    def field_manager(self) -> str:
        return f"trainjobs-{self.condition['type']}"

    def body(self, namespace: str) -> dict[str, Any]:
        return {"apiVersion": k.API_VERSION, "kind": "Workload",
                "metadata": {"name": self.name, "namespace": namespace},
                "status": {"conditions": [self.condition]}}


Action = CreateWorkload | DeleteWorkloads | PatchWorkload | ApplyCondition


@dataclass(frozen=True)
class Step:
    """The outcome of one pass. `admission` None: Kueue does not manage the job (no queue
    label): the operator behaves as without Kueue. `retry`: reconcile again with back-off
    (Kueue returns an error). `missing`: the object whose absence made the pass retry
    (reconcile again as soon as it appears). `events`: (reason, message) Normal events for
    the job."""

    admission: Admission | None
    action: Action | None = None
    events: tuple[tuple[str, str], ...] = ()
    retry: bool = False
    local: bool = True
    workload: str = ""
    missing: MissingObject | None = None


@dataclass
class _Pass:
    state: JobState
    owned: Sequence[Workload]
    prebuilt: Workload | None
    flavors: Mapping[str, ResourceFlavor]
    classes: PriorityClasses
    settings: KueueSettings
    now: datetime
    events: list[tuple[str, str]] = field(default_factory=list)

    @property
    def job(self) -> Job:
        return self.state.job

    def key(self, wl: Workload) -> str:
        return f"{wl.metadata.namespace}/{wl.metadata.name}"

    def step(self, admission: Admission | None, action: Action | None = None,
             retry: bool = False, wl: Workload | None = None,
             missing: MissingObject | None = None) -> Step:
        return Step(admission, action, tuple(self.events), retry or missing is not None,
                    self.state.local, wl.metadata.name if wl else "", missing)


def _meta_patch(wl: Workload, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": wl.metadata.resource_version, **meta}}


def _spec_patch(wl: Workload, spec: Mapping[str, Any]) -> PatchWorkload:
    return PatchWorkload(wl.metadata.name, {**_meta_patch(wl), "spec": dict(spec)})


def without_finalizer(wl: Workload) -> PatchWorkload | None:
    """Kueue's resource-in-use finalizer removed from `wl` (None: it has none): the one
    patch every path that lets a Workload go writes (finish, orphan, delete)."""
    if k.FINALIZER_RESOURCE_IN_USE not in wl.metadata.finalizers:
        return None
    rest = [f for f in wl.metadata.finalizers if f != k.FINALIZER_RESOURCE_IN_USE]
    return PatchWorkload(wl.metadata.name, _meta_patch(wl, finalizers=rest))


def _finish(p: _Pass, wl: Workload, reason: str, message: str) -> ApplyCondition:
    return finish_workload(wl, reason, message, p.now)


def finish_workload(wl: Workload, reason: str, message: str, now: datetime) -> ApplyCondition:
    """workloadfinish.Finish: the Finished condition, applied on its own."""
    return ApplyCondition(wl.metadata.name, condition_of(
        finished_conditions(wl, reason, message, now), k.COND_FINISHED))


def _replica_types(state: JobState) -> dict[str, str]:
    """podSet name -> replicaSpecs key."""
    return {key.lower(): key for key in state.job.spec.replica_specs}


def _matches(p: _Pass, wl: Workload) -> bool:
    job = p.job
    return workload_matches(wl, job.name, job.metadata.uid, p.state.pod_sets,
                            maximum_execution_time_seconds(job))


def _stopped(reason: str, message: str, wl: Workload | None = None) -> Admission:
    return Admission(admitted=False, reason=reason, message=message,
                     eviction=Eviction(reason, message),
                     workload=wl.metadata.name if wl else "")


def _observed(p: _Pass, wl: Workload) -> Admission:
    """The Admission `wl` implies now (what the rest of the pass would tell the job)."""
    evicted = wl.condition(k.COND_EVICTED)
    if evicted is not None and evicted.status == "True":
        return _stopped(evicted.reason, evicted.message, wl)
    if wl.is_true(k.COND_ADMITTED):
        changes = pod_set_changes(wl, p.flavors, _replica_types(p.state))
        # RunWithPodSetsInfo's podset.Merge into each type's template: a conflict with what
        # the pods already have (a template's nodeSelector) is found here, before any pod.
        for pod_set in p.state.pod_sets:
            key = _replica_types(p.state).get(pod_set.name)
            if key in changes:
                merge_into_pod(pod_set.template, changes[key])
        admission = wl.status.admission
        return Admission(admitted=True, pod_sets=changes,
                         cluster_queue=admission.cluster_queue if admission else "",
                         workload=wl.metadata.name)
    if p.state.active:
        return _stopped("NotAdmitted", "Not admitted by cluster queue", wl)
    reason, message = waiting_reason(wl)
    return Admission.waiting(reason, message, wl.metadata.name)


def _settled(p: _Pass, wl: Workload) -> Admission:
    """`_observed`, for passes that write something else first: a flavor not cached yet or a
    conflicting pod-set update is reported (and acted on) by the pass that reaches step 7."""
    try:
        return _observed(p, wl)
    except (FlavorNotFound, PodSetConflict) as exc:
        return Admission.waiting(type(exc).__name__, str(exc), wl.metadata.name)


def _priority_update(p: _Pass, wl: Workload) -> PatchWorkload | None:
    """UpdateWorkloadPriority (reconciler.go:1216-1319) for the one matching Workload."""
    label = p.job.metadata.labels.get(k.LABEL_PRIORITY_CLASS, "")
    ref = wl.spec.priority_class_ref
    if ref is None and wl.is_true(k.COND_QUOTA_RESERVED):
        return None  # a priorityClassRef can no longer be added (Workload CEL)
    if ref is not None and (ref.group, ref.kind) != (k.GROUP, "WorkloadPriorityClass"):
        return None  # a pod PriorityClass does not follow the label
    if (ref.name if ref else "") == label:
        return None
    resolved = resolve_priority(p.job, p.state.pod_sets, p.classes)
    current = (ref.group, ref.kind, ref.name) if ref else None
    if (current, wl.spec.priority) == (resolved.ref, resolved.value):
        return None
    p.events.append(("UpdatedWorkload", f"Updated workload priority class: {p.key(wl)}"))
    return _spec_patch(wl, resolved.spec())


def _ensure_one(p: _Pass) -> tuple[Workload | None, Step | None]:
    """ensureOneWorkload (reconciler.go:980-1148): the job's one Workload, or the write
    that must come first."""
    job, state = p.job, p.state
    if prebuilt_workload_name(job):
        wl = p.prebuilt
        if wl is None:
            return None, None
        owner = wl.metadata.controller()
        if owner is not None and owner.uid != job.metadata.uid:
            return None, None  # controlled by another object: ignored
        if owner is None:  # EnsurePrebuiltWorkloadOwnership
            labels = {**wl.metadata.labels, k.LABEL_JOB_UID: job.metadata.uid,
                      LABEL_JOB_NAME: job.name}
            refs = [*(o.to_api() for o in wl.metadata.owner_references), owner_reference(job)]
            patch = PatchWorkload(wl.metadata.name,
                                  _meta_patch(wl, labels=labels, ownerReferences=refs))
            return None, p.step(Admission.waiting("Pending", f"taking ownership of the "
                                                  f"prebuilt Workload {p.key(wl)}"), patch,
                                wl=wl)
        if not _matches(p, wl):
            if wl.is_true(k.COND_FINISHED):
                return None, None
            message = "The prebuilt workload is out of sync with its user job"
            return None, p.step(_stopped("NoMatchingWorkload", message, wl),
                                _finish(p, wl, "OutOfSync", message), wl=wl)
        return wl, None

    match: Workload | None = None
    to_delete: list[Workload] = []
    for wl in p.owned:
        if match is None and _matches(p, wl):
            match = wl
        else:
            to_delete.append(wl)
    to_update: Workload | None = None
    if (match is None and to_delete and not state.active
            and not to_delete[0].is_true(k.COND_QUOTA_RESERVED)):
        to_update, to_delete = to_delete[0], to_delete[1:]

    stop: Admission | None = None
    if match is None and state.active and state.finished is None:
        message = ("No matching Workload; restoring pod templates according to existent "
                   "Workload" if len(to_delete) == 1 else
                   "Missing Workload; unable to restore pod templates")
        stop = _stopped("NoMatchingWorkload", message)
    if to_delete:
        for wl in to_delete:
            p.events.append(("DeletedWorkload", f"Deleted not matching Workload: {p.key(wl)}"))
        admission = stop or (_settled(p, match) if match is not None else
                             Admission.waiting("Pending", "replacing a Workload that no "
                                               "longer matches the job"))
        return None, p.step(admission, DeleteWorkloads(tuple(to_delete)), retry=True)
    if to_update is not None:  # updateWorkloadToMatchJob (reconciler.go:1460)
        try:
            desired = _desired(p)
        except PriorityClassNotFound as exc:
            return None, p.step(Admission.waiting("PriorityClassNotFound", str(exc)),
                                missing=exc)
        spec = dict(desired["spec"])
        spec["active"] = to_update.spec.active
        p.events.append(("UpdatedWorkload", "Updated not matching Workload for suspended "
                         f"job: {p.key(to_update)}"))
        return None, p.step(Admission.waiting("Pending", "updating the Workload to match the "
                                              "job"), _spec_patch(to_update, spec), wl=to_update)
    if match is None:
        return None, (p.step(stop) if stop is not None else None)
    gated = p.job.metadata.annotations.get(k.ANNOTATION_ADMISSION_GATED_BY)
    if gated != match.metadata.annotations.get(k.ANNOTATION_ADMISSION_GATED_BY):
        p.events.append(("UpdatedWorkload",
                         f'Updated workload AdmissionGatedBy to "{gated or ""}"'))
        return None, p.step(_settled(p, match), PatchWorkload(match.metadata.name, _meta_patch(
            match, annotations={k.ANNOTATION_ADMISSION_GATED_BY: gated})), wl=match)
    try:
        priority = _priority_update(p, match)
    except PriorityClassNotFound as exc:
        return None, p.step(Admission.waiting("PriorityClassNotFound", str(exc),
                                              match.metadata.name), wl=match, missing=exc)
    if priority is not None:
        return None, p.step(_settled(p, match), priority, wl=match)
    return match, None


def _desired(p: _Pass) -> dict[str, Any]:
    priority = resolve_priority(p.job, p.state.pod_sets, p.classes)
    return build_workload(p.job, p.state.pod_sets, priority)


def finalize_orphan(wl: Workload, now: datetime) -> ApplyCondition | PatchWorkload | None:
    """FinalizeOrphanedWorkload (pkg/workload/workload.go:1421), for a Workload whose job is
    gone or being deleted (reconciler.go:317 and 732): Finished with reason OwnerNotFound
    (FinishOrphanedWorkloads is on in v0.19.2) unless it is being deleted or has no
    controller, then Kueue's finalizer removed. One write per call: the Workload's next
    watch event brings the second."""
    if (not wl.metadata.deletion_timestamp and wl.metadata.controller() is not None
            and not wl.is_true(k.COND_FINISHED)):
        return finish_workload(wl, "OwnerNotFound", "The workload's owner no longer exists",
                               now)
    return without_finalizer(wl)


def decide(state: JobState, owned: Sequence[Workload], flavors: Mapping[str, ResourceFlavor],
           classes: PriorityClasses, now: datetime, prebuilt: Workload | None = None,
           settings: KueueSettings = KueueSettings()) -> Step:
    """One pass of ReconcileGenericJob for `state.job`. `owned`: the Workloads in the job's
    namespace whose controller reference names the job's kind and name (Kueue's owner
    index); `prebuilt`: the Workload named by the job's prebuilt-workload-name, if any;
    `flavors`, `classes`: the cluster's ResourceFlavors and priority classes."""
    p = _Pass(state, owned, prebuilt, flavors, classes, settings, now)
    job = state.job
    if job.metadata.deletion_timestamp is not None:  # loadJob, finalize (reconciler.go:317)
        for orphan in owned:
            action = finalize_orphan(orphan, now)
            if action is not None:
                return Step(None, action, local=state.local, workload=orphan.metadata.name)
        return Step(None, local=state.local)
    if not settings.manage_jobs_without_queue_name and not queue_name(job):
        return Step(None, local=state.local)  # reconciler.go:364

    wl, early = _ensure_one(p)  # 1 (reconciler.go:410)
    if early is not None:
        return early

    active_wanted = not job.spec.run_policy.suspend
    if wl is not None and wl.active != active_wanted:  # custom activation (reconciler.go:430)
        return p.step(_settled(p, wl), _spec_patch(wl, {"active": active_wanted}), wl=wl)

    if wl is not None and wl.is_true(k.COND_FINISHED):  # reconciler.go:440
        cond = wl.condition(k.COND_FINISHED)
        message = cond.message if cond else ""
        p.events.append(("FinishedWorkload", f"Workload '{p.key(wl)}' is declared finished"))
        admission = Admission(admitted=False, reason="WorkloadFinished", message=message,
                              eviction=Eviction("WorkloadFinished", message) if state.active
                              else None, workload=wl.metadata.name)
        return p.step(admission, without_finalizer(wl), wl=wl)

    if wl is not None and wl.metadata.deletion_timestamp:  # 1.1 (reconciler.go:452)
        return p.step(_stopped("WorkloadDeleted", "Workload is deleted", wl),
                      without_finalizer(wl), wl=wl)

    if state.finished is not None:  # 3 (reconciler.go:484)
        admission = _settled(p, wl) if wl is not None else Admission(admitted=False)
        if wl is None:
            return p.step(admission)
        succeeded, message = state.finished
        p.events.append(("FinishedWorkload", f"Workload '{p.key(wl)}' is declared finished"))
        return p.step(admission, _finish(p, wl, "Succeeded" if succeeded else "Failed",
                                         message), wl=wl)

    if wl is None:  # 3 (reconciler.go:508), handleJobWithNoWorkload (1795)
        if prebuilt_workload_name(job):
            return p.step(_stopped("NoMatchingWorkload", "missing workload"), retry=True)
        if state.active:
            return p.step(_stopped("NoMatchingWorkload",
                                   "Missing Workload; unable to restore pod templates"))
        try:
            manifest = _desired(p)
        except PriorityClassNotFound as exc:
            return p.step(Admission.waiting("PriorityClassNotFound", str(exc)), missing=exc)
        name = manifest["metadata"]["name"]
        p.events.append(("CreatedWorkload", f"Created Workload: {job.namespace}/{name}"))
        return Step(Admission.waiting("Pending", f"Workload {name} created; waiting for Kueue "
                                      "to admit it", name), CreateWorkload(manifest),
                    tuple(p.events), local=state.local, workload=name)

    try:
        admission = _observed(p, wl)
    except FlavorNotFound as exc:
        return p.step(Admission.waiting("FlavorNotFound", str(exc), wl.metadata.name),
                      wl=wl, missing=exc)
    except PodSetConflict as exc:  # podset.IsPermanent (reconciler.go:629)
        return p.step(Admission.waiting("FailedToStart", str(exc), wl.metadata.name),
                      _finish(p, wl, "FailedToStart", str(exc)), wl=wl)

    if settings.report_pods_ready:  # 5 (reconciler.go:547)
        ready = pods_ready_condition(wl, state.pods_ready)
        if ready.differs_from(wl):
            return p.step(admission, ApplyCondition(
                wl.metadata.name, condition_of(ready.apply(wl, now), k.COND_PODS_READY)), wl=wl)

    if admission.eviction is not None and wl.is_true(k.COND_EVICTED):  # 6 (reconciler.go:581)
        release = None if state.active else release_quota_patch(wl, now)
        if release is not None:
            return p.step(admission, PatchWorkload(wl.metadata.name, release, "status"), wl=wl)
        return p.step(admission, wl=wl)

    if not state.active:  # 7 "suspended" (reconciler.go:622)
        if admission.admitted:
            p.events.append(("Started", f"Admitted by clusterQueue {admission.cluster_queue}"))
            return p.step(admission, wl=wl)
        if wl.is_true(k.COND_QUOTA_RESERVED) and admission.reason == "AdmissionChecksPending":
            p.events.append(("UpdatedAdmissionCheck", admission.message[:1024]))
        if wl.spec.queue_name != queue_name(job):  # QueueNameChange (reconciler.go:753)
            # (A label removed: the field goes, the CRD refuses an empty queue name.)
            return p.step(admission, _spec_patch(wl, {"queueName": queue_name(job) or None}),
                          wl=wl)
    return p.step(admission, wl=wl)  # 8 (reconciler.go:654): NotAdmitted stop, or running
