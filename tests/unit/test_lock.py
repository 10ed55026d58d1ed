"""uv.lock matches pyproject.toml: every runtime, test and bench requirement is locked as
written. (`make test` installs with `uv sync --locked`, which refuses a stale lock; this test
says so sooner, offline, naming the requirement: run `make lock`.)"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def _key(name: str, specifier: str, extra: str | None) -> tuple[str, str, str]:
    spec = ",".join(sorted(str(s) for s in Requirement(f"x{specifier}").specifier))
    return canonicalize_name(name), spec, extra or ""


def declared() -> set[tuple[str, str, str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = set()
    groups: list[tuple[str | None, list[str]]] = [(None, project["dependencies"])]
    groups += list(project.get("optional-dependencies", {}).items())
    for extra, reqs in groups:
        for raw in reqs:
            req = Requirement(raw)
            out.add(_key(req.name, str(req.specifier), extra))
    return out


def locked() -> set[tuple[str, str, str]]:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    ours: dict[str, Any] = next(p for p in lock["package"] if p["name"] == "trainjobs")
    out = set()
    for dep in ours["metadata"]["requires-dist"]:
        marker = dep.get("marker", "")
        extra = marker.split("==")[1].strip().strip("'\"") if "extra ==" in marker else None
        out.add(_key(dep["name"], dep.get("specifier", ""), extra))
    return out


def test_uv_lock_matches_pyproject() -> None:
    missing, stale = declared() - locked(), locked() - declared()
    assert not missing and not stale, (
        f"uv.lock does not match pyproject.toml: run `make lock` and commit uv.lock\n"
        f"  not locked: {sorted(missing)}\n  locked but no longer declared: {sorted(stale)}")


def test_runtime_ranges_stay_open() -> None:
    """Library users resolve trainjobs with their own pins: no == in the runtime ranges."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [r for r in project["dependencies"] if "==" in r]
