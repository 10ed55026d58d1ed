"""`ensure_built`, the one find-or-build step of every pinned component the harness and the
benchmarks start (Kueue, the gang schedulers, training-operator): a real build script run in
a temporary directory standing in for the package's scripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainjobs.testing import _binaries
from trainjobs.testing._binaries import ensure_built
from trainjobs.testing._errors import ControlPlaneError


@pytest.fixture
def scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_binaries, "build_script",
                        lambda name: p if (p := tmp_path / name).is_file() else None)
    return tmp_path


def test_built_once_then_found(scripts: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (scripts / "build-x.sh").write_text(
        'mkdir -p "$HOME_DIR" && echo "$1 $X_VERSION" > "$HOME_DIR/done"; echo built >&2\n')
    complete = (home / "done").is_file
    assert ensure_built("x", home, complete, "build-x.sh", "arg",
                        env={"X_VERSION": "v1", "HOME_DIR": str(home)}) == home
    assert (home / "done").read_text() == "arg v1\n"
    (scripts / "build-x.sh").write_text("exit 1\n")  # found: the script does not run again
    assert ensure_built("x", home, complete, "build-x.sh") == home


def test_not_built_and_not_allowed_names_the_command(scripts: Path, tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match=r"x v1 is not built in .*: run "
                                                r"scripts/build-x.sh coscheduling"):
        ensure_built("x v1", tmp_path / "none", lambda: False, "build-x.sh", "coscheduling",
                     build=False)


def test_a_script_that_fails_or_builds_nothing_is_an_error(scripts: Path,
                                                           tmp_path: Path) -> None:
    (scripts / "build-x.sh").write_text("exit 3\n")
    with pytest.raises(ControlPlaneError, match=r"build-x.sh failed \(exit status 3\)"):
        ensure_built("x", tmp_path / "none", lambda: False, "build-x.sh")
    (scripts / "build-x.sh").write_text("true\n")
    with pytest.raises(ControlPlaneError, match=r"build-x.sh finished but x is incomplete in "):
        ensure_built("x", tmp_path / "none", lambda: False, "build-x.sh")
