"""Loads plugins from the `trainjobs` entry-point group and gives the core typed access to hooks.

Why entry points for the built-ins too: a third-party framework must be a first-class citizen,
so the MXNet, TensorFlow and Caffe2 plugins load exactly the way a pip-installed one does. Set
`TRAINJOBS_DISABLE_PLUGIN_AUTOLOAD=1` to load only the plugins shipped with trainjobs (like
pytest's PYTEST_DISABLE_PLUGIN_AUTOLOAD), or `TRAINJOBS_DISABLE_PLUGINS=a,b` to block some by
entry-point name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from trainjobs.api.models import Job
from trainjobs.errors import PluginError, SpecError
from trainjobs.plugin import hookspecs
from trainjobs.plugin.types import (
    Framework,
    ObjectStatus,
    OwnedResource,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
)

__all__ = ["ENTRY_POINT_GROUP", "LoadedPlugin", "PluginManager", "load_plugins"]

ENTRY_POINT_GROUP = "trainjobs"
BUILTIN_DISTRIBUTION = "trainjobs"
DISABLE_AUTOLOAD_ENV = "TRAINJOBS_DISABLE_PLUGIN_AUTOLOAD"
DISABLE_PLUGINS_ENV = "TRAINJOBS_DISABLE_PLUGINS"
ENABLE_PLUGINS_ENV = "TRAINJOBS_ENABLE_PLUGINS"
# Built-in plugins that load only when named in TRAINJOBS_ENABLE_PLUGINS (or the operator's
# --enable-plugins): the Kubeflow compatibility kinds take over kubeflow.org's TFJob and
# MXJob, which must not happen on a cluster that runs Kubeflow's training-operator.
OPT_IN_PLUGINS = frozenset({"kubeflow"})


@dataclass(frozen=True)
class LoadedPlugin:
    """One registered plugin and where it came from."""

    name: str
    module: str
    package: str
    version: str
    kinds: tuple[str, ...] = ()

    @property
    def builtin(self) -> bool:
        return self.package == BUILTIN_DISTRIBUTION


class PluginManager:
    """The registered plugins, with one typed method per hook."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self.plugins: list[LoadedPlugin] = []
        self._frameworks: dict[str, Framework] = {}

    # Loading ------------------------------------------------------------------------------

    def register(self, plugin: object, info: LoadedPlugin) -> None:
        """Register one plugin object (a module or an instance) and read its frameworks."""
        try:
            self._pm.register(plugin, name=info.name)
            self._pm.check_pending()
        except (ValueError, pluggy.PluginValidationError) as exc:
            if self._pm.has_plugin(info.name):
                self._pm.unregister(name=info.name)
            raise PluginError(f"plugin {info.name!r} from {info.package}: {exc}") from exc
        impl = getattr(plugin, "trainjobs_frameworks", None)
        declared: Sequence[Framework] = impl() if callable(impl) else ()
        for framework in declared:
            self._add_framework(replace(framework, package=info.package), info)
        self.plugins.append(replace(info, kinds=tuple(f.kind for f in declared)))

    def _add_framework(self, framework: Framework, info: LoadedPlugin) -> None:
        for other in self._frameworks.values():
            # Kinds are unique everywhere (jobs are keyed by kind); plural and short names
            # within one API group (Kubeflow's tfjobs beside trainjobs.io's tfjobs is fine).
            names = {framework.plural, *framework.short_names} & {
                other.plural, *other.short_names} if framework.group == other.group else set()
            clash = ({framework.kind} & {other.kind}) | names
            if clash:
                raise PluginError(
                    f"plugin {info.name!r} from {info.package} declares {framework.kind}, "
                    f"but {sorted(clash)} already belong to {other.kind} from {other.package}"
                )
        self._frameworks[framework.kind] = framework

    # Frameworks ---------------------------------------------------------------------------

    @property
    def frameworks(self) -> Mapping[str, Framework]:
        """Every installed kind, by kind name."""
        return dict(sorted(self._frameworks.items()))

    def framework_for(self, kind: str) -> Framework | None:
        return self._frameworks.get(kind)

    # Hooks --------------------------------------------------------------------------------

    def validate(self, job: Job, framework: Framework) -> list[SpecError]:
        errors: list[SpecError] = []
        for result in self._pm.hook.trainjobs_validate(job=job, framework=framework):
            errors.extend(result or ())
        return errors

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> list[ReplicaEnv]:
        results: list[ReplicaEnv | None] = self._pm.hook.trainjobs_replica_env(
            job=job, replica=replica, ctx=ctx)
        return [r for r in results if r is not None]

    def adjust_pod(
        self, job: Job, replica: Replica, pod: dict[str, Any], ctx: RenderContext
    ) -> None:
        # pluggy calls the last registered first; run in registration order instead, so the
        # order of edits is the documented, deterministic load order.
        for impl in self._pm.hook.trainjobs_adjust_pod.get_hookimpls():
            impl.function(job=job, replica=replica, pod=pod, ctx=ctx)

    def adjust_service(
        self, job: Job, replica: Replica, service: dict[str, Any], ctx: RenderContext
    ) -> None:
        for impl in self._pm.hook.trainjobs_adjust_service.get_hookimpls():
            impl.function(job=job, replica=replica, service=service, ctx=ctx)

    def extra_objects(self, job: Job, ctx: RenderContext) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        for result in self._pm.hook.trainjobs_extra_objects(job=job, ctx=ctx):
            objects.extend(result or ())
        return objects

    def job_succeeded(
        self, job: Job, framework: Framework, outcomes: Sequence[ReplicaOutcome]
    ) -> bool:
        verdict: bool | None = self._pm.hook.trainjobs_job_succeeded(
            job=job, framework=framework, outcomes=outcomes)
        if verdict is None:
            raise PluginError(f"no plugin implements the success rule of {job.kind}")
        return verdict

    def owned_resources(self, controller_config: Mapping[str, object]) -> list[OwnedResource]:
        """Every watched kind the plugins declare for this controller config, once each."""
        found: dict[tuple[str, str], OwnedResource] = {}
        for result in self._pm.hook.trainjobs_owned_resources(
                controller_config=controller_config):
            for res in result or ():
                found.setdefault((res.api_version, res.kind), res)
        return list(found.values())

    def config_overrides(self, options: Mapping[str, object]) -> dict[str, dict[str, object]]:
        """The config sections the plugins set from command-line options, merged per section."""
        found: dict[str, dict[str, object]] = {}
        for result in self._pm.hook.trainjobs_config_overrides(options=options):
            for key, fields in (result or {}).items():
                if not isinstance(fields, Mapping):
                    raise PluginError(f"trainjobs_config_overrides: section {key!r} is not a "
                                      f"mapping: {fields!r}")
                found.setdefault(key, {}).update(fields)
        return found

    def check_config(self, controller_config: Mapping[str, object]) -> None:
        """Every plugin checks its section; the first malformed one raises `PluginError`."""
        self._pm.hook.trainjobs_check_config(controller_config=controller_config)

    def adjust_status(self, job: Job, framework: Framework, status: dict[str, Any]) -> None:
        for impl in self._pm.hook.trainjobs_adjust_status.get_hookimpls():
            impl.function(job=job, framework=framework, status=status)

    def object_status(self, job: Job, obj: dict[str, Any]) -> ObjectStatus | None:
        status: ObjectStatus | None = self._pm.hook.trainjobs_object_status(job=job, obj=obj)
        return status

    def hook_names(self) -> list[str]:
        return sorted(name for name in dir(self._pm.hook) if name.startswith("trainjobs_"))


def _entry_points() -> Iterable[metadata.EntryPoint]:
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def _blocked_names() -> set[str]:
    raw = os.environ.get(DISABLE_PLUGINS_ENV, "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def enabled_names(enable: Iterable[str] = ()) -> set[str]:
    """The opt-in plugins to load: `enable` and those named in TRAINJOBS_ENABLE_PLUGINS."""
    raw = os.environ.get(ENABLE_PLUGINS_ENV, "")
    return {name.strip() for name in (*raw.split(","), *enable) if name.strip()}


def load_plugins(extra: Iterable[tuple[object, LoadedPlugin]] = (),
                 enable: Iterable[str] = ()) -> PluginManager:
    """Load every plugin of the entry-point group (minus blocked ones), then `extra` ones.

    Built-in plugins (those of the trainjobs distribution) load first, in a fixed order, so
    rendering is deterministic whatever else is installed. The opt-in ones (`OPT_IN_PLUGINS`)
    load only when named in `enable` or TRAINJOBS_ENABLE_PLUGINS.
    """
    manager = PluginManager()
    autoload = os.environ.get(DISABLE_AUTOLOAD_ENV, "") not in ("1", "true", "yes")
    blocked = _blocked_names()
    opted_in = enabled_names(enable)
    unknown = opted_in - OPT_IN_PLUGINS
    if unknown:
        raise PluginError(f"cannot enable {', '.join(sorted(unknown))}: the plugins that load "
                          f"only when enabled are {', '.join(sorted(OPT_IN_PLUGINS))}")
    found = sorted(
        _entry_points(),
        key=lambda ep: (_dist_name(ep) != BUILTIN_DISTRIBUTION, _dist_name(ep), ep.name),
    )
    seen: set[str] = set()
    for ep in found:
        package = _dist_name(ep)
        if ep.name in blocked or ep.name in seen:
            continue
        if package != BUILTIN_DISTRIBUTION and not autoload:
            continue
        if package == BUILTIN_DISTRIBUTION and ep.name in OPT_IN_PLUGINS and \
                ep.name not in opted_in:
            continue
        seen.add(ep.name)
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party plugin must say which one it is
            raise PluginError(
                f"plugin {ep.name!r} from {package} failed to import: {exc}") from exc
        module = plugin.__name__ if isinstance(plugin, ModuleType) else ep.value
        manager.register(plugin, LoadedPlugin(ep.name, module, package, _dist_version(ep)))
    for plugin, info in extra:
        manager.register(plugin, info)
    return manager


def _dist_name(ep: metadata.EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "?"


def _dist_version(ep: metadata.EntryPoint) -> str:
    return ep.dist.version if ep.dist is not None else "?"
