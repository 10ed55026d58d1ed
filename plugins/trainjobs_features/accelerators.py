"""Adds host-path volumes and env vars to every container that requests an accelerator.

The controller config file (`trainjobs operator --controller-config-file`) keeps the seed's
format::

    accelerators:
      nvidia.com/gpu:
        volumes:
          - {name: nvidia-libs, mountPath: /usr/local/nvidia/lib64, hostPath: /opt/nvidia/lib64}
        envVars:
          - {name: LD_LIBRARY_PATH, value: /usr/local/nvidia/lib64}

A container that names the resource in its limits or requests gets each volume mounted and each
variable set (a variable it already sets is left as the user wrote it).
"""

from __future__ import annotations

from typing import Any

from trainjobs.plugin import Job, RenderContext, Replica, hookimpl

__all__ = ["accelerator_config", "trainjobs_adjust_pod"]


def accelerator_config(ctx: RenderContext) -> dict[str, dict[str, Any]]:
    config = ctx.controller_config.get("accelerators") or {}
    return dict(config) if isinstance(config, dict) else {}


def _requests(container: dict[str, Any], resource: str) -> bool:
    resources = container.get("resources") or {}
    return any(resource in (resources.get(k) or {}) for k in ("limits", "requests"))


@hookimpl
def trainjobs_adjust_pod(job: Job, replica: Replica, pod: dict[str, Any],
                         ctx: RenderContext) -> None:
    spec = pod["spec"]
    for resource, settings in sorted(accelerator_config(ctx).items()):
        users = [c for c in spec["containers"] if _requests(c, resource)]
        if not users:
            continue
        volumes = spec.setdefault("volumes", [])
        for vol in settings.get("volumes", []):
            if not any(v.get("name") == vol["name"] for v in volumes):
                volumes.append({"name": vol["name"], "hostPath": {"path": vol["hostPath"]}})
        for container in users:
            mounts = container.setdefault("volumeMounts", [])
            for vol in settings.get("volumes", []):
                if not any(m.get("name") == vol["name"] for m in mounts):
                    mounts.append({"name": vol["name"], "mountPath": vol["mountPath"]})
            env = container.setdefault("env", [])
            for var in settings.get("envVars", []):
                if not any(e.get("name") == var["name"] for e in env):
                    env.append({"name": var["name"], "value": str(var["value"])})
