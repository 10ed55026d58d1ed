"""Stalls on a laptop (runPolicy.progressDeadlineSeconds): `trainjobs run` takes the same
decision as the operator, from the replicas' real `trainjobs_progress` reports. A worker that
reports three steps and then hangs is restarted (Restart) and finishes on its second process,
or fails the job with the stall named (Fail)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.e2e

# The worker reports steps 1-3, then hangs on its first process only (the marker file says
# whether one ran before); a second process reports up to step 6 and exits 0.
PROGRAM = """
import pathlib, sys, time
import trainjobs_progress as progress
marker = pathlib.Path({marker!r})
first = not marker.exists()
marker.write_text(marker.read_text() + "run\\n" if marker.exists() else "run\\n")
for step in range(1, 4):
    progress.report(step, total=6, loss=1.0 / step)
    time.sleep(0.2)
progress.flush()
if first or {always_hang}:
    print("worker hangs", flush=True)
    time.sleep(300)
for step in range(4, 7):
    progress.report(step, total=6, loss=1.0 / step)
progress.flush()
print("worker done", flush=True)
"""


def stalling_job(tmp_path: Path, action: str, always_hang: bool = False) -> tuple[Path, Path]:
    marker = tmp_path / "runs-of-worker-0"

    def rspec(command: list[str]) -> dict[str, Any]:
        return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [{
            "name": "mxnet", "image": "unused", "command": command}]}}}

    job = {
        "apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob",
        "metadata": {"name": "stalls"},
        "spec": {"runPolicy": {"backoffLimit": 2, "progressDeadlineSeconds": 3,
                               "progressDeadlineAction": action},
                 "replicaSpecs": {
                     "Scheduler": rspec(["sleep", "300"]), "Server": rspec(["sleep", "300"]),
                     "Worker": rspec(["python3", "-c", PROGRAM.format(
                         marker=str(marker), always_hang=always_hang)])}},
    }
    path = tmp_path / f"stalls-{action}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, marker


def dev_venv() -> Path:
    return Path(sys.executable).parent.parent


def test_a_hung_worker_is_restarted_and_finishes(run_job: Any, tmp_path: Path) -> None:
    job, marker = stalling_job(tmp_path, "Restart")
    run = run_job(job, dev_venv(), timeout=120)
    assert run.returncode == 0, run.output[-3000:]
    assert marker.read_text() == "run\nrun\n"  # one hang, one process that finished
    warned = re.search(r"ProgressDeadlineExceeded: no progress for 3s \(progressDeadlineSeconds"
                       r"\): step 3 last advanced at \S+, reported by stalls-worker-0; "
                       r"action Restart", run.output)
    assert warned, run.output[-3000:]
    assert "step 6/6" in run.output, run.output[-3000:]
    assert "Succeeded: Scheduler stopped, Server stopped, Worker 1 succeeded" in run.output
    assert re.search(r"stalls: Succeeded in \S+ - MxJob stalls succeeded", run.output)


def test_a_hung_worker_fails_the_job_with_the_stall_named(run_job: Any, tmp_path: Path) -> None:
    job, marker = stalling_job(tmp_path, "Fail", always_hang=True)
    run = run_job(job, dev_venv(), timeout=120)
    assert run.returncode == 1, run.output[-3000:]
    assert marker.read_text() == "run\n"
    assert run.output.count("ProgressDeadlineExceeded: no progress for 3s") == 1, run.output
    assert re.search(r"stalls: Failed in \S+ - no progress for 3s \(progressDeadlineSeconds\): "
                     r"step 3 last advanced at", run.output), run.output[-3000:]
