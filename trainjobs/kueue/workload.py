"""The Workload a job owns: its name, podSets and priority, as Kueue's job framework builds it.

Why from the rendered pods: Kueue must account for the resources the pods will really have,
including what plugins inject (a default PS server container, an accelerator's limits), so
each replica type's podSet template is that type's first rendered pod, reduced to what a
podSet template may hold (labels and annotations in metadata, as the Workload API requires)
and without what differs from pod to pod or attempt to attempt: the `env` of every container
(TF_CONFIG, MX_CONFIG, RUN_ID list peers and indexes; Kueue never reads env, and with it a
2,000-replica TfJob's Workload would not fit in etcd), the replica-index and job-role labels
and the attempt annotation. References are to Kueue v0.19.2.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainjobs.api.models import Job
from trainjobs.core.render import (
    ANNOTATION_ATTEMPT,
    LABEL_JOB_NAME,
    LABEL_JOB_ROLE,
    LABEL_REPLICA_INDEX,
    PLACEHOLDER_UID,
    RenderedJob,
)
from trainjobs.errors import TrainjobsError
from trainjobs.kueue import constants as k
from trainjobs.kueue.integrations import KUEUE_FRAMEWORK_NAMES
from trainjobs.kueue.model import MissingObject, PodSet
from trainjobs.plugin.types import Framework

__all__ = [
    "KUEUE_BUILT_IN",
    "PriorityClassNotFound",
    "PriorityClasses",
    "ResolvedPriority",
    "WorkloadBuildError",
    "build_workload",
    "handled_by_kueue",
    "job_pod_sets",
    "maximum_execution_time_seconds",
    "ordered_replica_types",
    "pod_set_name",
    "prebuilt_workload_name",
    "queue_name",
    "resolve_priority",
    "workload_name",
]

# jobframework/workload_names.go: longMaxWorkloadNameLength (ShortWorkloadNames is alpha, off).
_MAX_NAME = 253
_HASH_LENGTH = 5
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# content.IsLabelValue: at most 63 characters, alphanumerics at both ends.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Kinds Kueue has an integration of its own for (integrations.KUEUE_FRAMEWORK_NAMES): Kueue
# admits them where its Configuration enables that integration, the operator elsewhere
# (integrations.KueueIntegrations.route). MXJob's integration was removed in v0.11.
KUEUE_BUILT_IN = frozenset(KUEUE_FRAMEWORK_NAMES)
# Per-pod metadata left out of a podSet template (see the module docstring).
_PER_POD_LABELS = (LABEL_REPLICA_INDEX, LABEL_JOB_ROLE)
_PER_POD_ANNOTATIONS = (ANNOTATION_ATTEMPT,)
# admissioncheck.FilterProvReqAnnotations: job annotations that travel to the Workload.
_PROVREQ_PREFIX = "provreq.kueue.x-k8s.io/"


class WorkloadBuildError(TrainjobsError):
    """The job cannot be described as a Workload (a replica type that is no DNS label, more
    podSets than the Workload API allows)."""


class PriorityClassNotFound(MissingObject):
    """The (Workload)PriorityClass the job names does not exist. Kueue returns the API
    server's NotFound and retries; so does the operator, with the message on the job."""

    def __init__(self, plural: str, group: str, name: str) -> None:
        super().__init__(plural, name, f'{plural}.{group} "{name}" not found')


def handled_by_kueue(group: str, kind: str) -> bool:
    """True for kinds Kueue has an integration of its own for (Kubeflow's TFJob, ...); it
    admits them only where its Configuration enables it (integrations.py)."""
    return (group, kind) in KUEUE_BUILT_IN


def workload_name(owner_name: str, owner_uid: str, kind: str, group: str) -> str:
    """GetWorkloadNameForOwnerWithGVK: `<kind lowercase>-<name>` cut to 247 characters,
    then `-` and the first 5 hex digits of sha1(kind \\n group \\n name \\n uid)."""
    prefix = f"{kind.lower()}-{owner_name}"[: _MAX_NAME - 1 - _HASH_LENGTH]
    digest = hashlib.sha1("\n".join((kind, group, owner_name, owner_uid)).encode(),
                          usedforsecurity=False).hexdigest()
    return f"{prefix}-{digest[:_HASH_LENGTH]}"


def pod_set_name(replica_type: str) -> str:
    """kueue.NewPodSetReference: the lowercase replica type, which must be a DNS label."""
    name = replica_type.lower()
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise WorkloadBuildError(f"replica type {replica_type!r}: its lowercase {name!r} is not a "
                                 "DNS label, which a Kueue podSet name must be")
    return name


def queue_name(job: Job) -> str:
    """QueueNameForObject: the job's `kueue.x-k8s.io/queue-name` label ("" if none)."""
    return job.metadata.labels.get(k.LABEL_QUEUE_NAME, "")


def prebuilt_workload_name(job: Job) -> str:
    """PrebuiltWorkloadNameFor with WorkloadIdentifierAnnotations on (beta, default on in
    v0.19.2): the annotation, else the label."""
    return (job.metadata.annotations.get(k.ANNOTATION_PREBUILT_WORKLOAD)
            or job.metadata.labels.get(k.LABEL_PREBUILT_WORKLOAD, ""))


def maximum_execution_time_seconds(job: Job) -> int | None:
    """MaximumExecutionTimeSecondsForObject: the label as a positive int32, else None."""
    raw = job.metadata.labels.get(k.LABEL_MAX_EXEC_TIME_SECONDS)
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        return None
    return value if 0 < value < 2**31 else None


def ordered_replica_types(job: Job, framework: Framework) -> list[str]:
    """The job's replicaSpecs keys in the order the kind declares its replica types (as
    Kubeflow's OrderedReplicaTypes), so podSets keep one order however the API server
    orders the map; keys of one type (an alias) by name."""
    order = {t.name: i for i, t in enumerate(framework.replica_types)}

    def rank(key: str) -> tuple[int, str]:
        rtype = framework.replica_type(key)
        return (order.get(rtype.name, len(order)) if rtype else len(order), key)

    return sorted(job.spec.replica_specs, key=rank)


def _template(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    labels = {key: v for key, v in (meta.get("labels") or {}).items()
              if key not in _PER_POD_LABELS}
    annotations = {key: v for key, v in (meta.get("annotations") or {}).items()
                   if key not in _PER_POD_ANNOTATIONS}
    spec = copy.deepcopy(dict(pod.get("spec") or {}))
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            container.pop("env", None)
    out_meta: dict[str, Any] = {}
    if labels:
        out_meta["labels"] = labels
    if annotations:
        out_meta["annotations"] = annotations
    return {"metadata": out_meta, "spec": spec}


def job_pod_sets(job: Job, framework: Framework, rendered: RenderedJob) -> list[PodSet]:
    """One podSet per replica type with replicas, in `ordered_replica_types` order: named
    after the type, its count, and its first rendered pod as template. No minCount: see
    docs/kueue-design.md (elastic Workers are not partially admitted)."""
    first: dict[str, Mapping[str, Any]] = {}
    for name, replica in rendered.replicas.items():
        if replica.type not in first:
            first[replica.type] = rendered.pods[name]
    out = [PodSet(name=pod_set_name(key), count=job.spec.replica_specs[key].replicas,
                  template=_template(first[key]))
           for key in ordered_replica_types(job, framework) if key in first]
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise WorkloadBuildError(f"replica types {sorted(first)} name the same podSet twice "
                                 "once lowercased")
    if len(out) > k.MAX_POD_SETS:
        raise WorkloadBuildError(f"{len(out)} replica types with replicas: a Kueue Workload "
                                 f"holds at most {k.MAX_POD_SETS} podSets")
    return out


@dataclass(frozen=True)
class PriorityClasses:
    """The priority classes that exist (names to values), as the operator's caches see them."""

    workload: Mapping[str, int] = field(default_factory=dict)
    pod: Mapping[str, int] = field(default_factory=dict)
    # The globalDefault PriorityClass with the lowest value, if any (getDefaultPriorityClass).
    pod_default: tuple[str, int] | None = None


@dataclass(frozen=True)
class ResolvedPriority:
    """spec.priorityClassRef (group, kind, name; None if none) and spec.priority."""

    ref: tuple[str, str, str] | None
    value: int

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"priority": self.value}
        if self.ref is not None:
            out["priorityClassRef"] = dict(zip(("group", "kind", "name"), self.ref, strict=True))
        return out


def job_priority_class(job: Job, pod_sets: Sequence[PodSet]) -> str:
    """Kubeflow's PriorityClass (kubeflowjob_controller.go): the schedulingPolicy's
    priorityClass, else the first podSet's priorityClassName."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.priority_class:
        return policy.priority_class
    for pod_set in pod_sets:
        name = (pod_set.template.get("spec") or {}).get("priorityClassName")
        if name:
            return str(name)
    return ""


def resolve_priority(job: Job, pod_sets: Sequence[PodSet],
                     classes: PriorityClasses) -> ResolvedPriority:
    """ExtractPriority (reconciler.go:1716): the WorkloadPriorityClass the job's
    `kueue.x-k8s.io/priority-class` label names; else the PriorityClass of
    `job_priority_class`; else the global default PriorityClass; else 0."""
    wpc = job.metadata.labels.get(k.LABEL_PRIORITY_CLASS, "")
    if wpc:
        if wpc not in classes.workload:
            raise PriorityClassNotFound("workloadpriorityclasses", k.GROUP, wpc)
        return ResolvedPriority((k.GROUP, "WorkloadPriorityClass", wpc), classes.workload[wpc])
    name = job_priority_class(job, pod_sets)
    if name:
        if name not in classes.pod:
            raise PriorityClassNotFound("priorityclasses", "scheduling.k8s.io", name)
        return ResolvedPriority(("scheduling.k8s.io", "PriorityClass", name), classes.pod[name])
    if classes.pod_default is not None:
        default, value = classes.pod_default
        return ResolvedPriority(("scheduling.k8s.io", "PriorityClass", default), value)
    return ResolvedPriority(None, k.DEFAULT_PRIORITY)


def owner_reference(job: Job) -> dict[str, Any]:
    """ctrl.SetControllerReference: controller and blockOwnerDeletion set."""
    return {"apiVersion": job.api_version, "kind": job.kind, "name": job.name,
            "uid": job.metadata.uid or PLACEHOLDER_UID, "controller": True,
            "blockOwnerDeletion": True}


def build_workload(job: Job, pod_sets: Sequence[PodSet],
                   priority: ResolvedPriority) -> dict[str, Any]:
    """The Workload to create for `job` (ConstructWorkload + prepareWorkload,
    reconciler.go:1606 and 1698; NewWorkload in utils.go). `spec.active` is false for a
    suspended job (the job's custom workload activation, reconciler.go:430)."""
    uid = job.metadata.uid or PLACEHOLDER_UID
    group = job.api_version.rpartition("/")[0]
    # trainjobs' own label: the operator's Workload informer selects on it (Kueue's jobs'
    # Workloads do not carry it), like every other object a job owns.
    labels: dict[str, str] = {LABEL_JOB_NAME: job.name}
    if len(uid) <= 63 and _LABEL_VALUE.match(uid):
        labels[k.LABEL_JOB_UID] = uid
    annotations = {key: v for key, v in job.metadata.annotations.items()
                   if key.startswith(_PROVREQ_PREFIX) or key == k.ANNOTATION_ADMISSION_GATED_BY}
    meta: dict[str, Any] = {
        "name": workload_name(job.name, uid, job.kind, group),
        "namespace": job.namespace,
        "labels": labels,
        "finalizers": [k.FINALIZER_RESOURCE_IN_USE],
        "ownerReferences": [owner_reference(job)],
    }
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"podSets": [p.to_api() for p in pod_sets], **priority.spec()}
    if queue := queue_name(job):  # none for an unlabelled job (manageJobsWithoutQueueName)
        spec["queueName"] = queue
    max_exec = maximum_execution_time_seconds(job)
    if max_exec is not None:
        spec["maximumExecutionTimeSeconds"] = max_exec
    if job.spec.run_policy.suspend:
        spec["active"] = False
    return {"apiVersion": k.API_VERSION, "kind": "Workload", "metadata": meta, "spec": spec}
