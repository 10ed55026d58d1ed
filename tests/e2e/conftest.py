"""Fixtures for the end-to-end tests: real framework virtualenvs and a `trainjobs run` helper.

Each framework's venv is made by scripts/framework-venv.sh (a no-op when cached), so these tests
build what they need instead of skipping. `run_job` runs the real CLI as a subprocess with the
framework's venv first on PATH, exactly as `make demo` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAINJOBS = Path(sys.executable).with_name("trainjobs")
RESULT_PREFIX = "TRAINJOBS_RESULT "


def framework_venv(name: str) -> Path:
    out = subprocess.run([str(REPO / "scripts" / "framework-venv.sh"), name], check=False,
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        pytest.fail(f"could not build the {name} venv:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def mxnet_venv() -> Path:
    return framework_venv("mxnet")


@pytest.fixture(scope="session")
def tensorflow_venv() -> Path:
    return framework_venv("tensorflow")


@pytest.fixture(scope="session")
def gloo_venv() -> Path:
    return framework_venv("gloo")


@dataclass
class RunResult:
    returncode: int
    output: str
    results: list[dict[str, Any]] = field(default_factory=list)

    def by_role(self, role: str) -> list[dict[str, Any]]:
        return [r for r in self.results if r.get("role") == role]


def parse_results(output: str) -> list[dict[str, Any]]:
    found = []
    for line in output.splitlines():
        _, sep, payload = line.partition(RESULT_PREFIX)
        if sep:
            found.append(json.loads(payload))
    return found


def env_with(venv: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def run_job(tmp_path: Path) -> Iterator[Callable[..., RunResult]]:
    """Run `trainjobs run [FLAGS] JOB` to completion (or `timeout`), with `venv` on PATH."""
    started: list[subprocess.Popen[str]] = []

    def run(job: Path, venv: Path, timeout: float = 600,
            on_line: Callable[[str, subprocess.Popen[str]], None] | None = None,
            flags: Sequence[str] = ()) -> RunResult:
        proc = subprocess.Popen(
            [str(TRAINJOBS), "run", "--no-color", "--run-dir", str(tmp_path / "runs"), *flags,
             str(job)],
            cwd=tmp_path, env=env_with(venv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        started.append(proc)
        lines: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line, proc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            proc.send_signal(signal.SIGTERM)
            reader.join(60)
            pytest.fail(f"{job.name} did not finish in {timeout}s:\n{''.join(lines[-60:])}")
        assert proc.stdout is not None
        proc.stdout.close()
        code = proc.wait(timeout=60)
        output = "".join(lines)
        return RunResult(code, output, parse_results(output))

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
