"""Every example job, trained for real with `trainjobs run`: the environment contracts work with
the real frameworks (MXNet ps-lite, TensorFlow's cluster resolver, Gloo over Redis and files).

Each test asserts that training happened (the loss fell), that replicas agree (identical
parameters, or the same allreduced value), and that the job ended Succeeded.
"""

from __future__ import annotations

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


def test_tensorflow_parameter_server(run_job: Any, tensorflow_venv: Path) -> None:
    run = run_job(EXAMPLES / "tensorflow" / "ps.yaml", tensorflow_venv)
    assert_succeeded(run)
    chief = run.by_role("chief")
    assert len(chief) == 1
    assert_trained(chief)
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
