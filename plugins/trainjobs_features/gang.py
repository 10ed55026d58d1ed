"""What the gang-scheduling plugins share: the controller config, minMember, minResources.

Gang scheduling is off unless the operator's controller config (or `trainjobs operator
--gang-scheduler`) names a scheduler::

    gangScheduling:
      scheduler: volcano            # none (default) | coscheduling | volcano
      schedulerName: volcano        # the pods' schedulerName; default per scheduler
      scheduleTimeoutSeconds: 60    # coscheduling only: the PodGroup's scheduleTimeoutSeconds
                                  # (a job's schedulingPolicy.scheduleTimeoutSeconds wins)

This module is a plugin too, for one check whatever the scheduler (`trainjobs_validate`).
Each scheduler is its own plugin (`coscheduling.py`, `volcano.py`) acting only when chosen;
both give the job one PodGroup named like the job, with `minMember` (`min_member`) and
`minResources` (`schedulingPolicy.minResources` when the job sets it, as Kubeflow's
training-operator does, else `min_resources`), and mark every pod as a member. Only the
Kubernetes backend gang-schedules: `trainjobs run` starts every replica at once anyway.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from trainjobs.plugin import (
    Framework,
    Job,
    ObjectStatus,
    OwnedResource,
    PluginError,
    RenderContext,
    Replica,
    SpecError,
    config_section,
    hookimpl,
)

__all__ = ["CONFIG_KEY", "SCHEDULERS", "GangConfig", "GangPlugin", "format_quantity",
           "gang_config", "gang_for", "min_member", "min_per_type", "min_resources",
           "parse_gang_section", "parse_quantity", "pod_group_counts",
           "trainjobs_check_config", "trainjobs_config_overrides", "trainjobs_validate"]

CONFIG_KEY = "gangScheduling"
#: The schedulers and the schedulerName their pods get unless the config says otherwise:
#: scheduler-plugins installed as a second scheduler uses this profile name (its Helm chart's
#: default), Volcano's scheduler is `volcano`.
SCHEDULERS = {"none": "", "coscheduling": "scheduler-plugins-scheduler", "volcano": "volcano"}


@dataclass(frozen=True)
class GangConfig:
    scheduler: str = "none"
    scheduler_name: str = ""
    schedule_timeout_seconds: int | None = None


def gang_config(controller_config: Mapping[str, object]) -> GangConfig:
    """The `gangScheduling` section, parsed once per operator config; a `PluginError` naming
    the field when it is malformed (raised when the operator starts, by `trainjobs_check_config`:
    the hooks see only valid configs)."""
    return config_section(controller_config, CONFIG_KEY, parse_gang_section)


def parse_gang_section(section: object) -> GangConfig:
    """`gangScheduling` as written (None when absent) as a `GangConfig`."""
    raw = section or {}
    if not isinstance(raw, Mapping):
        raise PluginError(f"controller config {CONFIG_KEY}: expected a mapping, got {raw!r}")
    unknown = sorted(set(raw) - {"scheduler", "schedulerName", "scheduleTimeoutSeconds"})
    if unknown:
        raise PluginError(f"controller config {CONFIG_KEY}: unknown field(s) {unknown}")
    scheduler = raw.get("scheduler") or "none"
    if scheduler not in SCHEDULERS:
        raise PluginError(f"controller config {CONFIG_KEY}.scheduler: {scheduler!r} is not one "
                          f"of {', '.join(SCHEDULERS)}")
    name = raw.get("schedulerName") or SCHEDULERS[str(scheduler)]
    if not isinstance(name, str):
        raise PluginError(f"controller config {CONFIG_KEY}.schedulerName: expected a string")
    timeout = raw.get("scheduleTimeoutSeconds")
    if timeout is not None and (type(timeout) is not int or timeout < 1):
        raise PluginError(f"controller config {CONFIG_KEY}.scheduleTimeoutSeconds: expected "
                          f"a positive integer, got {timeout!r}")
    return GangConfig(str(scheduler), name, timeout)


@hookimpl
def trainjobs_config_overrides(options: Mapping[str, object]) -> Mapping[str, object] | None:
    """`--gang-scheduler` wins over the config file's `gangScheduling.scheduler`."""
    scheduler = options.get("gang_scheduler")
    if scheduler is None:
        return None
    if scheduler not in SCHEDULERS:
        raise PluginError(f"--gang-scheduler: {scheduler!r} is not one of "
                          f"{', '.join(SCHEDULERS)}")
    return {CONFIG_KEY: {"scheduler": scheduler}}


@hookimpl
def trainjobs_check_config(controller_config: Mapping[str, object]) -> None:
    gang_config(controller_config)


def gang_for(scheduler: str, ctx: RenderContext) -> GangConfig | None:
    """The config when `scheduler` is the one chosen and the job runs on Kubernetes."""
    if ctx.backend != "kubernetes":
        return None
    config = gang_config(ctx.controller_config)
    return config if config.scheduler == scheduler else None


class GangPlugin:
    """The hooks both gang plugins share. Per scheduler: its name, its PodGroup's apiVersion,
    where a pod names its group (`member`: metadata "labels" or "annotations", and the key),
    what its PodGroup's spec holds besides minMember/minResources (`spec`), and how to read
    a PodGroup's status as (phase, message) (`describe`)."""

    def __init__(self, scheduler: str, api_version: str, member: tuple[str, str],
                 spec: Callable[[Job, GangConfig], dict[str, Any]],
                 describe: Callable[[dict[str, Any]], tuple[str, str]],
                 task_annotation: str = "") -> None:
        self.scheduler = scheduler
        self.api_version = api_version
        self.member = member
        self.spec = spec
        self.describe = describe
        # Where a pod names its replica type for the scheduler (Volcano's per-task minimum).
        self.task_annotation = task_annotation

    @hookimpl
    def trainjobs_owned_resources(
        self, controller_config: Mapping[str, object],
    ) -> Sequence[OwnedResource] | None:
        """Watch the PodGroups when this scheduler is chosen; they go with the pods (suspend,
        cleanup) and come back with them."""
        if gang_config(controller_config).scheduler != self.scheduler:
            return None
        return [OwnedResource(self.api_version, "PodGroup", "podgroups", with_replicas=True)]

    @hookimpl
    def trainjobs_adjust_pod(self, job: Job, replica: Replica, pod: dict[str, Any],
                             ctx: RenderContext) -> None:
        config = gang_for(self.scheduler, ctx)
        if config is not None:
            where, key = self.member
            pod["metadata"].setdefault(where, {})[key] = job.name
            if self.task_annotation:
                pod["metadata"].setdefault("annotations", {})[self.task_annotation] = \
                    replica.type_lower
            # A template that names its scheduler keeps it (docs/scheduling.md says so).
            pod["spec"].setdefault("schedulerName", config.scheduler_name)

    @hookimpl
    def trainjobs_extra_objects(self, job: Job,
                                ctx: RenderContext) -> Sequence[dict[str, Any]] | None:
        """The job's PodGroup, named like the job."""
        config = gang_for(self.scheduler, ctx)
        if config is None:
            return None
        members = min_member(job)
        spec: dict[str, Any] = {"minMember": members, **self.spec(job, config)}
        policy = job.spec.run_policy.scheduling_policy
        # schedulingPolicy.minResources as written (Kubeflow's field; quantities as strings,
        # as a ResourceList serialises), else computed.
        resources = {k: str(v) for k, v in policy.min_resources.items()} \
            if policy is not None and policy.min_resources is not None \
            else min_resources(job, members)
        if resources:
            spec["minResources"] = resources
        return [{"apiVersion": self.api_version, "kind": "PodGroup",
                 "metadata": {"name": job.name}, "spec": spec}]

    @hookimpl
    def trainjobs_object_status(self, job: Job, obj: dict[str, Any]) -> ObjectStatus | None:
        if obj.get("apiVersion") != self.api_version or obj.get("kind") != "PodGroup":
            return None
        phase, message = self.describe(obj)
        return ObjectStatus("PodGroup", str(obj["metadata"]["name"]), phase, message)


def pod_group_counts(obj: Mapping[str, Any], *fields: str) -> str:
    """`minMember 6: 0 scheduled, 2 running, ...` from a PodGroup's spec and status."""
    status = obj.get("status") or {}
    counts = ", ".join(f"{status.get(f, 0)} {f}" for f in fields)
    return f"minMember {(obj.get('spec') or {}).get('minMember', 0)}: {counts}"


def min_member(job: Job) -> int:
    """`schedulingPolicy.minAvailable`, else every replica — for an elastic replica type only
    its `minReplicas` (the job can run with that many Workers)."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return sum(min_per_type(job).values())


def min_per_type(job: Job) -> dict[str, int]:
    """The pods each replica type needs to run (lowercase type): all of them, or an elastic
    type's `minReplicas` — which pods make up minMember, when no minAvailable says "any N"."""
    return {key.lower(): r.elastic_policy.min_replicas if r.elastic_policy else r.replicas
            for key, r in job.spec.replica_specs.items()}


@hookimpl
def trainjobs_validate(job: Job, framework: Framework) -> Sequence[SpecError] | None:
    """A gang larger than the job never starts: refused whether gang scheduling is on or not
    (a minAvailable above the job's size is a mistake either way)."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is None or policy.min_available is None:
        return []
    most = sum(max(r.replicas, r.elastic_policy.max_replicas if r.elastic_policy else 0)
               for r in job.spec.replica_specs.values())
    if policy.min_available <= most:
        return []
    return [SpecError("spec.runPolicy.schedulingPolicy.minAvailable",
                      f"{policy.min_available} is more than the job's {most} replicas: a gang "
                      f"that large would never be scheduled")]


def min_resources(job: Job, members: int) -> dict[str, str]:
    """What `members` pods request together: the first `members` pods, non-elastic replica
    types first (in replicaSpecs order), then the elastic ones — the pods without which the
    job cannot run. Each pod counts as the scheduler counts it: the larger of its containers'
    sum and its largest init container, a request defaulting to the limit."""
    order = sorted(job.spec.replica_specs.values(), key=lambda r: r.elastic_policy is not None)
    total: dict[str, Decimal] = {}
    left = members
    for rspec in order:
        count = min(left, rspec.replicas)
        left -= count
        for resource, value in _pod_requests(rspec.template).items():
            total[resource] = total.get(resource, Decimal(0)) + value * count
    return {k: format_quantity(v) for k, v in sorted(total.items()) if v > 0}


def _pod_requests(template: Mapping[str, Any]) -> dict[str, Decimal]:
    spec = template.get("spec") or {}
    summed: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for resource, value in _container_requests(container).items():
            summed[resource] = summed.get(resource, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for resource, value in _container_requests(container).items():
            summed[resource] = max(summed.get(resource, Decimal(0)), value)
    return summed


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {str(k): parse_quantity(v) for k, v in merged.items()}


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[mkMGTPE])?)$")
_SUFFIX: dict[str, Decimal | int] = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes resource quantity (`500m`, `2Gi`, `1e3`, `4`) as a number.

    Written here rather than taken from a library: the only one (the synchronous
    `kubernetes` client) is a large dependency for twenty lines; the API server has already
    validated the pod template's quantities, so only well-formed ones arrive."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a resource quantity: {value!r}")
    number, exponent, suffix = match.groups()
    if exponent:
        return Decimal(number + exponent)
    return Decimal(number) * _SUFFIX[suffix or ""]


def format_quantity(value: Decimal) -> str:
    """A quantity as the API server would accept it: an integer, else millis (rounded up)."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value(rounding='ROUND_CEILING'))}m"
