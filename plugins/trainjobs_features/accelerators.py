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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainjobs.plugin import (
    Job,
    PluginError,
    RenderContext,
    Replica,
    config_section,
    hookimpl,
)

__all__ = ["CONFIG_KEY", "Accelerator", "HostVolume", "accelerator_config",
           "parse_accelerators", "trainjobs_adjust_pod", "trainjobs_check_config"]

CONFIG_KEY = "accelerators"


@dataclass(frozen=True)
class HostVolume:
    name: str
    mount_path: str
    host_path: str


@dataclass(frozen=True)
class Accelerator:
    """What a container requesting `resource` gets."""

    resource: str
    volumes: tuple[HostVolume, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def parse_accelerators(section: object) -> tuple[Accelerator, ...]:
    """The `accelerators` section (None when absent), by resource name; a `PluginError`
    naming the key when malformed (raised at the operator's start)."""
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        raise PluginError(f"controller config {CONFIG_KEY}: expected a mapping of extended "
                          f"resources, got {section!r}")
    found = []
    for resource, raw in sorted(section.items()):
        where = f"controller config {CONFIG_KEY}.{resource}"
        raw = raw or {}
        if not isinstance(raw, Mapping):
            raise PluginError(f"{where}: expected a mapping, got {raw!r}")
        volumes = tuple(HostVolume(*_strings(v, f"{where}.volumes[{i}]",
                                             ("name", "mountPath", "hostPath")))
                        for i, v in enumerate(_items(raw, "volumes", where)))
        env = []
        for i, var in enumerate(_items(raw, "envVars", where)):
            (name,) = _strings(var, f"{where}.envVars[{i}]", ("name",))
            if "value" not in var:
                raise PluginError(f"{where}.envVars[{i}].value: missing")
            env.append((name, str(var["value"])))
        found.append(Accelerator(str(resource), volumes, tuple(env)))
    return tuple(found)


def _items(raw: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    items = raw.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise PluginError(f"{where}.{key}: expected a list of mappings, got {items!r}")
    return items


def _strings(item: Mapping[str, Any], where: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    for key in keys:
        if not (isinstance(item.get(key), str) and item[key]):
            raise PluginError(f"{where}.{key}: expected a non-empty string, "
                              f"got {item.get(key)!r}")
    return tuple(item[k] for k in keys)


def accelerator_config(ctx: RenderContext) -> tuple[Accelerator, ...]:
    """The section, parsed once per operator config."""
    return config_section(ctx.controller_config, CONFIG_KEY, parse_accelerators)


@hookimpl
def trainjobs_check_config(controller_config: Mapping[str, object]) -> None:
    config_section(controller_config, CONFIG_KEY, parse_accelerators)


def _requests(container: dict[str, Any], resource: str) -> bool:
    resources = container.get("resources") or {}
    return any(resource in (resources.get(k) or {}) for k in ("limits", "requests"))


@hookimpl
def trainjobs_adjust_pod(job: Job, replica: Replica, pod: dict[str, Any],
                         ctx: RenderContext) -> None:
    spec = pod["spec"]
    for accelerator in accelerator_config(ctx):
        users = [c for c in spec["containers"] if _requests(c, accelerator.resource)]
        if not users:
            continue
        volumes = spec.setdefault("volumes", [])
        for vol in accelerator.volumes:
            if not any(v.get("name") == vol.name for v in volumes):
                volumes.append({"name": vol.name, "hostPath": {"path": vol.host_path}})
        for container in users:
            mounts = container.setdefault("volumeMounts", [])
            for vol in accelerator.volumes:
                if not any(m.get("name") == vol.name for m in mounts):
                    mounts.append({"name": vol.name, "mountPath": vol.mount_path})
            env = container.setdefault("env", [])
            for name, value in accelerator.env:
                if not any(e.get("name") == name for e in env):
                    env.append({"name": name, "value": value})
