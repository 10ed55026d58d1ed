"""What a controller watches: one informer per job kind, pods, Services and plugin kinds per
namespace, plus its gates' — counted before any client exists, to size the connection pool.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainjobs.kube import PODS, SERVICES, Resource, job_resource
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.gates import FACTORIES, GateFactory
from trainjobs.plugin.manager import PluginManager

__all__ = ["informed", "job_resources", "owned_resources", "watches"]


def watches(plugins: PluginManager, settings: ControllerSettings,
            gate_factories: Sequence[GateFactory] = FACTORIES) -> int:
    """The most watches a Controller holds open (one per informer, the gates' included): the
    operator's connection pool must hold them all besides its requests (kube.connect). It
    counts the very lists the informers are built from, before there is a client to build
    them with."""
    namespaces: list[str | None] = list(settings.namespaces) or [None]
    return len(informed(plugins, namespaces, owned_resources(plugins, settings))) + \
        sum(f.watches(namespaces, settings) for f in gate_factories)


def job_resources(plugins: PluginManager) -> list[Resource]:
    return [job_resource(fw.kind, fw.plural, fw.group, fw.version)
            for fw in plugins.frameworks.values()]


def owned_resources(plugins: PluginManager, settings: ControllerSettings) -> list[Resource]:
    """The kinds of extra objects plugins want watched (a gang scheduler's PodGroup)."""
    return [Resource.of(r.api_version, r.kind, r.plural)
            for r in plugins.owned_resources(settings.controller_config)]


def informed(plugins: PluginManager, namespaces: Sequence[str | None],
             owned: Sequence[Resource]) -> list[tuple[Resource, str | None]]:
    """The controller's own informers, in order (one watch each): per watched namespace
    (None: all), every kind's jobs, then pods, Services and the `owned` kinds."""
    return [(res, ns) for ns in namespaces
            for res in (*job_resources(plugins), PODS, SERVICES, *owned)]
