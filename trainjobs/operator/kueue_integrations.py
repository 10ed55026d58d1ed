"""Reading Kueue's Configuration for `--kueue-kubeflow-integration=auto` (the decision itself
is trainjobs/kueue/integrations.py).

Why read once and keep: Kueue reads its Configuration only at start, so a changed ConfigMap
means nothing until Kueue restarts, and a path switched under a running job would give it two
Workloads or none; restart the operator after changing Kueue's integrations, as Kueue itself.
So a first answer (the frameworks, or a ConfigMap that says none) is kept for the process's
life, and only a failed read (not found, forbidden, unreachable, malformed) is asked again,
at most once per `recheck_seconds` whatever the number of jobs waiting on it. Nothing is read
until a labelled job of such a kind arrives: an operator without Kubeflow kinds never asks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from trainjobs.kube import ApiError, ApiForbidden, ApiNotFound, Kube, Resource
from trainjobs.kueue.integrations import (
    CONFIG_KEY,
    KUEUE_FRAMEWORK_NAMES,
    IntegrationMode,
    KueueConfigError,
    KueueIntegrations,
    Route,
    enabled_frameworks,
)

__all__ = ["CONFIG_MAPS", "KueueIntegrationReader"]

log = logging.getLogger(__name__)

CONFIG_MAPS = Resource("ConfigMap", "configmaps")


class KueueIntegrationReader:
    """`route` for the controller's Kueue side: Kueue's integration, the operator's, or
    undecided (with why), per the mode and, with `auto`, Kueue's ConfigMap."""

    def __init__(self, kube: Kube, mode: IntegrationMode, config_map: tuple[str, str],
                 monotonic: Callable[[], float] = time.monotonic,
                 recheck_seconds: float = 10.0) -> None:
        self.kube, self.mode, self.config_map = kube, mode, config_map
        self._monotonic = monotonic
        self._recheck = recheck_seconds
        self._known: KueueIntegrations | None = None
        self._asked_at = 0.0
        self._lock = asyncio.Lock()

    async def route(self, group: str, kind: str) -> tuple[Route, KueueIntegrations | None]:
        """The job's path, with what it was decided from (None: the mode alone decided)."""
        if (group, kind) not in KUEUE_FRAMEWORK_NAMES or self.mode is not IntegrationMode.AUTO:
            return KueueIntegrations(None, "").route(self.mode, group, kind), None
        known = await self.integrations()
        return known.route(self.mode, group, kind), known

    async def integrations(self) -> KueueIntegrations:
        """What Kueue's ConfigMap says (read again only after a failure, see the module)."""
        async with self._lock:
            known = self._known
            if known is not None and (known.frameworks is not None
                                      or self._monotonic() - self._asked_at < self._recheck):
                return known
            self._asked_at = self._monotonic()
            self._known = await self._read()
            if self._known.frameworks is not None:
                log.info("Kueue's integrations, from %s: %s", self._known.source,
                         ", ".join(sorted(self._known.frameworks)))
            elif known is None or known.source != self._known.source:
                log.warning("cannot tell which integrations Kueue enables: %s",
                            self._known.source)
            return self._known

    async def _read(self) -> KueueIntegrations:
        namespace, name = self.config_map
        where = f"ConfigMap {namespace}/{name}"
        try:
            obj = await self.kube.get(CONFIG_MAPS, namespace, name)
        except ApiNotFound:
            return KueueIntegrations(None, f"{where} not found")
        except ApiForbidden as exc:
            return KueueIntegrations(None, f"may not read {where}: {exc}")
        except ApiError as exc:
            return KueueIntegrations(None, f"reading {where}: {exc}")
        text = (obj.get("data") or {}).get(CONFIG_KEY)
        if not isinstance(text, str):
            return KueueIntegrations(None, f"{where} has no key {CONFIG_KEY}")
        try:
            return KueueIntegrations(enabled_frameworks(text), f"{where}, key {CONFIG_KEY}")
        except KueueConfigError as exc:
            return KueueIntegrations(None, f"{where}, key {CONFIG_KEY}: {exc}")
