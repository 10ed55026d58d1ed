"""Checkpoint, then stop, and resume (issue 38), with real MXNet under `trainjobs run`: the
ps-lite example (examples/mxnet/train_dist.py --checkpoint-dir) is interrupted by SIGINT
mid-training; worker 0 saves when asked, `trainjobs run` records checkpoint.json, prints how to
resume and stops; `trainjobs run --resume` trains every worker from the saved step + 1 to the
same total as an uninterrupted run, and no step at or before the checkpoint is trained again."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import REPO

pytestmark = pytest.mark.e2e
EXAMPLE = REPO / "examples" / "mxnet" / "dist-sync.yaml"
STEPS, INTERRUPT_AT = 60, 8


def _job(tmp_path: Path) -> Path:
    """The example with 2 workers, 1 server, 60 slowed-down steps, a checkpoint directory
    and a bound (written beside the example, so its relative command resolves)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["runPolicy"]["checkpointTimeoutSeconds"] = 60
    specs = doc["spec"]["replicaSpecs"]
    specs["Server"]["replicas"], specs["Worker"]["replicas"] = 1, 2
    specs["Worker"]["template"]["spec"]["containers"][0]["args"] = [
        "--steps", str(STEPS), "--step-delay", "0.1",
        "--checkpoint-dir", str(tmp_path / "ckpt")]
    out = EXAMPLE.parent / f".test-{tmp_path.name}-checkpoint.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def _steps(output: str, worker: int) -> list[int]:
    return [int(s) for s in re.findall(rf"worker {worker} step (\d+) loss", output)]


def test_mxnet_interrupted_saves_then_resumes_from_the_saved_step(
        run_job: Any, mxnet_venv: Path, tmp_path: Path) -> None:
    interrupted: list[int] = []

    def interrupt(line: str, proc: subprocess.Popen[str]) -> None:
        match = re.search(r"worker 0 step (\d+) loss", line)
        if not interrupted and match and int(match.group(1)) >= INTERRUPT_AT:
            interrupted.append(int(match.group(1)))
            proc.send_signal(signal.SIGINT)  # as Ctrl-C would

    job = _job(tmp_path)
    try:
        first = run_job(job, mxnet_venv, timeout=300, on_line=interrupt)
        assert interrupted, first.output[-3000:]
        assert first.returncode == 130, first.output[-3000:]
        assert "SIGINT: asking mxnet-dist-sync-worker-0 for a checkpoint" in first.output
        assert f"resume with: trainjobs run --resume {job}" in first.output, \
            first.output[-3000:]
        [record] = sorted((tmp_path / "runs").glob("mxnet-dist-sync-*/checkpoint.json"))
        saved = json.loads(record.read_text())
        s = saved["step"]
        assert interrupted[0] <= s < STEPS, (interrupted, saved)
        assert Path(saved["uri"]).is_file() and saved["replica"] == "mxnet-dist-sync-worker-0"
        assert f"worker 0: checkpoint at step {s}: {saved['uri']}" in first.output
        assert not first.results  # stopped before any worker finished

        second = run_job(job, mxnet_venv, timeout=300, flags=["--resume"])
    finally:
        job.unlink()
    assert second.returncode == 0, second.output[-4000:]
    assert f"resuming from the checkpoint at step {s}" in second.output
    workers = second.by_role("worker")
    assert sorted(w["index"] for w in workers) == [0, 1]
    for w in workers:
        assert (w["first_step"], w["steps"]) == (s + 1, STEPS), w
        trained = _steps(second.output, w["index"])
        # every step after the checkpoint, once; none at or before it trained again
        assert trained == list(range(s + 1, STEPS + 1)), (w["index"], trained[:5])
        assert f"worker {w['index']}: resumed from step {s}" in second.output
        # the same total as an uninterrupted run: steps 1..s before, s+1..STEPS after
        assert sorted(set(_steps(first.output, w["index"])) & set(range(1, s + 1))) == \
            list(range(1, s + 1))
    assert len({w["param_checksum"] for w in workers}) == 1  # the workers agree
    losses = [float(x) for x in re.findall(r"worker 0 step \d+ loss (\S+)", first.output)]
    assert workers[0]["final_loss"] < losses[0] / 2  # training went on from the saved state
