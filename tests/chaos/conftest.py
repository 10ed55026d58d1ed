"""Fixtures of the chaos suite: a control plane of its own (audit log on, restarted by the
tests, so never the session's shared ``kube_cluster``), a namespace and operators per test,
and the figures each scenario reports.

Two sizes of every scenario: the small one runs in ``make test`` (a couple of minutes in all);
the full one is marked ``chaos`` and runs only with ``--chaos`` (``make chaos``), which also
writes the figures to docs/reliability.md (see tests/conftest.py for how ``make test`` leaves
the ``chaos`` tests out).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import ChaosEnv, Figures
from tests.integration.operator_helpers import CRDS_DIR, REPO, Namespace, Operators
from trainjobs.testing import (
    AUDIT_WRITES_AND_POD_DELETES,
    K8S_VERSION,
    KWOK_VERSION,
    ClusterOptions,
    ControlPlane,
    apply_crds,
)

RESULTS_JSON = REPO / "docs" / "reliability" / "chaos.json"
RELIABILITY_MD = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- chaos figures: begin -->", "<!-- chaos figures: end -->"
_FIGURES = pytest.StashKey[list[Figures]]()


@pytest.fixture(scope="session")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane for the chaos suite alone: the API server logs every write (pod
    deletes with their bodies), and there is room for 200 jobs' pods at once."""
    options = ClusterOptions(nodes=4, node_pods="300", node_cpu="1000", node_memory="4Ti",
                             audit_policy=AUDIT_WRITES_AND_POD_DELETES, start_timeout=240)
    plane = ControlPlane.start(tmp_path_factory.mktemp("chaos-cluster"), options)
    try:
        apply_crds(plane.kubeconfig, CRDS_DIR, timeout=120)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def chaos_env(request: pytest.FixtureRequest, chaos_cluster: ControlPlane,
              tmp_path: Path) -> Iterator[ChaosEnv]:
    """A fresh namespace of the chaos cluster and operators for it (stopped after the test;
    one that exits other than expected fails it)."""
    chaos_cluster.check_alive()
    name = f"chaos-{uuid.uuid4().hex[:8]}"
    chaos_cluster.kubectl("create", "namespace", name)
    ops = Operators(chaos_cluster, [name], tmp_path)
    figures = request.config.stash.setdefault(_FIGURES, [])
    try:
        yield ChaosEnv(chaos_cluster, Namespace(chaos_cluster, name), ops, figures)
    finally:
        problems = ops.stop_all()
        chaos_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
        if request.node.stash.get(_FAILED, False) and ops.started:
            print(ops.report())
    assert not problems, "\n".join(problems)
    chaos_cluster.check_alive()


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With --chaos: write the figures of this run (docs/reliability/chaos.json, and the
    table between the markers of docs/reliability.md)."""
    figures = session.config.stash.get(_FIGURES, [])
    if not session.config.getoption("--chaos") or not figures:
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                            capture_output=True, check=False).stdout.strip()
    started = session.config.stash.get(_STARTED, time.time())
    run = {
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "duration_s": round(time.time() - started),
        "exitstatus": int(exitstatus),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                    "kubernetes": K8S_VERSION, "kwok": KWOK_VERSION,
                    "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "scenarios": [f.to_json() for f in figures],
    }
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(run, indent=1) + "\n")
    if RELIABILITY_MD.exists():
        text = RELIABILITY_MD.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            RELIABILITY_MD.write_text(head + BEGIN + "\n" + figures_table(run) + END + tail)


_STARTED = pytest.StashKey[float]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STARTED] = time.time()


def figures_table(run: dict[str, object]) -> str:
    """The markdown written between the markers of docs/reliability.md."""
    rows = [
        f"Run of `make chaos` at commit `{run['commit']}` on {run['date']}: "
        f"{run['duration_s']} s in all (exit status {run['exitstatus']}; "
        f"machine {run['machine']}).",
        "",
        "| scenario | jobs | finished | lost | faults | duplicates | max creates/pod name "
        "| failures recreated | KWOK unasked deletes | pods deleted again | orphans "
        "| statuses seen | two exclusive True | finished flips | recovery (s) | duration (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    scenarios = run["scenarios"]
    assert isinstance(scenarios, list)
    for f in scenarios:
        recovery = ", ".join(f"{k} {v}" for k, v in f["recovery_s"].items()) or "-"
        rows.append(
            f"| {f['scenario']} | {f['jobs']} | {f['finished']} | {len(f['lost'])} | "
            f"{f['faults']} | {f['duplicates']} | {f['max_creates_per_pod_name']} | "
            f"{f['failures_recreated']} | {f['unasked_kwok_deletes']} | "
            f"{f.get('deleted_again', '-')} | {len(f['orphans'])} | "
            f"{f['statuses_seen']} | {len(f['double_true'])} | {len(f['finished_flips'])} | "
            f"{recovery} | {f['duration_s']} |")
    notes = [f"- {f['scenario']}: {n}" for f in scenarios for n in f["notes"]]
    return "\n".join(rows + (["", *notes] if notes else [])) + "\n"
