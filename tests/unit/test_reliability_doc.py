"""docs/reliability.md's first screen says what docs/reliability/chaos.json measured (issue 35):
each scenario's row names the commit that measured it, and every time it quotes is one of
that run's, so an outage is given as measured from the kill until the component served
again (etcd: 15.6 s for a configured 10 s), never as the configured time alone."""

from __future__ import annotations

import json
import re
from typing import Any

from .helpers import REPO

DOC = REPO / "docs" / "reliability.md"
DATA = REPO / "docs" / "reliability" / "chaos.json"
#: The first screen's scenario cell -> the start of the scenario's title in chaos.json.
ROWS = {
    "SIGKILL storm, 200 jobs, 20 kills": "SIGKILL storm (200 jobs",
    "leader SIGKILL, 100 jobs": "leader SIGKILL during a burst (100 jobs",
    "kube-apiserver outage, 50 jobs": "kube-apiserver killed mid-run",
    "etcd outage, 50 jobs": "etcd killed mid-run",
    "hostile specs, 1,000": "hostile specs (1,000)",
    "ownership conflicts, 10 rounds": "ownership conflicts (10 rounds)",
}
SECONDS = re.compile(r"(\d+(?:\.\d+)?) s\b")


def _first_screen() -> list[list[str]]:
    text = DOC.read_text()
    section = text.split("## Current figures", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ")]
    return rows[1:]  # (the header)


def _scenario(title: str) -> dict[str, Any]:
    scenarios = json.loads(DATA.read_text())["scenarios"]
    found = [s for s in scenarios if s["scenario"].startswith(title)]
    assert len(found) == 1, f"chaos.json has {len(found)} scenarios titled {title!r}..."
    return dict(found[0])


def _rows_by_scenario() -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    current = ""
    for row in _first_screen():
        current = row[0] or current
        out.setdefault(current, []).append(row)
    return out


def test_each_row_names_the_commit_that_measured_it() -> None:
    rows = _rows_by_scenario()
    assert set(ROWS) <= set(rows), sorted(rows)
    for cell, title in ROWS.items():
        commit = _scenario(title)["run"]["commit"]
        measured = {row[4] for row in rows[cell] if row[4] != "-"}
        assert measured == {f"`{commit}`"}, (cell, measured, commit)


def test_every_time_quoted_is_the_runs_own() -> None:
    for cell, title in ROWS.items():
        data = _scenario(title)
        measured = {f"{v:.2f}".rstrip("0").rstrip(".") for v in data["recovery_s"].values()}
        outage = data["extra"].get("outage_s")
        if outage is not None:
            measured.add(f"{outage:.1f}")
        for row in _rows_by_scenario()[cell]:
            for value in SECONDS.findall(row[2]):
                assert value in measured, (cell, value, sorted(measured))


def test_an_outage_is_given_as_measured_not_as_configured() -> None:
    text = DOC.read_text()
    for component, cell in (("kube-apiserver", "kube-apiserver outage, 50 jobs"),
                            ("etcd", "etcd outage, 50 jobs")):
        data = _scenario(ROWS[cell])
        configured = re.search(r"down (\d+) s", data["scenario"])
        assert configured is not None, data["scenario"]
        row = _rows_by_scenario()[cell][0]
        assert f"configured down {configured.group(1)} s" in row[1], row
        assert row[2].startswith(f"{data['extra']['outage_s']:.1f} s"), (row, data["extra"])
        scenarios = text.split("## Scenarios", 1)[1].split("\n## ", 1)[0]
        said = [line for line in scenarios.splitlines()
                if f"{data['extra']['outage_s']:.1f} s from the kill until" in line]
        assert len(said) == 1, (component, data["extra"]["outage_s"])


def test_the_small_storms_figures_are_its_runs() -> None:
    data = json.loads((REPO / "docs" / "reliability" /
                       "sigkill-storm-small-2026-11-28.json").read_text())
    c2 = data["per_kind"]["Caffe2Job"]
    rows = _rows_by_scenario()["SIGKILL storm, small (`make test`): 12 jobs, 5 kills"]
    assert rows[0][2] == (f"{c2['attempts_without_cause']} / {c2['restarts_counted']} for "
                          f"{c2['failures_made']} / {c2['attempts_max']}"), rows[0]
    assert rows[1][2] == (f"{data['finished']} of {data['jobs']} / {data['duplicates']} / "
                          f"{c2['attempt_overlaps']} / {c2['recreated_in_attempt']}"), rows[1]
    assert {row[4].split()[0] for row in rows} == {f"`{data['run']['commit']}`"}
