"""`trainjobs run --inject` through the real runner, receiver and progress library, with
small Python programs as the workers of an MxJob (its scheduler and server run `sleep`):
the exit code a wrapped replica exits with is the one the planner judges (a leftover child
holding its output goes too), a wrapper that is never told passes its program's code
through, a hang is caught by the stall rule and resumed by the stop, kills with `times=2`
restart a replica in place twice, and a bad `--inject` is one line and exit 2 with nothing
started."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helpers import container, mxjob, replica, template
from trainjobs.cli import EXIT_INVALID, main

# Reports a step every DELAY seconds up to STEPS, then exits 0; with CHILD it first starts a
# `sleep` that inherits its output (as a framework's helper process would).
PROGRAM = """
import subprocess, time
import trainjobs_progress as progress
if CHILD:
    subprocess.Popen(["sleep", "300"])
for step in range(1, STEPS + 1):
    progress.report(step, total=STEPS)
    print("step", step, flush=True)
    time.sleep(DELAY)
progress.flush()
print("done", flush=True)
"""


def _job(tmp_path: Path, policy: str = "Never", steps: int = 30, delay: float = 0.1,
         child: bool = False, workers: int = 2, **run_policy: Any) -> Path:
    program = tmp_path / "train.py"
    program.write_text(f"STEPS = {steps}\nDELAY = {delay}\nCHILD = {child}\n" + PROGRAM)
    doc = mxjob("mx", worker=workers)
    sleep = template(container("mxnet", command=["sleep", "300"]))
    specs = doc["spec"]["replicaSpecs"]
    specs["Scheduler"], specs["Server"] = replica(1, sleep), replica(1, sleep)
    specs["Worker"] = replica(workers, template(container(
        "mxnet", command=[sys.executable, str(program)])), restartPolicy=policy)
    doc["spec"]["runPolicy"] = {"backoffLimit": 3, **run_policy}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(tmp_path: Path, job: Path, *injections: str) -> int:
    flags = [f for text in injections for f in ("--inject", text)]
    return main(["run", "--no-color", "--run-dir", str(tmp_path / "runs"), *flags, str(job)])


def test_exit_code_is_the_one_the_replica_really_exits_with(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(tmp_path, _job(tmp_path, "ExitCode", steps=200, child=True),
                "exit=3 Worker-1 at-step=3")
    out = capsys.readouterr().out
    assert code == 1, out[-3000:]
    assert "will inject: exit=3 Worker-1 at-step=3 (on mx-worker-1)" in out
    assert re.search(r"inject \(exit=3 Worker-1 at-step=3\): mx-worker-1 told to exit with "
                     r"code 3 at step \d+, attempt 0, restarts 0 \(1 of 1\)", out), out
    # ExitCode: 1-127 is permanent; the planner judged the code the process exited with
    assert re.search(r"mx: Failed in \S+ - replica Worker 1 \(pod mx-worker-1\) failed with "
                     r"exit code 3", out), out[-3000:]
    assert re.search(r"mx-worker-1\s+Failed\s+3\s+0", out), out[-1500:]
    assert "step 200" not in out  # it did not train to the end


def test_a_wrapper_never_told_passes_its_programs_exit_through(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(tmp_path, _job(tmp_path, steps=3, delay=0.05), "exit=7 Worker-0 at-step=900")
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert re.search(r"mx-worker-0\s+Succeeded\s+0\s+0", out), out[-1500:]
    assert "inject (exit=7 Worker-0 at-step=900): never fired: its conditions did not come " \
           "true on a running mx-worker-0 before the run ended" in out


def test_a_hung_worker_is_caught_by_the_stall_rule_and_finishes_when_recreated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, steps=20, delay=0.1, workers=1, progressDeadlineSeconds=2,
               progressDeadlineAction="Restart")
    code = _run(tmp_path, job, "hang worker-0 at-step=3")
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert re.search(r"inject \(hang worker-0 at-step=3\): SIGSTOP to mx-worker-0 at step "
                     r"\d+", out), out
    assert "ProgressDeadlineExceeded: no progress for 2s" in out, out[-3000:]
    assert "step 20/20" in out
    assert re.search(r"mx-worker-0\s+Succeeded\s+0\s+1", out), out[-1500:]


def test_kill_times_2_restarts_a_replica_in_place_twice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, "OnFailure", steps=15, delay=0.1, workers=1)
    code = _run(tmp_path, job, "kill Worker-0 after=500ms times=2")
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    fired = re.findall(r"inject \(kill Worker-0 after=500ms times=2\): SIGKILL to mx-worker-0 "
                       r"after \S+, attempt 0, restarts (\d) \((\d) of 2\)", out)
    assert fired == [("0", "1"), ("1", "2")], out
    assert out.count("exited with code 137; restarting in place") == 2
    assert re.search(r"mx-worker-0\s+Succeeded\s+0\s+2", out), out[-1500:]


@pytest.mark.parametrize(("injection", "message"), [
    ("kill Worker-5 after=1s",
     "error: --inject 'kill Worker-5 after=1s': no replica 'Worker-5' in job mx (it has "
     "Scheduler, Server, Worker-0..1)"),
    ("kill Worker after=1s",
     "error: --inject 'kill Worker after=1s': Worker has 2 replicas: name one (Worker-0..1)"),
    ("kill Worker-1 after=10",
     "error: --inject 'kill Worker-1 after=10': after=10: a duration needs a unit (30s, "
     "500ms, 2m, 1m30s)"),
])
def test_a_bad_injection_is_one_line_exit_2_and_nothing_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], injection: str,
        message: str) -> None:
    code = _run(tmp_path, _job(tmp_path), "kill Scheduler after=1s", injection)
    out, err = capsys.readouterr()
    assert code == EXIT_INVALID == 2
    assert err == message + "\n"
    assert out == "" and not (tmp_path / "runs").exists()  # nothing started
