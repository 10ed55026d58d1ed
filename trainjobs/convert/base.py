"""What every source format's converter shares: the notes it writes and the pieces of a job.

Why a `Conversion` object per document: a converter must tell the user everything it changed,
everything it dropped (no equivalent in trainjobs) and everything it cannot express — all of
it in one run, each named by the field path in the *source* manifest, so that fifty manifests
are fixed in one pass rather than one refusal at a time.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from trainjobs.api.models import API_VERSION
from trainjobs.errors import SpecError

__all__ = [
    "Conversion",
    "Note",
    "NoteKind",
    "job_document",
    "move_template_restart_policy",
    "rename_old_gpu_resource",
    "set_port",
]

# Written by the API server; a manifest saved with `kubectl get -o yaml` carries them
# (`clusterName`, always empty, until Kubernetes 1.25 removed it).
SERVER_SET_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp",
                       "managedFields", "selfLink", "deletionTimestamp",
                       "deletionGracePeriodSeconds", "clusterName")
POD_RESTART_POLICIES = ("Never", "OnFailure", "Always")
# Kubernetes 1.7's GPU resource, removed in 1.11 (the API server now refuses it in a pod); the
# NVIDIA device plugin's name for the same thing.
OLD_GPU_RESOURCE, GPU_RESOURCE = "alpha.kubernetes.io/nvidia-gpu", "nvidia.com/gpu"


class NoteKind(StrEnum):
    CHANGED = "changed"
    DROPPED = "no equivalent"


@dataclass(frozen=True)
class Note:
    """One thing the conversion did, at a field path of the source manifest."""

    kind: NoteKind
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.message}"


@dataclass
class Conversion:
    """The notes and refusals gathered while converting one document."""

    source: str
    notes: list[Note] = field(default_factory=list)
    errors: list[SpecError] = field(default_factory=list)

    def changed(self, path: str, message: str) -> None:
        self.notes.append(Note(NoteKind.CHANGED, path, message))

    def dropped(self, path: str, message: str) -> None:
        self.notes.append(Note(NoteKind.DROPPED, path, message))

    def refuse(self, path: str, message: str) -> None:
        self.errors.append(SpecError(path, message))


def job_document(kind: str, source: dict[str, Any], spec: dict[str, Any],
                 conv: Conversion) -> dict[str, Any]:
    """A trainjobs job with the source's metadata (minus what the API server writes)."""
    meta = copy.deepcopy(source.get("metadata") or {})
    for key in SERVER_SET_METADATA:
        if meta.pop(key, None) is not None:
            conv.dropped(f"metadata.{key}", "written by the API server; left out")
    annotations = meta.get("annotations") or {}
    if "kubectl.kubernetes.io/last-applied-configuration" in annotations:
        del annotations["kubectl.kubernetes.io/last-applied-configuration"]
        conv.dropped("metadata.annotations", "kubectl's last-applied-configuration left out")
        if not annotations:
            del meta["annotations"]
    if "status" in source:
        conv.dropped("status", "written by the operator; left out")
    conv.changed("apiVersion", f"{source.get('apiVersion')} {source.get('kind')} -> "
                               f"{API_VERSION} {kind}")
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}


def move_template_restart_policy(template: Any, path: str, conv: Conversion) -> str | None:
    """Takes `restartPolicy` out of a pod template and returns it.

    Where the old operator created pods with the template's restart policy as written, the
    replica's `restartPolicy` of the same name means the same: trainjobs sets it on the pod.
    """
    spec = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(spec, dict) or "restartPolicy" not in spec:
        return None
    value = spec.pop("restartPolicy")
    if value not in POD_RESTART_POLICIES:
        conv.refuse(f"{path}.spec.restartPolicy", f"{value!r} is not a pod restart policy "
                    f"({', '.join(POD_RESTART_POLICIES)})")
        return None
    return str(value)


def set_port(template: Any, template_path: str, container_name: str, port_name: str,
             port: int, source_path: str, conv: Conversion) -> None:
    """Names a non-default framework port on the framework container, as trainjobs reads it."""
    spec = template.get("spec") if isinstance(template, dict) else None
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for index, container in enumerate(containers or []):
        if isinstance(container, dict) and container.get("name") == container_name:
            ports = container.setdefault("ports", [])
            if not any(isinstance(p, dict) and p.get("name") == port_name for p in ports):
                ports.append({"name": port_name, "containerPort": port})
                conv.changed(source_path, f"port {port} -> a containerPort named {port_name!r} "
                             f"in {template_path}.spec.containers[{index}]")
            return
    conv.refuse(source_path, f"port {port} needs a container named {container_name!r} "
                             "to carry it")


def rename_old_gpu_resource(template: Any, path: str, conv: Conversion) -> None:
    """`alpha.kubernetes.io/nvidia-gpu` (what the v1alpha1 examples request) becomes
    `nvidia.com/gpu` in every container's limits and requests: the old name is refused by
    today's API server, the new one is what NVIDIA's device plugin advertises."""
    spec = template.get("spec") if isinstance(template, dict) else None
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for index, container in enumerate(containers or []):
        resources = container.get("resources") if isinstance(container, dict) else None
        for part in ("limits", "requests"):
            amounts = resources.get(part) if isinstance(resources, dict) else None
            if isinstance(amounts, dict) and OLD_GPU_RESOURCE in amounts:
                amounts[GPU_RESOURCE] = amounts.pop(OLD_GPU_RESOURCE)
                conv.changed(f"{path}.spec.containers[{index}].resources.{part}",
                             f"{OLD_GPU_RESOURCE} (removed in Kubernetes 1.11) -> "
                             f"{GPU_RESOURCE}")
