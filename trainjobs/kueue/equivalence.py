"""Does an existing Workload still describe the job? (EquivalentToWorkload, reconciler.go:1420)

Why it matters: podSets are immutable once quota is reserved, so a job whose replicas,
resources or images changed needs another Workload; one left as it was would make Kueue
account for pods that no longer match. Kueue compares the owner (name and uid), the maximum
execution time, and per podSet the count, minCount, containers, init containers and (unless
admitted) tolerations (pkg/util/equality/podset.go). Containers are compared as the API
server stores them: the Workload CRD defaults a few container fields (`ports[].protocol`
TCP, ...), and Go's typed comparison does not tell an empty value from an absent one, so both
sides are normalised the same way before comparing. trainjobs also compares podSet names
(it maps assignments to replica types by name; Kueue maps them by position).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainjobs.kueue.model import PodSet, Workload

__all__ = ["normalise", "pod_sets_equivalent", "workload_matches"]

# Defaults the v0.19.2 Workload CRD's schema gives container fields (listed from
# config/components/crd/bases/kueue.x-k8s.io_workloads.yaml, v1beta2 podSets[].template).
_CONTAINER_DEFAULTS: tuple[tuple[tuple[str, ...], str, Any], ...] = (
    (("ports",), "protocol", "TCP"),
    (("env", "valueFrom", "configMapKeyRef"), "name", ""),
    (("env", "valueFrom", "secretKeyRef"), "name", ""),
    (("env", "valueFrom", "fileKeyRef"), "optional", False),
    (("envFrom", "configMapRef"), "name", ""),
    (("envFrom", "secretRef"), "name", ""),
    (("livenessProbe", "grpc"), "service", ""),
    (("readinessProbe", "grpc"), "service", ""),
    (("startupProbe", "grpc"), "service", ""),
)


def _prune(value: Any) -> Any:
    """Empty values (None, "", {}, [], false, 0) left out, as Go's zero values compare."""
    if isinstance(value, dict):
        out = {key: _prune(v) for key, v in value.items()}
        return {key: v for key, v in out.items() if v not in (None, "", {}, [], False, 0)}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _apply_default(obj: Any, path: tuple[str, ...], key: str, default: Any) -> None:
    if not path:
        if isinstance(obj, dict) and key not in obj:
            obj[key] = default
        return
    child = obj.get(path[0]) if isinstance(obj, dict) else None
    for item in child if isinstance(child, list) else [child]:
        if isinstance(item, dict):
            _apply_default(item, path[1:], key, default)


def normalise(containers: Any) -> Any:
    """Containers as compared: `env` left out (never in our podSets: see workload.py), the
    CRD's defaults applied, empty values pruned."""
    if not isinstance(containers, list):
        return []
    out = []
    for container in containers:
        if not isinstance(container, dict):
            out.append(container)
            continue
        copy = {key: v for key, v in container.items() if key != "env"}
        for path, key, default in _CONTAINER_DEFAULTS:
            if path[0] != "env":
                _apply_default(copy, path, key, default)
        out.append(_prune(copy))
    return out


def _spec(pod_set: PodSet) -> dict[str, Any]:
    spec = pod_set.template.get("spec")
    return spec if isinstance(spec, dict) else {}


def pod_sets_equivalent(job_sets: Sequence[PodSet], wl_sets: Sequence[PodSet],
                        ignore_tolerations: bool) -> bool:
    """ComparePodSetSlices, plus the names."""
    if len(job_sets) != len(wl_sets):
        return False
    for a, b in zip(job_sets, wl_sets, strict=True):
        if (a.name, a.count, a.min_count) != (b.name, b.count, b.min_count):
            return False
        sa, sb = _spec(a), _spec(b)
        if not ignore_tolerations and (_prune(sa.get("tolerations") or [])
                                       != _prune(sb.get("tolerations") or [])):
            return False
        for group in ("initContainers", "containers"):
            if normalise(sa.get(group) or []) != normalise(sb.get(group) or []):
                return False
    return True


def workload_matches(wl: Workload, job_name: str, job_uid: str, job_sets: Sequence[PodSet],
                     max_exec_seconds: int | None) -> bool:
    """EquivalentToWorkload for a job whose templates the admission never edits (trainjobs
    applies the admission to the pods, not to the job), so the Workload's own podSets are
    the ones to compare (Kueue's expectedRunningPodSets merges the admission back in only
    because it edits the job)."""
    owner = wl.metadata.controller()
    if owner is None or owner.name != job_name or owner.uid != job_uid:
        return False
    if wl.spec.maximum_execution_time_seconds != max_exec_seconds:
        return False
    admitted = wl.is_true("Admitted")
    return pod_sets_equivalent(job_sets, wl.spec.pod_sets, ignore_tolerations=admitted)
