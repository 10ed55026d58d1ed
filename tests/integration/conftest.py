"""Fixtures of the integration tests: the CRDs installed once per session, the test namespace
as a `Namespace` helper, and operators (stopped at teardown, their logs attached to a failing
test's report).

Two ways to get an operator:

``bare_ns`` + ``operators``
    The test's own namespace, and operators the test starts (``operators.start(...)``) and may
    signal, kill or restart: for tests of the process itself.
``ns``
    The test's own namespace, watched by one operator shared by the tests of the module that
    use ``op_ns``: started once with a ``--namespace`` for each of their namespaces (known
    before they exist), so that tests of reconcile behaviour do not each pay the operator's
    start-up (imports, lists of every watched kind, readiness). Jobs still never see each
    other: each test has its namespace. At the end of the module the shared operator must stop
    cleanly (SIGTERM -> 0) and must not have logged errors.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from trainjobs_kubeflow import GROUP as KUBEFLOW_GROUP

from tests.integration.operator_helpers import CRDS_DIR, Namespace, Operators
from trainjobs.crdgen import crd_file_name, render_crd_yaml
from trainjobs.plugin.manager import load_plugins
from trainjobs.testing import (
    GANG_SCHEDULERS,
    ControlPlane,
    KueueOptions,
    apply_crds,
    find_gang_scheduler,
)

_OPERATORS = pytest.StashKey[Operators]()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the gang schedulers before any test runs when their tests are collected (a cold
    build takes longer than a test may); `make test` has built them already."""
    if session.config.option.collectonly:
        return
    if any("gang_cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        for name in GANG_SCHEDULERS:
            find_gang_scheduler(name)


@pytest.fixture(scope="session")
def trainjobs_crds(kube_cluster: ControlPlane) -> list[str]:
    """The CRDs of crds/ applied (server-side) and Established; their names."""
    return apply_crds(kube_cluster.kubeconfig, CRDS_DIR)


@pytest.fixture(scope="module")
def kubeflow_crds(kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[list[str]]:
    """The CRDs `trainjobs crds` writes with the plugin enabled, of group kubeflow.org; deleted
    after the module: while they are installed, kubectl's `tfjob`/`mxjob` may mean
    kubeflow.org's kinds (docs/migrating.md), which the session's other tests do not expect."""
    out = tmp_path_factory.mktemp("kubeflow-crds")
    for framework in load_plugins(enable=["kubeflow"]).frameworks.values():
        if framework.group == KUBEFLOW_GROUP:
            (out / crd_file_name(framework)).write_text(render_crd_yaml(framework))
    names = apply_crds(kube_cluster.kubeconfig, out)
    yield names
    kube_cluster.kubectl("delete", "crd", *names, "--wait=true", timeout=120)
    # kubectl's discovery cache (beside the kubeconfig) would still map tfjob to kubeflow.org.
    shutil.rmtree(kube_cluster.kubeconfig.parent / "kubectl-cache", ignore_errors=True)


@pytest.fixture(scope="session")
def kueue_options() -> KueueOptions:
    """The session's Kueue (the plugin's ``kueue`` fixture): ``batch/job``, and the kinds
    of the built-in plugins as external frameworks (``Kind.version.group``: their Workloads
    are the operator's, and Kueue then knows them as owners)."""
    return KueueOptions(external_frameworks=tuple(sorted(
        f"{fw.kind}.{fw.version}.{fw.group}" for fw in load_plugins().frameworks.values())))


@pytest.fixture
def bare_ns(
    kube_cluster: ControlPlane, trainjobs_crds: list[str], kube_namespace: str
) -> Namespace:
    """The test's own namespace, with the CRDs installed; no operator watches it."""
    return Namespace(kube_cluster, kube_namespace)


@pytest.fixture
def operators(
    request: pytest.FixtureRequest, kube_cluster: ControlPlane, bare_ns: Namespace,
    tmp_path: Path,
) -> Iterator[Operators]:
    """Start operators watching ``bare_ns`` with ``operators.start(...)``; all are stopped after the
    test, and one that exits other than expected (0 on SIGTERM) fails it."""
    ops = Operators(kube_cluster, [bare_ns.name], tmp_path)
    request.node.stash[_OPERATORS] = ops
    try:
        yield ops
    finally:
        problems = ops.stop_all()
    assert not problems, "\n".join(problems)


@dataclass
class SharedOperator:
    operators: Operators
    namespaces: dict[str, str]  # test node id -> namespace


@pytest.fixture(scope="module")
def shared_operator(
    request: pytest.FixtureRequest,
    kube_cluster: ControlPlane,
    trainjobs_crds: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SharedOperator]:
    users = [item for item in request.session.items
             if item.module is request.module and "ns" in getattr(item, "fixturenames", ())]
    names = {item.nodeid: f"test-{uuid.uuid4().hex[:10]}" for item in users}
    ops = Operators(kube_cluster, sorted(names.values()),
                    tmp_path_factory.mktemp("shared-operator"))
    try:
        ops.start(name="shared-operator")
        yield SharedOperator(ops, names)
    finally:
        problems = ops.stop_all()
    errors = ops.started[0].problems() if ops.started else []
    assert not problems and not errors, "\n".join(problems + errors)


@pytest.fixture
def ns(
    request: pytest.FixtureRequest, kube_cluster: ControlPlane, shared_operator: SharedOperator
) -> Iterator[Namespace]:
    """The test's own namespace, watched by the module's shared operator."""
    name = shared_operator.namespaces[request.node.nodeid]
    request.node.stash[_OPERATORS] = shared_operator.operators
    kube_cluster.kubectl("create", "namespace", name)
    try:
        yield Namespace(kube_cluster, name)
    finally:
        kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    ops = item.stash.get(_OPERATORS, None)
    if report.failed and ops is not None and ops.started:
        report.sections.append(("operator logs", ops.report()))
    return report
