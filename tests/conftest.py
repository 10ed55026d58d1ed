"""Shared pytest configuration: the real control plane fixture (``kube_cluster``) for the
integration tests, and the ``--chaos`` and ``--image`` switches. Plugins and options must be
declared in the top-level conftest.

The long chaos scenarios (tests/chaos, marker ``chaos``) took 28 minutes here: ``make test``
(``pytest tests``) collects them and deselects them on purpose - the summary line says
"N deselected" - while their small versions run; ``make chaos`` runs them with ``--chaos``.
The operator image's proof (tests/image, marker ``image``: build, unpack, run in a chroot)
takes minutes too; ``make image`` runs it with ``--image``. MultiKueue's lost-worker scenario
(marker ``worker_loss``: three clusters of its own, minutes) runs in ``make multikueue``
(``--worker-loss``).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["trainjobs.testing.pytest_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos", action="store_true", default=False,
                     help="also run the long chaos scenarios (marker chaos; `make chaos`) and "
                          "write their figures to docs/reliability.md")


    parser.addoption("--image", action="store_true", default=False,
                     help="also build the operator image and prove it (marker image; "
                          "`make image`, a few minutes)")
    parser.addoption("--worker-loss", action="store_true", default=False,
                     help="also run MultiKueue's lost-worker scenario (marker worker_loss; "
                          "`make multikueue`, its own three clusters, minutes)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, option in (("chaos", "--chaos"), ("image", "--image"),
                           ("worker_loss", "--worker-loss")):
        if config.getoption(option):
            continue
        long = [item for item in items if item.get_closest_marker(marker) is not None]
        if long:
            config.hook.pytest_deselected(items=long)
            items[:] = [item for item in items if item.get_closest_marker(marker) is None]
