"""Loads plugins from the `trainjobs` entry-point group and gives the core typed access to hooks.

Why entry points for the built-ins too: a third-party framework must be a first-class citizen,
so the MXNet, TensorFlow and Caffe2 plugins load exactly the way a pip-installed one does. Set
`TRAINJOBS_DISABLE_PLUGIN_AUTOLOAD=1` to load only the plugins shipped with trainjobs (like
pytest's PYTEST_DISABLE_PLUGIN_AUTOLOAD), or `TRAINJOBS_DISABLE_PLUGINS=a,b` to block some by
entry-point name.

Every hook is called through pluggy, so `tryfirst`, `trylast`, `wrapper=True` and
`hookwrapper=True` work as pluggy documents. One exception, refused when the plugin loads: a
wrapper of `trainjobs_frameworks`, which the core calls for each plugin alone (to know whose
kinds they are), so a wrapper there could never see another plugin's answer. A
`FrameworkPlugin` subclass that leaves out a part it needs is refused when it loads too.
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
from trainjobs.errors import PluginError, PluginRefused, SpecError
from trainjobs.plugin import hookspecs
from trainjobs.plugin.base import FrameworkPlugin, missing_parts
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
# The hooks whose implementations edit one document in place (a pod, a Service, a status):
# they run in load order, each seeing the edits of those before it.
EDIT_HOOKS = frozenset({"trainjobs_adjust_pod", "trainjobs_adjust_service",
                        "trainjobs_adjust_status"})
# The hooks the core calls for one plugin at a time: no wrapper there.
PER_PLUGIN_HOOKS = frozenset({"trainjobs_frameworks"})


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
    """The registered plugins, with one typed method per hook.

    pluggy calls the implementations of a hook from the last registered to the first (after
    `tryfirst` ones, before `trylast` ones, inside the wrappers). Two pluggy managers hold the
    same plugins so that both orders the plugin contract promises come from pluggy itself:
    `_pm` has them in load order, so the collecting and `firstresult` hooks hear the last
    loaded first, as they always have; `_edits` has those implementing an edit hook
    (`EDIT_HOOKS`) in reverse, so that pluggy runs their edits in load order.
    """

    def __init__(self) -> None:
        self._pm = _pluggy_manager()
        self._edits = _pluggy_manager()
        self.plugins: list[LoadedPlugin] = []
        self._frameworks: dict[str, Framework] = {}

    # Loading ------------------------------------------------------------------------------

    def register(self, plugin: object, info: LoadedPlugin) -> None:
        """Register one plugin object (a module or an instance) and read its frameworks.

        A plugin that cannot work is refused with a one-line `PluginRefused` naming it and its
        package, and leaves the manager as it was.
        """
        registered = False
        try:
            if isinstance(plugin, FrameworkPlugin) and (missing := missing_parts(plugin)):
                raise _Refusal(f"{type(plugin).__name__} (a FrameworkPlugin) does not define "
                               f"{', '.join(missing)}")
            self._pm.register(plugin, name=info.name)
            registered = True
            self._pm.check_pending()
            self._check_options(plugin)
            declared = [replace(f, package=info.package) for f in self._declared(plugin)]
            for framework in declared:
                self._check_names(framework, declared)
        except (ValueError, pluggy.PluginValidationError, _Refusal) as exc:
            if registered:
                self._pm.unregister(plugin)
            raise PluginRefused(
                f"plugin {info.name!r} from {info.package}: {_one_line(exc)}") from exc
        self._frameworks.update((f.kind, f) for f in declared)
        self.plugins.append(replace(info, kinds=tuple(f.kind for f in declared)))
        if EDIT_HOOKS & self._hooks_of(plugin):
            self._edits = self._edit_manager()

    def _hooks_of(self, plugin: object) -> set[str]:
        return {caller.name for caller in self._pm.get_hookcallers(plugin) or ()}

    def _check_options(self, plugin: object) -> None:
        for caller in self._pm.get_hookcallers(plugin) or ():
            if caller.name not in PER_PLUGIN_HOOKS:
                continue
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and (impl.wrapper or impl.hookwrapper):
                    raise _Refusal(
                        f"{caller.name} cannot be a wrapper: the core calls it for each "
                        f"plugin alone, so a wrapper would never see another plugin's answer")

    def _declared(self, plugin: object) -> list[Framework]:
        """The kinds `plugin` declares, from its own `trainjobs_frameworks` only."""
        others = [p for p in self._pm.get_plugins() if p is not plugin]
        hook = self._pm.subset_hook_caller("trainjobs_frameworks", remove_plugins=others)
        try:
            results: list[Sequence[Framework] | None] = hook()
        except Exception as exc:  # a broken plugin must say which one it is
            raise _Refusal(f"trainjobs_frameworks raised {type(exc).__name__}: {exc}") from exc
        declared = [framework for result in results for framework in result or ()]
        for framework in declared:
            if not isinstance(framework, Framework):
                raise _Refusal(f"trainjobs_frameworks returned {framework!r}, not a Framework")
        return declared

    def _check_names(self, framework: Framework, declared: Sequence[Framework]) -> None:
        others = [*self._frameworks.values(), *(d for d in declared if d is not framework)]
        for other in others:
            # Kinds are unique everywhere (jobs are keyed by kind); plural and short names
            # within one API group (Kubeflow's tfjobs beside trainjobs.io's tfjobs is fine).
            names = {framework.plural, *framework.short_names} & {
                other.plural, *other.short_names} if framework.group == other.group else set()
            clash = ({framework.kind} & {other.kind}) | names
            if clash:
                raise _Refusal(f"declares {framework.kind}, but {sorted(clash)} already "
                               f"belong to {other.kind} from {other.package}")

    def _edit_manager(self) -> pluggy.PluginManager:
        """A pluggy manager with the plugins implementing an edit hook, last loaded first."""
        edits = _pluggy_manager()
        for name, plugin in reversed(self._pm.list_name_plugin()):
            if plugin is not None and EDIT_HOOKS & self._hooks_of(plugin):
                edits.register(plugin, name=name)
        return edits

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
        self._edits.hook.trainjobs_adjust_pod(job=job, replica=replica, pod=pod, ctx=ctx)

    def adjust_service(
        self, job: Job, replica: Replica, service: dict[str, Any], ctx: RenderContext
    ) -> None:
        self._edits.hook.trainjobs_adjust_service(job=job, replica=replica, service=service,
                                                  ctx=ctx)

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

    def checkpoint_replica(self, job: Job, framework: Framework) -> Replica | None:
        """The replica `job` asks for a checkpoint before it is stopped, or None (its kind
        has none: nothing is asked)."""
        found: Replica | None = self._pm.hook.trainjobs_checkpoint_replica(
            job=job, framework=framework)
        return found

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
        self._edits.hook.trainjobs_adjust_status(job=job, framework=framework, status=status)

    def object_status(self, job: Job, obj: dict[str, Any]) -> ObjectStatus | None:
        status: ObjectStatus | None = self._pm.hook.trainjobs_object_status(job=job, obj=obj)
        return status

    def hook_names(self) -> list[str]:
        return sorted(name for name in dir(self._pm.hook) if name.startswith("trainjobs_"))


class _Refusal(Exception):
    """Why `PluginManager.register` refuses a plugin (it adds the plugin's name)."""


def _pluggy_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _one_line(exc: BaseException) -> str:
    """The message of `exc` on one line (pluggy's span several)."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


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
        raise PluginRefused(f"cannot enable {', '.join(sorted(unknown))}: the plugins that load "
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
            raise PluginRefused(f"plugin {ep.name!r} from {package} failed to import: "
                                f"{_one_line(exc)}") from exc
        module = plugin.__name__ if isinstance(plugin, ModuleType) else ep.value
        manager.register(plugin, LoadedPlugin(ep.name, module, package, _dist_version(ep)))
    for plugin, info in extra:
        manager.register(plugin, info)
    return manager


def _dist_name(ep: metadata.EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "?"


def _dist_version(ep: metadata.EntryPoint) -> str:
    return ep.dist.version if ep.dist is not None else "?"
