"""Checkpoint, then stop, and resume (issue 38), with the real frameworks under `trainjobs
run`: an MXNet ps-lite run (examples/mxnet/train_dist.py) and a TensorFlow
ParameterServerStrategy run (examples/tensorflow/train_ps.py), each with `--checkpoint-dir`,
are interrupted by SIGINT mid-training. The checkpointing replica (MXNet worker 0, TensorFlow's
chief) saves when asked, `trainjobs run` records checkpoint.json, prints how to resume and
stops; `trainjobs run --resume` trains from the saved step + 1 to the same total as an
uninterrupted run, and no step at or before the checkpoint is trained again."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import REPO, RunResult

pytestmark = pytest.mark.e2e
STEPS, INTERRUPT_AT = 60, 8


@dataclass(frozen=True)
class Case:
    example: Path
    job: str  # metadata.name
    saver: str  # the pod asked for the checkpoint
    trainer: str  # the replica type whose args get the flags
    trainers: tuple[str, ...]  # how the trainers' step lines name them: "worker 0", "chief 0"
    saved_line: str  # the saver's log line, "{s}" and "{uri}" filled in
    edit: Callable[[dict[str, Any]], None]


def _mxnet(doc: dict[str, Any]) -> None:
    specs = doc["spec"]["replicaSpecs"]
    specs["Server"]["replicas"], specs["Worker"]["replicas"] = 1, 2  # lighter on 2 CPUs


MXNET = Case(REPO / "examples" / "mxnet" / "dist-sync.yaml", "mxnet-dist-sync",
             "mxnet-dist-sync-worker-0", "Worker", ("worker 0", "worker 1"),
             "worker 0: checkpoint at step {s}: {uri}", _mxnet)
TENSORFLOW = Case(REPO / "examples" / "tensorflow" / "ps.yaml", "tf-ps", "tf-ps-chief-0",
                  "Chief", ("chief 0",), "chief 0: checkpoint at step {s}: {uri}",
                  lambda doc: None)


def _job(case: Case, tmp_path: Path) -> Path:
    """The example with STEPS slowed-down steps, a checkpoint directory and a bound (written
    beside the example, so its relative command resolves)."""
    doc = yaml.safe_load(case.example.read_text())
    doc["spec"]["runPolicy"]["checkpointTimeoutSeconds"] = 60
    case.edit(doc)
    doc["spec"]["replicaSpecs"][case.trainer]["template"]["spec"]["containers"][0]["args"] = [
        "--steps", str(STEPS), "--step-delay", "0.1",
        "--checkpoint-dir", str(tmp_path / "ckpt")]
    out = case.example.parent / f".test-{tmp_path.name}-checkpoint.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def _steps(output: str, trainer: str) -> list[int]:
    return [int(s) for s in re.findall(rf"{trainer} step (\d+) loss", output)]


def _interrupt_and_resume(case: Case, run_job: Any, venv: Path,
                          tmp_path: Path) -> tuple[RunResult, RunResult, dict[str, Any]]:
    interrupted: list[int] = []

    def interrupt(line: str, proc: subprocess.Popen[str]) -> None:
        match = re.search(rf"{case.trainers[0]} step (\d+) loss", line)
        if not interrupted and match and int(match.group(1)) >= INTERRUPT_AT:
            interrupted.append(int(match.group(1)))
            proc.send_signal(signal.SIGINT)  # as Ctrl-C would

    job = _job(case, tmp_path)
    try:
        first = run_job(job, venv, timeout=300, on_line=interrupt)
        assert interrupted, first.output[-3000:]
        assert first.returncode == 130, first.output[-3000:]
        assert f"SIGINT: asking {case.saver} for a checkpoint" in first.output
        assert f"resume with: trainjobs run --resume {job}" in first.output, \
            first.output[-3000:]
        [record] = sorted((tmp_path / "runs").glob(f"{case.job}-*/checkpoint.json"))
        saved: dict[str, Any] = json.loads(record.read_text())
        s = saved["step"]
        assert interrupted[0] <= s < STEPS, (interrupted, saved)
        assert saved["replica"] == case.saver and saved["job"] == case.job
        assert case.saved_line.format(s=s, uri=saved["uri"]) in first.output
        assert not [r for r in first.results if "steps" in r]  # no trainer got to the end

        second = run_job(job, venv, timeout=300, flags=["--resume"])
    finally:
        job.unlink()
    assert second.returncode == 0, second.output[-4000:]
    assert f"resuming from the checkpoint at step {s}" in second.output
    for trainer in case.trainers:
        # the same total as an uninterrupted run: 1..s before the stop, s+1..STEPS after it,
        # and nothing at or before the checkpoint trained again
        assert set(range(1, s + 1)) <= set(_steps(first.output, trainer)), trainer
        assert _steps(second.output, trainer) == list(range(s + 1, STEPS + 1)), trainer
        assert f"{trainer}: resumed from step {s}" in second.output
    losses = [float(x) for x in re.findall(rf"{case.trainers[0]} step \d+ loss (\S+)",
                                           first.output)]
    for r in second.results:
        if r.get("first_step") is not None:
            assert (r["first_step"], r["steps"]) == (s + 1, STEPS), r
            assert r["final_loss"] < losses[0] / 2, r  # on from the saved state
    return first, second, saved


def test_mxnet_interrupted_saves_then_resumes_from_the_saved_step(
        run_job: Any, mxnet_venv: Path, tmp_path: Path) -> None:
    _, second, saved = _interrupt_and_resume(MXNET, run_job, mxnet_venv, tmp_path)
    assert Path(saved["uri"]).is_file()  # save_parameters' file
    workers = second.by_role("worker")
    assert sorted(w["index"] for w in workers) == [0, 1]
    assert len({w["param_checksum"] for w in workers}) == 1  # the workers agree


def test_tensorflow_ps_interrupted_saves_then_resumes_from_the_saved_step(
        run_job: Any, tensorflow_venv: Path, tmp_path: Path) -> None:
    _, second, saved = _interrupt_and_resume(TENSORFLOW, run_job, tensorflow_venv, tmp_path)
    assert Path(saved["uri"] + ".index").is_file()  # CheckpointManager's prefix
    assert saved["uri"].endswith(f"ckpt-{saved['step']}")
    assert len(second.by_role("chief")) == 1
