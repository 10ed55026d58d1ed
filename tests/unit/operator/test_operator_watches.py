"""The operator's connection pool holds every watch its informers open (kube.connect's
`watches`), Kueue's included: a pool smaller than the watches left the last informers' lists
waiting for a connection for good, and the operator never became ready (seen with 7 watched
namespaces once Kueue was served: 66 watches in a pool of 64)."""

from __future__ import annotations

import pytest

from tests.unit.fake_kube import FakeKube
from tests.unit.helpers import PLUGINS
from trainjobs.operator.controller import Controller, ControllerSettings, watches
from trainjobs.operator.gates.kueue import Queueing


@pytest.mark.parametrize("namespaces", [(), ("a",), tuple(f"ns-{i}" for i in range(7))])
def test_watches_counts_every_informer_kueue_included(namespaces: tuple[str, ...]) -> None:
    kube = FakeKube()
    settings = ControllerSettings(namespaces=namespaces)
    controller = Controller(kube, PLUGINS, settings)  # type: ignore[arg-type]
    kueue = Queueing(kube, list(namespaces) or [None], controller.events,  # type: ignore[arg-type]
                     controller.queue.add)
    assert watches(PLUGINS, settings) == len(controller.informers) + len(kueue.informers)
