"""Shared pytest configuration: the real control plane fixture (``kube_cluster``) for the
integration tests. Plugins must be declared in the top-level conftest."""

pytest_plugins = ["trainjobs.testing.pytest_plugin"]
