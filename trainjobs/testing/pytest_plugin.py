"""pytest plugin: a real Kubernetes control plane for a whole test session.

Fixtures:

``kube_cluster`` (session)
    A started :class:`trainjobs.testing.ControlPlane`: ``.kubeconfig`` (admin),
    ``.kubectl(*args)``, ``.server``, ``.bin_dir``, ``.logs_dir``, ``.api()``. Started once,
    in a pytest temporary directory, on first use; stopped at session end, also when tests
    fail or the session is interrupted. If it cannot start, every test using it errors (never
    skips) with the failing component's log. Tests share it: give each test its own
    namespace (the ``kube_namespace`` fixture) or unique names.
``kube_cluster_options`` (session)
    The :class:`trainjobs.testing.ClusterOptions` used to start it; override it in a
    ``conftest.py`` to change the number or size of the fake nodes or add component flags.
``kube_namespace`` (function)
    A fresh namespace in ``kube_cluster``, deleted (without waiting) after the test.
``kueue`` (session)
    A started :class:`trainjobs.testing.Kueue` (v0.19.2) on ``kube_cluster``: its CRDs
    installed, its webhooks answering. Started once on first use, with ``kueue_options``
    (override that session fixture to change them); a test module that needs other options
    (e.g. a short ``waitForPodsReady``) wraps its tests in ``kueue.configured(options)``.
    Stopped at session end, its webhook configurations deleted. A Kueue that cannot start
    errors the test (never a skip) with its log; one that dies fails the test like any
    component of ``kube_cluster``. Built, when missing, right after collection.

``multi_cluster`` (module)
    A started :class:`trainjobs.testing.MultiCluster` for Kueue's MultiKueue: a manager and
    workers, each a whole control plane with Kueue, connected by MultiKueueClusters, a
    MultiKueueConfig and an AdmissionCheck (all Active). Module scope: three control planes
    are heavy on a small machine, so they stop after the module that used them. Options:
    the session fixture ``multi_cluster_options``. Errors (never skips) when it cannot start.

A component of ``kube_cluster`` that dies (e.g. kube-scheduler exiting after an API server
restart, which leaves every new pod Pending) fails the test during which it died, at teardown,
with the component's name, exit status and log tail; the next test using the cluster errors
at setup with the same message instead of timing out on Pending pods.

The binaries are found (or built: ~15 min on a cold Go cache) right after collection, when
some collected test uses ``kube_cluster``, so a build does not count against a per-test
timeout. When a test using the cluster fails, its report and the session summary name the
log dir.
Enable it with ``pytest_plugins = ["trainjobs.testing.pytest_plugin"]`` in a top-level
``conftest.py`` (or ``-p trainjobs.testing.pytest_plugin``).
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from trainjobs.testing._binaries import find_binaries
from trainjobs.testing._controlplane import ClusterOptions, ControlPlane
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kueue import Kueue, KueueOptions, find_kueue
from trainjobs.testing._multicluster import MultiCluster, MultiClusterOptions

_LOGS_DIR = pytest.StashKey[Path]()
_BIN_DIR = pytest.StashKey[Path | ControlPlaneError]()
_KUEUE_BUILD = pytest.StashKey[ControlPlaneError]()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if not any({"kube_cluster", "multi_cluster"} & set(getattr(item, "fixturenames", ()))
               for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("kube_cluster: finding the control-plane binaries (a first run builds)")
    try:
        session.config.stash[_BIN_DIR] = find_binaries()
    except ControlPlaneError as exc:  # reported by every test that uses the cluster
        session.config.stash[_BIN_DIR] = exc
    if any({"kueue", "multi_cluster"} & set(getattr(item, "fixturenames", ()))
           for item in session.items):
        if reporter is not None:
            reporter.write_line("kueue: finding Kueue (a first run builds)")
        try:
            find_kueue()
        except ControlPlaneError as exc:  # reported by every test that uses kueue
            session.config.stash[_KUEUE_BUILD] = exc


@pytest.fixture(scope="session")
def kube_cluster_options() -> ClusterOptions:
    """Options for ``kube_cluster``; override this fixture to change them."""
    return ClusterOptions()


@pytest.fixture(scope="session")
def kube_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    kube_cluster_options: ClusterOptions,
) -> Iterator[ControlPlane]:
    """A real control plane (etcd, apiserver, controller manager, scheduler, KWOK nodes)."""
    bin_dir = request.config.stash.get(_BIN_DIR, None)
    if isinstance(bin_dir, ControlPlaneError):
        raise bin_dir
    workdir = tmp_path_factory.mktemp("kube-cluster")
    request.config.stash[_LOGS_DIR] = workdir / "logs"
    plane = ControlPlane.start(workdir, kube_cluster_options, bin_dir=bin_dir)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kueue_options() -> KueueOptions:
    """Options for ``kueue``; override this fixture to change them."""
    return KueueOptions()


@pytest.fixture(scope="session")
def kueue(request: pytest.FixtureRequest, kube_cluster: ControlPlane,
          kueue_options: KueueOptions) -> Iterator[Kueue]:
    """Kueue on the session's control plane, its webhooks answering."""
    failed = request.config.stash.get(_KUEUE_BUILD, None)
    if failed is not None:
        raise failed
    started = Kueue.start(kube_cluster, kueue_options)
    kube_cluster.kueue = started
    try:
        yield started
    finally:
        kube_cluster.kueue = None
        started.stop()


@pytest.fixture(scope="session")
def multi_cluster_options() -> MultiClusterOptions:
    """Options for ``multi_cluster``; override this fixture to change them."""
    return MultiClusterOptions()


@pytest.fixture(scope="module")
def multi_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  multi_cluster_options: MultiClusterOptions) -> Iterator[MultiCluster]:
    """A MultiKueue manager and its workers (see the module docstring); stopped after the
    module."""
    bin_dir = request.config.stash.get(_BIN_DIR, None)
    if isinstance(bin_dir, ControlPlaneError):
        raise bin_dir
    failed = request.config.stash.get(_KUEUE_BUILD, None)
    if failed is not None:
        raise failed
    workdir = tmp_path_factory.mktemp("multi-cluster")
    request.config.stash[_LOGS_DIR] = workdir
    clusters = MultiCluster.start(workdir, multi_cluster_options, bin_dir=bin_dir)
    try:
        yield clusters
    finally:
        clusters.stop()


@pytest.fixture(autouse=True)
def _kube_cluster_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that uses ``kube_cluster`` when a component is dead before or after it."""
    if "kube_cluster" not in request.fixturenames:
        yield
        return
    plane: ControlPlane = request.getfixturevalue("kube_cluster")
    plane.check_alive()
    yield
    plane.check_alive()


@pytest.fixture
def kube_namespace(kube_cluster: ControlPlane) -> Iterator[str]:
    """A namespace of its own for one test."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    kube_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    logs = item.config.stash.get(_LOGS_DIR, None)
    if report.failed and logs is not None and "kube_cluster" in getattr(item, "fixturenames", ()):
        report.sections.append(("kube_cluster", f"control plane logs: {logs}"))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    logs = terminalreporter.config.stash.get(_LOGS_DIR, None)
    stats = terminalreporter.stats
    if logs is not None and (stats.get("failed") or stats.get("error")):
        terminalreporter.write_line(f"kube_cluster control plane logs: {logs}")
