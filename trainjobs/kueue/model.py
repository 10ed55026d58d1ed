"""Validated views of the Kueue (v1beta2) and scheduling objects the operator reads.

Why validate: a Workload is written by Kueue, by admission-check controllers and by anyone
with RBAC; the operator must never crash on (or `assert` about) what it reads. Each `parse_*`
turns a JSON object into a frozen model or raises `MalformedObject` naming the object and the
fields; unknown fields are ignored (newer Kueue versions add some). Only the fields the
integration decides on are modelled; pod templates stay plain JSON, compared as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from trainjobs.errors import TrainjobsError

__all__ = [
    "AdmissionCheckState",
    "KueueAdmission",
    "MalformedObject",
    "MissingObject",
    "ObjectMeta",
    "OwnerReference",
    "PodSet",
    "PodSetAssignment",
    "PodSetUpdate",
    "PriorityClass",
    "PriorityClassRef",
    "ResourceFlavor",
    "TolerationSpec",
    "Workload",
    "WorkloadCondition",
    "WorkloadPriorityClass",
    "parse_priority_class",
    "parse_resource_flavor",
    "parse_workload",
    "parse_workload_priority_class",
]


class MalformedObject(TrainjobsError):
    """An object read from the cluster does not have the shape its API promises."""

    def __init__(self, kind: str, name: str, problems: list[str]) -> None:
        self.kind, self.name, self.problems = kind, name, problems
        super().__init__(f"malformed {kind} {name!r}: " + "; ".join(problems))


class MissingObject(TrainjobsError):
    """An object the job's Workload needs (a ResourceFlavor, a priority class) is not in the
    operator's caches. Kueue returns the Get's NotFound and retries with back-off; so does
    the operator, and it reconciles the job again as soon as the object appears.

    `resource` is the informer's plural ("resourceflavors", ...), `name` the object's."""

    def __init__(self, resource: str, name: str, message: str) -> None:
        self.resource, self.name = resource, name
        super().__init__(message)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="ignore", frozen=True)

    def to_api(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OwnerReference(_Model):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(_Model):
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: tuple[OwnerReference, ...] = ()
    finalizers: tuple[str, ...] = ()
    deletion_timestamp: str | None = None

    def controller(self) -> OwnerReference | None:
        """metav1.GetControllerOf: the owner reference with controller: true."""
        return next((o for o in self.owner_references if o.controller), None)


class WorkloadCondition(_Model):
    """A metav1.Condition; timestamps kept as the RFC 3339 strings the API wrote."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class TolerationSpec(_Model):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class PodSet(_Model):
    # The CRD defaults name to "main" and count to 1 (kubebuilder:default).
    name: str = "main"
    count: int = Field(default=1, ge=0)
    min_count: int | None = Field(default=None, ge=1)
    template: dict[str, Any] = Field(default_factory=dict)


class PriorityClassRef(_Model):
    group: str = ""
    kind: str = ""
    name: str = ""


class PodSetAssignment(_Model):
    name: str
    flavors: dict[str, str] = Field(default_factory=dict)
    count: int | None = Field(default=None, ge=0)
    topology_assignment: dict[str, Any] | None = None
    delayed_topology_request: str | None = None


class KueueAdmission(_Model):
    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...] = ()


class PodSetUpdate(_Model):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[TolerationSpec, ...] = ()


class AdmissionCheckState(_Model):
    name: str = ""
    state: str = ""
    message: str = ""
    pod_set_updates: tuple[PodSetUpdate, ...] = ()


class WorkloadSpec(_Model):
    pod_sets: tuple[PodSet, ...] = ()
    queue_name: str = ""
    priority_class_ref: PriorityClassRef | None = None
    priority: int | None = None
    active: bool | None = None
    maximum_execution_time_seconds: int | None = None


class WorkloadStatus(_Model):
    conditions: tuple[WorkloadCondition, ...] = ()
    admission: KueueAdmission | None = None
    admission_checks: tuple[AdmissionCheckState, ...] = ()
    accumulated_past_execution_time_seconds: int | None = None


class Workload(_Model):
    metadata: ObjectMeta
    spec: WorkloadSpec = Field(default_factory=WorkloadSpec)
    status: WorkloadStatus = Field(default_factory=WorkloadStatus)

    def condition(self, ctype: str) -> WorkloadCondition | None:
        return next((c for c in self.status.conditions if c.type == ctype), None)

    def is_true(self, ctype: str) -> bool:
        """apimeta.IsStatusConditionTrue."""
        cond = self.condition(ctype)
        return cond is not None and cond.status == "True"

    @property
    def active(self) -> bool:
        """workload.IsActive: spec.active, true when unset."""
        return self.spec.active is not False


class _FlavorSpec(_Model):
    node_labels: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[TolerationSpec, ...] = ()


class ResourceFlavor(_Model):
    metadata: ObjectMeta
    spec: _FlavorSpec = Field(default_factory=_FlavorSpec)


class WorkloadPriorityClass(_Model):
    metadata: ObjectMeta
    value: int


class PriorityClass(_Model):
    """scheduling.k8s.io/v1 PriorityClass."""

    metadata: ObjectMeta
    value: int
    global_default: bool = False


M = TypeVar("M", bound=_Model)


def _parse(model: type[M], kind: str, obj: Mapping[str, Any]) -> M:
    name = ""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if isinstance(meta, Mapping):
        name = str(meta.get("name", ""))
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise MalformedObject(kind, name, problems) from None


def parse_workload(obj: Mapping[str, Any]) -> Workload:
    return _parse(Workload, "Workload", obj)


def parse_resource_flavor(obj: Mapping[str, Any]) -> ResourceFlavor:
    return _parse(ResourceFlavor, "ResourceFlavor", obj)


def parse_workload_priority_class(obj: Mapping[str, Any]) -> WorkloadPriorityClass:
    return _parse(WorkloadPriorityClass, "WorkloadPriorityClass", obj)


def parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass:
    return _parse(PriorityClass, "PriorityClass", obj)
