"""Fixtures of the unit tests: the built-in plugins (see helpers.builtin_plugins)."""

from __future__ import annotations

import pytest

from trainjobs.plugin.manager import PluginManager

from .helpers import PLUGINS


@pytest.fixture
def plugins() -> PluginManager:
    """The built-in plugins only, loaded through the `trainjobs` entry-point group."""
    return PLUGINS
