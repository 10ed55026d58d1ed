"""Gang scheduling with Kubernetes scheduler-plugins' Coscheduling (`gangScheduling.scheduler:
coscheduling`): a `scheduling.x-k8s.io/v1alpha1` PodGroup per job, every pod labelled
`scheduling.x-k8s.io/pod-group` and handed to the scheduler-plugins scheduler.

Coscheduling holds a member pod at Permit until `minMember` pods of its group have a place,
then binds them together; after `scheduleTimeoutSeconds` it rejects the waiting ones and tries
the group again. The PodGroup's phase (Pending, Scheduling, Running, Finished, Failed) is
written by scheduler-plugins' controller.
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
from trainjobs_features.gang import (
    gang_config,
    gang_for,
    min_member,
    min_resources,
)

__all__ = ["API_VERSION", "POD_GROUP_LABEL", "trainjobs_adjust_pod", "trainjobs_extra_objects",
           "trainjobs_object_status", "trainjobs_owned_resources"]

SCHEDULER = "coscheduling"
API_VERSION = "scheduling.x-k8s.io/v1alpha1"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


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
    pod["metadata"]["labels"][POD_GROUP_LABEL] = job.name
    # A template that names its scheduler keeps it (docs/scheduling.md says so).
    pod["spec"].setdefault("schedulerName", config.scheduler_name)


@hookimpl
def trainjobs_extra_objects(job: Job, ctx: RenderContext) -> Sequence[dict[str, Any]] | None:
    config = gang_for(SCHEDULER, ctx)
    if config is None:
        return None
    members = min_member(job)
    spec: dict[str, Any] = {"minMember": members}
    resources = min_resources(job, members)
    if resources:
        spec["minResources"] = resources
    if config.schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = config.schedule_timeout_seconds
    return [{"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": job.name},
             "spec": spec}]


@hookimpl
def trainjobs_object_status(job: Job, obj: dict[str, Any]) -> ObjectStatus | None:
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != "PodGroup":
        return None
    status = obj.get("status") or {}
    members = (obj.get("spec") or {}).get("minMember", 0)
    phase = str(status.get("phase") or "Pending")
    message = (f"minMember {members}: {status.get('scheduled', 0)} scheduled, "
               f"{status.get('running', 0)} running, {status.get('succeeded', 0)} succeeded, "
               f"{status.get('failed', 0)} failed")
    return ObjectStatus("PodGroup", str(obj["metadata"]["name"]), phase, message)
