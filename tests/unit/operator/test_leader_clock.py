"""Leader election reads the operator's clock: whether another holder's lease has expired is
decided on the injected clock, so it is tested by moving a fake one, not by sleeping."""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.controller_harness import FakeClock
from tests.unit.fake_kube import FakeKube
from trainjobs.kube import LEASES, Resource
from trainjobs.operator.leader import LeaderElector, LeaseSettings


class LeaseKube(FakeKube):
    """The fake API, with the `update` the elector writes its lease with."""

    async def update(self, resource: Resource, namespace: str, name: str,
                     body: dict[str, Any]) -> dict[str, Any]:
        self.objects[(resource.plural, namespace, name)] = copy.deepcopy(body)
        return body


async def test_another_holders_lease_is_taken_only_once_expired_on_the_clock() -> None:
    kube, clock = LeaseKube(), FakeClock()
    settings = LeaseSettings(namespace="ops", name="lease", lease_duration=15.0)
    other = LeaderElector(kube, LeaseSettings(**{**settings.__dict__, "identity": "other"}),
                          clock)  # type: ignore[arg-type]
    mine = LeaderElector(kube, LeaseSettings(**{**settings.__dict__, "identity": "mine"}),
                         clock)  # type: ignore[arg-type]
    assert await other._try()  # creates the lease, renewed now
    clock.advance(10)
    assert not await mine._try(), "10 s into a 15 s lease: still the other's"
    clock.advance(6)
    assert await mine._try(), "16 s after its renewal the lease has expired"
    spec = kube.objects[(LEASES.plural, "ops", "lease")]["spec"]
    assert spec["holderIdentity"] == "mine" and spec["leaseTransitions"] == 1
    assert spec["renewTime"].startswith(clock.now().strftime("%Y-%m-%dT%H:%M:%S"))
