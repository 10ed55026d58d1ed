"""Sentences in the docs that state a figure or a behaviour the code or a data file holds:
each is read against its source, so that the next change to one fails here until the other
follows (issue 35 found each of these drifted)."""

from __future__ import annotations

import json
import re
import statistics
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIGJOB = "docs/benchmarks/bigjob-2026-11-26-b.json"
#: Where the operator's memory for a 2,000-replica job is stated.
MEMORY_PAGES = ("charts/trainjobs/values.yaml", "docs/helm.md", "docs/operator.md",
                "docs/api.md")
PLUGINS_GUIDE = "docs/plugins.md"
_NUMBERS = {2: "Two", 3: "Three", 4: "Four", 5: "Five"}


def _read(path: str) -> str:
    return (ROOT / path).read_text()


def _one_line(text: str) -> str:
    """Text with its line breaks and YAML comment marks folded, as a reader reads it."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)


@pytest.mark.parametrize("page", MEMORY_PAGES)
def test_the_large_jobs_memory_is_the_current_bigjob_datas(page: str) -> None:
    runs = json.loads(_read(BIGJOB))["runs"]
    current = [r["rss_mb_peak"] for r in runs if r["label"].startswith("new-")]
    assert len(current) == 5
    text = _one_line(_read(page))
    stated = [float(m) for m in re.findall(r"peaks? the operator at (?:about |~)(\d+) MB", text)]
    assert stated, f"{page}: no 'peaks the operator at about N MB'"
    for figure in stated:
        assert abs(figure - statistics.median(current)) <= 5, (page, figure, current)
    assert f"{min(current)}-{max(current)} MB" in text, page
    assert Path(BIGJOB).name in text, f"{page} does not name its data, {BIGJOB}"


def test_the_lost_worker_timeout_is_the_modules() -> None:
    module = _read("tests/integration/test_multikueue_worker_lost.py")
    (timeout,) = re.findall(r"^WORKER_LOST_TIMEOUT = (\d+)\.0$", module, re.MULTILINE)
    said = re.findall(r"module now uses (\d+) s", _one_line(_read("docs/multikueue.md")))
    assert said == [timeout]


def test_the_migration_table_says_a_template_restart_policy_is_refused() -> None:
    """The code refuses it (tests/unit/core/test_template_restart_policy.py); it is not replaced."""
    (row,) = [line for line in _read("docs/migrating.md").splitlines()
              if line.startswith("| where `restartPolicy` lives")]
    ours = row.split("|")[3]
    assert "refused" in ours and "replaced" not in ours


def test_readme_names_every_group_make_test_deselects() -> None:
    markers = tomllib.loads(_read("pyproject.toml"))["tool"]["pytest"]["ini_options"]["markers"]
    deselected = [m for m in markers if "make test deselects it" in m]
    targets = [re.search(r"\((?:make (\w+)|[^)]*\(make (\w+)\))", m) for m in deselected]
    text = _one_line(_read("README.md"))
    assert f"{_NUMBERS[len(deselected)]} groups are deselected" in text
    for marker, target in zip(deselected, targets, strict=True):
        assert target, marker
        assert f"`make {target.group(1) or target.group(2)}`" in text, marker


def test_benchmarks_first_screen_links_data_and_command_for_every_figure() -> None:
    """docs/benchmarks.md opens with the latest figures against their baselines: each row
    links a data file that exists and names the command that reproduces it."""
    page = _read("docs/benchmarks.md")
    first = page[:page.index("\n## ")]  # what comes before the first section
    rows = [line for line in first.splitlines() if line.startswith("| ")][1:]  # after the header
    assert len(rows) >= 10
    for row in rows:
        _, latest, baseline, data, command = row.strip("|").split(" | ")
        assert "**" in latest and baseline.strip(), row
        files = re.findall(r"\]\((benchmarks/[^)]+\.json)\)", data)
        assert files or data.strip() == "as above", row
        assert all((ROOT / "docs" / f).is_file() for f in files), row
        assert command.strip().startswith("`bench.") or command.strip() == "as above", row


def test_the_hook_list_does_not_claim_one_run_order() -> None:
    """Hooks 8-10 of hookspecs.py run once at operator start, not after the job hooks."""
    from trainjobs.plugin import hookspecs

    guide = _read(PLUGINS_GUIDE)
    hook_list = guide.split("## The hooks")[1].split("\n### ")[0]
    for name, text in (("hookspecs.py", hookspecs.__doc__ or ""), (PLUGINS_GUIDE, hook_list)):
        folded = _one_line(text)
        assert "fixed order" not in folded and "run in this order" not in folded, name
        assert "not one sequence" in folded, name
