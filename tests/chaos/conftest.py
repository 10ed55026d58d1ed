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
from typing import Any

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
    table between the markers of docs/reliability.md). A run of some scenarios only (``-k``)
    keeps the others' last figures, each marked with the run that measured it."""
    figures = session.config.stash.get(_FIGURES, [])
    if not session.config.getoption("--chaos") or not figures:
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                            capture_output=True, check=False).stdout.strip()
    started = session.config.stash.get(_STARTED, time.time())
    run: dict[str, Any] = {
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "duration_s": round(time.time() - started),
        "exitstatus": int(exitstatus),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                    "kubernetes": K8S_VERSION, "kwok": KWOK_VERSION,
                    "loadavg_at_start": session.config.stash.get(_LOAD, []),
                    "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
    }
    if os.environ.get(NOTE_ENV):
        run["note"] = os.environ[NOTE_ENV]
    measured = [{**f.to_json(), "run": {k: run[k] for k in ("commit", "date")}}
                for f in figures]
    run["scenarios"] = measured + _kept(measured)
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(run, indent=1) + "\n")
    if RELIABILITY_MD.exists():
        text = RELIABILITY_MD.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            RELIABILITY_MD.write_text(head + BEGIN + "\n" + figures_table(run) + END + tail)


#: Set to a sentence about the run (e.g. that other work shared the machine): it is kept
#: in chaos.json and printed above the table.
NOTE_ENV = "TRAINJOBS_CHAOS_NOTE"
_LOAD = pytest.StashKey[list[float]]()


def _family(scenario: str) -> str:
    """A scenario's name without its sizes: "SIGKILL storm (200 jobs, ...)" -> "SIGKILL
    storm"; a run of a family replaces its earlier figures, whatever its sizes."""
    return scenario.split(" (", 1)[0]


def _kept(measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scenarios of the last chaos.json that this run did not measure, each with the
    run that did (its commit and date)."""
    try:
        last = json.loads(RESULTS_JSON.read_text())
    except (OSError, ValueError):
        return []
    done = {_family(f["scenario"]) for f in measured}
    out = []
    for f in last.get("scenarios") or []:
        if _family(f["scenario"]) in done:
            continue
        out.append({**f, "run": f.get("run") or {"commit": last.get("commit"),
                                                  "date": last.get("date")}})
    return out


_STARTED = pytest.StashKey[float]()


def _attempt_cell(f: dict[str, Any]) -> str:
    """The pod watch's attempt figures of the kinds whose pods carry an attempt; "not
    measured" where the scenario ran no pod watch."""
    per_kind = f.get("per_kind") or {}
    cells = [f"{kind} {e['attempt_overlaps']} / {e['recreated_in_attempt']}"
             for kind, e in sorted(per_kind.items()) if e.get("attempt_overlaps") is not None]
    return ", ".join(cells) if cells else "not measured"


def _kind_notes(f: dict[str, Any]) -> list[str]:
    per_kind = f.get("per_kind") or {}
    if not per_kind:
        return []
    parts = []
    for kind, e in sorted(per_kind.items()):
        text = f"{kind} {e.get('jobs', 0)} jobs, {e.get('pods', 0)} pods, duplicates " \
               f"{e.get('duplicates', 0)}"
        if e.get("attempt_overlaps") is not None:
            text += (f", {e['jobs_restarted_together']} restarted together (attempts up to "
                     f"{e['attempts_max']}), jobs with two attempts alive at once "
                     f"{e['attempt_overlaps']}, pods created twice in an attempt "
                     f"{e['recreated_in_attempt']}")
        if e.get("attempts_without_cause") is not None:
            text += (f", attempts ended without a failed or lost pod "
                     f"{e['attempts_without_cause']}, restarts counted {e['restarts_counted']} "
                     f"for {e['failures_made']} failures made (jobs counting more restarts "
                     f"than failures: {e['restarts_over_failures']})")
        parts.append(text)
    out = ["per kind (pod watch and audit log): " + "; ".join(parts)]
    extra = f.get("extra") or {}
    fail_once = extra.get("fail_once")
    if fail_once:
        out.append(f"shards chosen to fail once: {fail_once['chosen']}, failed "
                   f"{fail_once['failed']} (not failed: {fail_once['not_failed']})")
    fail = extra.get("fail_attempts")
    if fail:
        out.append(f"shards chosen to fail in consecutive attempts: {fail['chosen']} "
                   f"({fail['attempts_to_fail']} failures chosen), failures made "
                   f"{fail['failed']} (never failed: {fail['not_failed']})")
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STARTED] = time.time()
    session.config.stash[_LOAD] = [round(x, 2) for x in os.getloadavg()]


def figures_table(run: dict[str, Any]) -> str:
    """The markdown written between the markers of docs/reliability.md."""
    scenarios = run["scenarios"]
    assert isinstance(scenarios, list)
    earlier = sorted({f"`{f['run']['commit']}` ({f['run']['date']})" for f in scenarios
                      if f.get("run", {}).get("commit") != run["commit"]})
    rows = [
        f"Run of `make chaos` at commit `{run['commit']}` on {run['date']}: "
        f"{run['duration_s']} s in all (exit status {run['exitstatus']}; "
        f"machine {run['machine']})."
        + (f" {run['note']}" if run.get("note") else "")
        + (f" Rows measured by earlier runs say so: {', '.join(earlier)}." if earlier else ""),
        "",
        "| scenario | measured at | jobs | finished | lost | faults | duplicates "
        "| max creates/pod name | failures recreated | KWOK unasked deletes | pods deleted again "
        "| orphans | statuses seen | two exclusive True | finished flips "
        "| attempts alive at once / pods created twice in an attempt "
        "| recovery (s) | duration (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in scenarios:
        recovery = ", ".join(f"{k} {v}" for k, v in f["recovery_s"].items()) or "-"
        at = (f.get("run") or {}).get("commit", run["commit"])
        nm = _not_measured(f)
        rows.append(
            f"| {f['scenario']} | `{at}` | {f['jobs']} | {f['finished']} | {len(f['lost'])} | "
            f"{f['faults']} | {nm or f['duplicates']} | {nm or f['max_creates_per_pod_name']} | "
            f"{nm or f['failures_recreated']} | {nm or f['unasked_kwok_deletes']} | "
            f"{nm or f.get('deleted_again', '-')} | {nm or len(f['orphans'])} | "
            f"{nm or f['statuses_seen']} | {nm or len(f['double_true'])} | "
            f"{nm or len(f['finished_flips'])} | "
            f"{_attempt_cell(f)} | {recovery} | {f['duration_s']} |")
    notes = [f"- {f['scenario']}: {n}" for f in scenarios
             for n in [*f["notes"], *_kind_notes(f)]]
    return "\n".join(rows + (["", *notes] if notes else [])) + "\n"


def _not_measured(f: dict[str, Any]) -> str:
    """Figures a scenario's code did not compute in the run that recorded them: the hostile
    specs before they had an audit replay and watches (they printed 0)."""
    if f["scenario"].startswith("hostile specs") and not f["statuses_seen"]:
        return "not measured"
    return ""
