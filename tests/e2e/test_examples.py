"""Every example job, trained for real with `trainjobs run`: the environment contracts work with
the real frameworks (MXNet ps-lite, TensorFlow's cluster resolver, Gloo over Redis and files).

Each test asserts that training happened (the loss fell), that replicas agree (identical
parameters, or the same allreduced value), that the job ended Succeeded, and that the
programs' progress reports (trainjobs_progress) reached `trainjobs run`: its progress lines
and its summary show the last step and the last loss.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO, RunResult

pytestmark = pytest.mark.e2e
EXAMPLES = REPO / "examples"


def assert_succeeded(run: RunResult) -> None:
    assert run.returncode == 0, run.output[-4000:]
    assert ": Succeeded in" in run.output, run.output[-2000:]


def assert_trained(results: list[dict[str, Any]]) -> None:
    assert results, "no TRAINJOBS_RESULT line from any trainer"
    for r in results:
        assert r["final_loss"] < r["first_loss"] / 2, r


def assert_progress(run: RunResult, steps: int, reporter: str,
                    final_losses: list[float]) -> None:
    """The reports arrived: a progress line and the summary show the last step of `steps`
    from a replica whose name contains `reporter`, and the last loss one of them reported."""
    lines = re.findall(r"\[trainjobs\] progress: step (\d+)/(\d+).*?loss=(\S+) \[from (\S+)\]",
                       run.output)
    assert lines, f"no progress line:\n{run.output[-3000:]}"
    assert (lines[-1][0], lines[-1][1]) == (str(steps), str(steps)), lines
    summary = re.search(rf"  progress: step {steps}/{steps}, (?:epoch \d+, )?(\d+) reports, "
                        rf"last from (\S+)\n  last metrics: loss=(\S+)\n", run.output)
    assert summary, run.output[-2000:]
    assert reporter in summary.group(2) and int(summary.group(1)) >= 1
    assert any(abs(float(summary.group(3)) - f) <= 1e-3 * max(abs(f), 1e-9) for f in
               final_losses), (summary.group(3), final_losses)


def assert_identical_parameters(results: list[dict[str, Any]]) -> None:
    checksums = {r["param_checksum"] for r in results}
    assert len(checksums) == 1, f"replicas disagree: {checksums}"


def test_mxnet_dist_sync(run_job: Any, mxnet_venv: Path) -> None:
    run = run_job(EXAMPLES / "mxnet" / "dist-sync.yaml", mxnet_venv)
    assert_succeeded(run)
    workers = run.by_role("worker")
    assert sorted(w["index"] for w in workers) == [0, 1, 2]
    assert {w["num_workers"] for w in workers} == {3}
    assert_trained(workers)
    assert_identical_parameters(workers)
    assert {r["role"] for r in run.results} >= {"scheduler", "server"}
    assert_progress(run, workers[0]["steps"], "-worker-", [w["final_loss"] for w in workers])


def test_tensorflow_multi_worker_mirrored(run_job: Any, tensorflow_venv: Path) -> None:
    run = run_job(EXAMPLES / "tensorflow" / "mwms.yaml", tensorflow_venv)
    assert_succeeded(run)
    chief = run.by_role("chief")
    assert len(chief) == 1 and chief[0]["num_workers"] == 3
    trainers = chief + run.by_role("worker")
    assert_trained(trainers)
    # Workers still running when the chief (whose exit decides) finishes are stopped; every
    # one that reported holds the chief's parameters.
    assert_identical_parameters(trainers)
    assert_progress(run, chief[0]["steps"], "tf-mwms-", [t["final_loss"] for t in trainers])


def test_tensorflow_parameter_server(run_job: Any, tensorflow_venv: Path) -> None:
    run = run_job(EXAMPLES / "tensorflow" / "ps.yaml", tensorflow_venv)
    assert_succeeded(run)
    chief = run.by_role("chief")
    assert len(chief) == 1
    assert_trained(chief)
    assert_progress(run, chief[0]["steps"], "-chief-0", [chief[0]["final_loss"]])
    # The PS template has no `tensorflow` container: the default gRPC server ran as ps 0.
    assert "trainjobs: TensorFlow gRPC server ps:0" in run.output


@pytest.mark.parametrize("example, backend", [("redis.yaml", "redis"), ("nfs.yaml", "nfs")])
def test_caffe2_gloo(run_job: Any, gloo_venv: Path, example: str, backend: str) -> None:
    run = run_job(EXAMPLES / "caffe2" / example, gloo_venv)
    assert_succeeded(run)
    shards = run.by_role("worker")
    assert shards and {s["backend"] for s in shards} == {backend}
    assert sorted(s["index"] for s in shards) == list(range(shards[0]["num_shards"]))
    assert_trained(shards)
    assert_identical_parameters(shards)
    assert_progress(run, shards[0]["steps"], "-worker-", [s["final_loss"] for s in shards])
