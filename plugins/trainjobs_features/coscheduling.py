"""Gang scheduling with Kubernetes scheduler-plugins' Coscheduling (`gangScheduling.scheduler:
coscheduling`): a `scheduling.x-k8s.io/v1alpha1` PodGroup per job, every pod labelled
`scheduling.x-k8s.io/pod-group` and handed to the scheduler-plugins scheduler.

Coscheduling holds a member pod at Permit until `minMember` pods of its group have a place,
then binds them together; after `scheduleTimeoutSeconds` it rejects the waiting ones and tries
the group again. The PodGroup's phase (Pending, Scheduling, Running, Finished, Failed) is
written by scheduler-plugins' controller.
"""

from __future__ import annotations

from typing import Any

from trainjobs.plugin import Job
from trainjobs_features.gang import GangConfig, GangPlugin, pod_group_counts

__all__ = ["API_VERSION", "POD_GROUP_LABEL", "plugin"]

API_VERSION = "scheduling.x-k8s.io/v1alpha1"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def _spec(job: Job, config: GangConfig) -> dict[str, Any]:
    """The job's `schedulingPolicy.scheduleTimeoutSeconds` (Kubeflow's field), else the
    operator's `gangScheduling.scheduleTimeoutSeconds`, else none (the scheduler's default)."""
    policy = job.spec.run_policy.scheduling_policy
    timeout = (policy.schedule_timeout_seconds if policy is not None else None) or \
        config.schedule_timeout_seconds
    return {} if timeout is None else {"scheduleTimeoutSeconds": timeout}


def _describe(obj: dict[str, Any]) -> tuple[str, str]:
    # Why a pod waits is on the pod (FailedScheduling); the group has its counts.
    phase = str((obj.get("status") or {}).get("phase") or "Pending")
    return phase, pod_group_counts(obj, "scheduled", "running", "succeeded", "failed")


plugin = GangPlugin("coscheduling", API_VERSION, ("labels", POD_GROUP_LABEL), _spec, _describe)
