"""Gang scheduling with Volcano (`gangScheduling.scheduler: volcano`): a
`scheduling.volcano.sh/v1beta1` PodGroup per job (minMember, minResources, queue,
priorityClassName), every pod annotated `scheduling.k8s.io/group-name` and handed to the
`volcano` scheduler.

Volcano admits a PodGroup into its queue (phase Inqueue) once the queue and the cluster have
room for `minResources`, then binds its pods only when `minMember` of them fit; until then the
group stays Pending or Inqueue with an Unschedulable condition whose message says why. The
scheduler writes that status itself (no controller-manager needed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainjobs.plugin import (
    Job,
    ObjectStatus,
    OwnedResource,
    RenderContext,
    Replica,
    hookimpl,
)
from trainjobs_features.gang import gang_config, gang_for, min_member, min_resources

__all__ = ["API_VERSION", "DEFAULT_QUEUE", "GROUP_NAME_ANNOTATION", "trainjobs_adjust_pod",
           "trainjobs_extra_objects", "trainjobs_object_status", "trainjobs_owned_resources"]

SCHEDULER = "volcano"
API_VERSION = "scheduling.volcano.sh/v1beta1"
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
#: Volcano's admission webhook fills in this queue; we do not rely on the webhook.
DEFAULT_QUEUE = "default"


@hookimpl
def trainjobs_owned_resources(
    controller_config: Mapping[str, object],
) -> Sequence[OwnedResource] | None:
    if gang_config(controller_config).scheduler != SCHEDULER:
        return None
    return [OwnedResource(API_VERSION, "PodGroup", "podgroups", with_replicas=True)]


@hookimpl
def trainjobs_adjust_pod(job: Job, replica: Replica, pod: dict[str, Any],
                         ctx: RenderContext) -> None:
    config = gang_for(SCHEDULER, ctx)
    if config is None:
        return
    pod["metadata"].setdefault("annotations", {})[GROUP_NAME_ANNOTATION] = job.name
    # A template that names its scheduler keeps it (docs/scheduling.md says so).
    pod["spec"].setdefault("schedulerName", config.scheduler_name)


@hookimpl
def trainjobs_extra_objects(job: Job, ctx: RenderContext) -> Sequence[dict[str, Any]] | None:
    if gang_for(SCHEDULER, ctx) is None:
        return None
    members = min_member(job)
    policy = job.spec.run_policy.scheduling_policy
    spec: dict[str, Any] = {
        "minMember": members,
        "queue": (policy.queue if policy is not None else None) or DEFAULT_QUEUE,
    }
    resources = min_resources(job, members)
    if resources:
        spec["minResources"] = resources
    if policy is not None and policy.priority_class:
        spec["priorityClassName"] = policy.priority_class
    return [{"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": job.name},
             "spec": spec}]


@hookimpl
def trainjobs_object_status(job: Job, obj: dict[str, Any]) -> ObjectStatus | None:
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != "PodGroup":
        return None
    status = obj.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    message = ""
    if phase in ("Pending", "Inqueue"):
        # The scheduler's latest word on why the group waits (Unschedulable condition).
        waiting = [c for c in status.get("conditions") or []
                   if c.get("type") == "Unschedulable" and c.get("status") == "True"]
        if waiting:
            last = waiting[-1]
            message = f"{last.get('reason', '')}: {last.get('message', '')}".strip(": ")
    if not message:
        message = (f"minMember {(obj.get('spec') or {}).get('minMember', 0)}: "
                   f"{status.get('running', 0)} running, {status.get('succeeded', 0)} "
                   f"succeeded, {status.get('failed', 0)} failed")
    return ObjectStatus("PodGroup", str(obj["metadata"]["name"]), phase, message)
