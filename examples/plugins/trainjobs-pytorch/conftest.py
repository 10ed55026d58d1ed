"""The trainjobs test control plane for this package's tests: the `kube_cluster` (session) and
`kube_namespace` fixtures. `pytest_plugins` must live in the top-level conftest.py."""

pytest_plugins = ["trainjobs.testing.pytest_plugin"]
