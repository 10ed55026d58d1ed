"""Shared pytest configuration: the real control plane fixture (``kube_cluster``) for the
integration tests, and the ``--chaos`` switch. Plugins and options must be declared in the
top-level conftest.

The long chaos scenarios (tests/chaos, marker ``chaos``) take about 15 minutes: ``make test``
(``pytest tests``) collects them and deselects them on purpose - the summary line says
"N deselected" - while their small versions run; ``make chaos`` runs them with ``--chaos``.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["trainjobs.testing.pytest_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos", action="store_true", default=False,
                     help="also run the long chaos scenarios (marker chaos; `make chaos`) and "
                          "write their figures to docs/reliability.md")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--chaos"):
        return
    long = [item for item in items if item.get_closest_marker("chaos") is not None]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if item.get_closest_marker("chaos") is None]
