"""`trainjobs run`'s checkpoint, then stop (issue 38): checkpoint.json and how `--resume`
finds it (pure), and the whole exchange through the real runner, receiver and library with
a small Python program as the replica: the first SIGINT asks it, it saves and answers, every
process stops, the resume line is printed, and `--resume` starts the next run from the step
saved. A program that never answers is stopped when the bound passes; a job without
`checkpointTimeoutSeconds` stops at once, as before."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helpers import Doc, caffe2job, container, replica, template
from trainjobs.cli import EXIT_INVALID, main
from trainjobs.core.checkpoint import SavedCheckpoint
from trainjobs.errors import NoCheckpoint
from trainjobs.local.checkpoint import (
    CHECKPOINT_FILE,
    ResumePoint,
    find_resume,
    resume_command,
    write_checkpoint,
)

SAVED = SavedCheckpoint(2, 40, "/ckpt/40", 0, "solo-worker-0",
                        datetime(2026, 11, 28, 6, 0, tzinfo=UTC))

# The replica: reports a step every 50 ms; at step 3 it interrupts `trainjobs run` (its
# parent: here, this pytest process) as a user's Ctrl-C would; it answers a checkpoint
# request (if ANSWER) and keeps training until stopped. Resumed, it trains from the saved
# step + 1 to step 10 and exits 0.
PROGRAM = """
import os, signal, sys, time
import trainjobs_progress as progress
last = progress.last_checkpoint()
if last:
    print("resumed from", last["step"], last["uri"], flush=True)
    for step in range(last["step"] + 1, 11):
        progress.report(step, total=10)
        print("step", step, flush=True)
    sys.exit(0)
step = 0
while True:
    step += 1
    progress.report(step, total=100000)
    print("step", step, flush=True)
    if step == 3 or (AGAIN and step == 6):
        os.kill(os.getppid(), signal.SIGINT)
    if ANSWER and progress.checkpoint_requested():
        print("saving", step, flush=True)  # trainjobs stops us once it has the answer
        progress.checkpoint_saved(step, "/ckpt/%d" % step)
    time.sleep(0.05)
"""


def _job(tmp_path: Path, answer: bool, timeout: int | None, again: bool = False) -> Path:
    program = tmp_path / "train.py"
    program.write_text(f"ANSWER = {answer}\nAGAIN = {again}\n" + PROGRAM)
    doc: Doc = caffe2job("solo", workers=1)
    doc["spec"]["replicaSpecs"]["Worker"] = replica(1, template(container(
        "caffe2", command=[sys.executable, str(program)])))
    if timeout is not None:
        doc["spec"]["runPolicy"] = {"checkpointTimeoutSeconds": timeout}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(tmp_path: Path, job: Path, *flags: str) -> int:
    return main(["run", "--no-color", "--run-dir", str(tmp_path / "runs"), *flags, str(job)])


def _log(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "runs").glob("solo-*/solo-worker-0.log"))


def test_checkpoint_json_round_trip_and_the_newest_run_with_one(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for name in ("solo-20261128-050000", "solo-20261128-060000", "solo-20261128-070000",
                 "solo-big-20261128-080000"):
        (runs / name).mkdir(parents=True)
    write_checkpoint(runs / "solo-20261128-050000", SAVED, "solo", "u0")
    newest = write_checkpoint(runs / "solo-20261128-060000",
                              SavedCheckpoint(3, 41, "/ckpt/41", 1, "solo-worker-0", SAVED.at),
                              "solo", "u1")
    write_checkpoint(runs / "solo-big-20261128-080000", SAVED, "solo-big", "u2")
    doc = json.loads(newest.read_text())
    assert doc == {"job": "solo", "uid": "u1", "step": 41, "uri": "/ckpt/41",
                   "time": "2026-11-28T06:00:00Z", "attempt": 1, "replica": "solo-worker-0",
                   "id": 3}
    # the 07:00 run saved nothing; solo-big is another job
    assert find_resume(runs, "solo") == ResumePoint(41, "/ckpt/41", newest)
    assert find_resume(runs, "solo").env() == {"TRAINJOBS_CHECKPOINT_STEP": "41",
                                               "TRAINJOBS_CHECKPOINT_URI": "/ckpt/41"}


@pytest.mark.parametrize(("content", "words"), [
    ("{oops", "cannot read"),
    (json.dumps({"job": "solo", "step": -1, "uri": "/c"}), "not a checkpoint record"),
    (json.dumps({"job": "solo", "step": 1, "uri": ""}), "not a checkpoint record"),
    (json.dumps({"job": "other", "step": 1, "uri": "/c"}), "of job 'other', not 'solo'"),
])
def test_an_unusable_checkpoint_json_is_one_clear_error(tmp_path: Path, content: str,
                                                        words: str) -> None:
    run_dir = tmp_path / "solo-20261128-050000"
    run_dir.mkdir()
    (run_dir / CHECKPOINT_FILE).write_text(content)
    with pytest.raises(NoCheckpoint, match=words) as caught:
        find_resume(tmp_path, "solo")
    assert "\n" not in str(caught.value)


def test_resume_command_names_a_run_dir_other_than_the_default() -> None:
    assert resume_command("job.yaml", "runs") == "trainjobs run --resume job.yaml"
    assert resume_command("job.yaml", "/tmp/r") == \
        "trainjobs run --resume job.yaml --run-dir /tmp/r"


def test_resume_without_a_checkpoint_exits_2_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, answer=True, timeout=20)
    assert _run(tmp_path, job, "--resume") == EXIT_INVALID == 2
    _out, err = capsys.readouterr()
    assert err.startswith("error: no checkpoint of job solo to resume from") and \
        err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_sigint_asks_for_a_checkpoint_then_stops_and_resume_starts_after_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, answer=True, timeout=20)
    assert _run(tmp_path, job) == 130
    out = capsys.readouterr().out
    assert "SIGINT: asking solo-worker-0 for a checkpoint" in out
    assert f"resume with: trainjobs run --resume {job} --run-dir {tmp_path / 'runs'}" in out
    [record] = sorted((tmp_path / "runs").glob(f"solo-*/{CHECKPOINT_FILE}"))
    saved: dict[str, Any] = json.loads(record.read_text())
    assert saved["step"] >= 3 and saved["uri"] == f"/ckpt/{saved['step']}"
    assert saved["job"] == "solo" and saved["attempt"] == 0
    log = _log(tmp_path)[0].read_text()
    assert f"saving {saved['step']}" in log
    assert "stopped by SIGINT, after a checkpoint at step" in out

    assert _run(tmp_path, job, "--resume") == 0
    out = capsys.readouterr().out
    assert f"resuming from the checkpoint at step {saved['step']}" in out
    resumed = next(p for p in _log(tmp_path) if p.parent != record.parent).read_text()
    steps = [int(s) for s in re.findall(r"^step (\d+)$", resumed, re.M)]
    assert f"resumed from {saved['step']} /ckpt/{saved['step']}" in resumed
    assert steps == list(range(saved["step"] + 1, 11))  # nothing at or before the saved step


def test_a_program_that_never_answers_is_stopped_when_the_bound_passes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, answer=False, timeout=1)
    assert _run(tmp_path, job) == 130
    out = capsys.readouterr().out
    assert "asking solo-worker-0 for a checkpoint" in out
    assert "no checkpoint was saved within 1s: stopping every replica" in out
    assert "resume with" not in out
    assert not list((tmp_path / "runs").glob(f"solo-*/{CHECKPOINT_FILE}"))


def test_without_checkpoint_timeout_sigint_stops_at_once_as_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, answer=True, timeout=None)
    assert _run(tmp_path, job) == 130
    out = capsys.readouterr().out
    assert "SIGINT: stopping every replica" in out
    assert "for a checkpoint" not in out and "resume with" not in out
    assert "saving" not in _log(tmp_path)[0].read_text()


def test_a_second_sigint_stops_at_once(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, answer=False, timeout=60, again=True)
    started = time.monotonic()
    assert _run(tmp_path, job) == 130
    out = capsys.readouterr().out
    assert "asking solo-worker-0 for a checkpoint" in out
    assert "SIGINT again: stopping every replica now" in out
    assert "no checkpoint was saved" not in out and "resume with" not in out
    assert time.monotonic() - started < 30  # not the 60 s bound
