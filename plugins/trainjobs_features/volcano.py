"""Gang scheduling with Volcano (`gangScheduling.scheduler: volcano`): a
`scheduling.volcano.sh/v1beta1` PodGroup per job (minMember, minTaskMember, minResources,
queue, priorityClassName), every pod annotated `scheduling.k8s.io/group-name` and
`volcano.sh/task-spec` (its replica type) and handed to the `volcano` scheduler.

Volcano admits a PodGroup into its queue (phase Inqueue) once the queue and the cluster have
room for `minResources`, then binds its pods only when `minMember` of them fit; until then the
group stays Pending or Inqueue with an Unschedulable condition whose message says why. The
scheduler writes that status itself (no controller-manager needed).
"""

from __future__ import annotations

from typing import Any

from trainjobs.plugin import Job
from trainjobs_features.gang import GangConfig, GangPlugin, min_per_type, pod_group_counts

__all__ = ["API_VERSION", "DEFAULT_QUEUE", "GROUP_NAME_ANNOTATION", "TASK_ANNOTATION", "plugin"]

API_VERSION = "scheduling.volcano.sh/v1beta1"
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
#: The pod's task (replica type) for the PodGroup's minTaskMember.
TASK_ANNOTATION = "volcano.sh/task-spec"
#: Volcano's admission webhook fills in this queue; we do not rely on the webhook.
DEFAULT_QUEUE = "default"


def _spec(job: Job, config: GangConfig) -> dict[str, Any]:
    policy = job.spec.run_policy.scheduling_policy
    spec: dict[str, Any] = {"queue": (policy.queue if policy else None) or DEFAULT_QUEUE}
    if policy is not None and policy.priority_class:
        spec["priorityClassName"] = policy.priority_class
    if policy is None or policy.min_available is None:
        # Which pods make up minMember: without this, an elastic job's gang of 4 could be
        # 3 Workers and 1 Server, leaving it unable to run. (With minAvailable the user
        # asked for any N pods.)
        spec["minTaskMember"] = min_per_type(job)
    return spec


def _describe(obj: dict[str, Any]) -> tuple[str, str]:
    status = obj.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    if phase in ("Pending", "Inqueue"):
        # The scheduler's latest word on why the group waits (Unschedulable condition).
        waiting = [c for c in status.get("conditions") or []
                   if c.get("type") == "Unschedulable" and c.get("status") == "True"]
        if waiting:
            last = waiting[-1]
            return phase, f"{last.get('reason', '')}: {last.get('message', '')}".strip(": ")
    return phase, pod_group_counts(obj, "running", "succeeded", "failed")


plugin = GangPlugin("volcano", API_VERSION, ("annotations", GROUP_NAME_ANNOTATION), _spec,
                    _describe, task_annotation=TASK_ANNOTATION)
