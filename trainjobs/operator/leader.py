"""Leader election on a coordination.k8s.io Lease, so that only one operator replica acts.

Why our own small implementation: the operator has no Kubernetes client library (its
transport is `trainjobs.kube`), and the rules fit in one module. They are client-go's: a
candidate takes the Lease when it is free or its holder has not renewed within the lease
duration; the leader renews every `retry_period`; a leader that cannot renew within
`renew_deadline` stops leading (the process exits, so a fresh start re-syncs everything).
Writes use the Lease's resourceVersion, so two candidates can never both win.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from trainjobs.kube import LEASES, ApiConflict, ApiError, ApiNotFound, Kube
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock

__all__ = ["LeaderElector", "LeaseSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str = "default"
    name: str = "trainjobs-operator"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str = ""


def _fmt(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class LeaderElector:
    def __init__(self, kube: Kube, settings: LeaseSettings,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.kube = kube
        self.settings = settings
        self.clock = clock
        self.identity = settings.identity or f"{socket.gethostname()}-{os.getpid()}"
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()

    def _spec(self, acquire: datetime | None, transitions: int) -> dict[str, Any]:
        now = self.clock.now()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.settings.lease_duration),
            "acquireTime": _fmt(acquire or now),
            "renewTime": _fmt(now),
            "leaseTransitions": transitions,
        }

    async def _try(self) -> bool:
        s = self.settings
        try:
            lease = await self.kube.get(LEASES, s.namespace, s.name)
        except ApiNotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": s.name, "namespace": s.namespace},
                    "spec": self._spec(None, 0)}
            try:
                await self.kube.create(LEASES, s.namespace, body)
            except ApiConflict:  # another candidate created it first
                return False
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = _parse(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or s.lease_duration)
        mine = holder == self.identity
        expired = renewed is None or self.clock.now() > renewed + timedelta(seconds=duration)
        if not mine and holder and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        acquire = _parse(spec.get("acquireTime")) if mine else None
        lease["spec"] = self._spec(acquire, transitions)
        try:
            await self.kube.update(LEASES, s.namespace, s.name, lease)
        except ApiConflict:  # another candidate updated it since we read it
            return False
        return True

    async def run(self) -> None:
        """Acquire, then renew until renewal fails for `renew_deadline`; then set `lost`."""
        s = self.settings
        while not self.leading.is_set():
            try:
                if await self._try():
                    log.info("became leader (%s) on lease %s/%s", self.identity, s.namespace,
                             s.name)
                    self.leading.set()
                    break
            except ApiError as exc:
                log.warning("leader election: %s", exc)
            await asyncio.sleep(s.retry_period)
        last_renew = self.clock.monotonic()
        while True:
            await asyncio.sleep(s.retry_period)
            try:
                if await self._try():
                    last_renew = self.clock.monotonic()
                    continue
                log.error("lease %s/%s was taken by another operator", s.namespace, s.name)
                break
            except ApiError as exc:
                log.warning("renewing lease: %s", exc)
            if self.clock.monotonic() - last_renew > s.renew_deadline:
                log.error("could not renew lease within %.0fs", s.renew_deadline)
                break
        self.leading.clear()
        self.lost.set()

    async def release(self) -> None:
        """On clean shutdown: give the lease up so a standby takes over at once."""
        if not self.leading.is_set():
            return
        s = self.settings
        try:
            lease = await self.kube.get(LEASES, s.namespace, s.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.update(LEASES, s.namespace, s.name, lease)
        except ApiError as exc:
            log.warning("releasing lease: %s", exc)
