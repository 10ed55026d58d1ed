"""Fixtures of the integration tests: the CRDs installed once per session, the test namespace
as a `Namespace` helper, and operators started per test (stopped at teardown, their logs
attached to a failing test's report)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.integration.operator_helpers import CRDS_DIR, Namespace, Operators
from trainjobs.testing import ControlPlane, apply_crds

_OPERATORS = pytest.StashKey[Operators]()


@pytest.fixture(scope="session")
def trainjobs_crds(kube_cluster: ControlPlane) -> list[str]:
    """The CRDs of crds/ applied (server-side) and Established; their names."""
    return apply_crds(kube_cluster.kubeconfig, CRDS_DIR)


@pytest.fixture
def ns(kube_cluster: ControlPlane, trainjobs_crds: list[str], kube_namespace: str) -> Namespace:
    """The test's own namespace, with the CRDs installed."""
    return Namespace(kube_cluster, kube_namespace)


@pytest.fixture
def operators(
    request: pytest.FixtureRequest, kube_cluster: ControlPlane, ns: Namespace, tmp_path: Path
) -> Iterator[Operators]:
    """Start operators with ``operators.start(...)``; all are stopped after the test, and one
    that exits other than expected (0 on SIGTERM) fails it."""
    ops = Operators(kube_cluster, ns.name, tmp_path)
    request.node.stash[_OPERATORS] = ops
    try:
        yield ops
    finally:
        problems = ops.stop_all()
    assert not problems, "\n".join(problems)


@pytest.fixture
def operator(operators: Operators) -> Operators:
    """One operator watching the test namespace, ready; ``operators.started[0]``."""
    operators.start()
    return operators


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    ops = item.stash.get(_OPERATORS, None)
    if report.failed and ops is not None and ops.started:
        report.sections.append(("operator logs", ops.report()))
    return report
