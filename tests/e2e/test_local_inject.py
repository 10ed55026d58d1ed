"""`trainjobs run --inject` on the real frameworks: the failures a user rehearses before the
cluster, judged by the job's failure rules (runPolicy.failurePolicy) or, without one, by
today's rules (restartPolicy, backoffLimit, restart-together, the stall rule), exactly as a
real failure would be.

- MXNet: a worker killed at start-up is recreated (ExitCode) and the job Succeeds. A worker
  killed mid-run cannot simply be recreated (ps-lite does not take a new worker into a running
  kvstore: training would stall), so the job's rule restarts every replica (RestartJob) and
  the job Succeeds.
- Caffe2/Gloo: a shard killed on attempt 0 and again on attempt 1: the first failure is
  ignored by its rule (a new attempt, not counted), the second escalates to the next rule
  (RestartJob, counted); every shard restarts under a new RUN_ID each time, and the job
  Succeeds on attempt 2.
- TensorFlow: the PS killed once the chief has reported step 3 fails the job by its rule,
  the message naming the replica and the rule.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO
from tests.e2e.test_local_runtime import MARKER, _pids_with, _tag_replicas, _variant

pytestmark = pytest.mark.e2e


def _mxnet(tmp_path: Path, **run_policy: Any) -> Path:
    def edit(doc: dict[str, Any]) -> None:
        doc["metadata"]["name"] = "mx-inject"
        doc["spec"]["runPolicy"].update(progressDeadlineSeconds=15,
                                        progressDeadlineAction="Fail", **run_policy)
        doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = [
            "--steps", "60", "--step-delay", "0.1"]
        _tag_replicas(doc)

    return _variant(tmp_path, REPO / "examples" / "mxnet" / "dist-sync.yaml", edit)


def test_mxnet_worker_killed_at_start_up_is_recreated_and_the_job_succeeds(
        run_job: Any, mxnet_venv: Path, tmp_path: Path) -> None:
    job = _mxnet(tmp_path)
    try:
        run = run_job(job, mxnet_venv, timeout=120, flags=["--inject", "kill Worker-1 after=0s"])
    finally:
        job.unlink()
    assert run.returncode == 0, run.output[-3000:]
    assert "inject (kill Worker-1 after=0s): SIGKILL to mx-inject-worker-1 after" in run.output
    assert "replica Worker 1 (pod mx-inject-worker-1) failed with exit code 137 (Error); " \
           "restarting it" in run.output
    assert re.search(r"mx-inject-worker-1\s+Succeeded\s+0\s+1\n", run.output), run.output[-1500:]
    assert sorted(r["index"] for r in run.by_role("worker")) == [0, 1, 2]
    assert _pids_with(MARKER) == []


def test_mxnet_worker_killed_mid_run_is_recovered_by_its_rule(
        run_job: Any, mxnet_venv: Path, tmp_path: Path) -> None:
    job = _mxnet(tmp_path, failurePolicy=[{
        "name": "worker-lost", "action": "RestartJob", "budget": {"count": 1},
        "match": {"replicaTypes": ["Worker"], "exitCodes": {"values": [137]}}}])
    try:
        run = run_job(job, mxnet_venv, timeout=150,
                      flags=["--inject", "kill Worker-1 at-step=5"])
    finally:
        job.unlink()
    assert run.returncode == 0, run.output[-3000:]
    assert re.search(r"inject \(kill Worker-1 at-step=5\): SIGKILL to mx-inject-worker-1 at "
                     r"step \d+, attempt 0, restarts 0 \(1 of 1\)", run.output), run.output
    assert "Worker pod mx-inject-worker-1 failed with exit code 137 (Error): rule " \
           "worker-lost: RestartJob (0 left)" in run.output, run.output[-3000:]
    assert re.search(r"mx-inject: Succeeded in", run.output), run.output[-3000:]
    # Every replica ran again: the scheduler and the server too, each worker to the end.
    assert sorted(r["index"] for r in run.by_role("worker")) == [0, 1, 2]
    assert _pids_with(MARKER) == []


def test_gloo_shard_killed_on_two_attempts_restarts_every_shard_twice(
        run_job: Any, gloo_venv: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["metadata"]["name"] = "gloo-inject"
        doc["spec"]["backend"]["nfsPath"] = str(tmp_path / "nfs")
        doc["spec"]["runPolicy"]["backoffLimit"] = 2
        doc["spec"]["runPolicy"]["failurePolicy"] = [
            {"name": "retry", "match": {"exitCodes": {"values": [137]}}, "action": "Ignore",
             "budget": {"count": 1}, "whenSpent": "restart"},
            {"name": "restart", "match": {"reasons": ["Stalled"]}, "action": "RestartJob",
             "budget": {"count": 1}}]
        worker = doc["spec"]["replicaSpecs"]["Worker"]
        worker["restartPolicy"] = "ExitCode"
        worker["template"]["spec"]["containers"][0]["args"] = ["--steps", "200"]
        _tag_replicas(doc)

    job = _variant(tmp_path, REPO / "examples" / "caffe2" / "nfs.yaml", edit)
    try:
        run = run_job(job, gloo_venv, timeout=180,
                      flags=["--inject", "kill Worker-1 at-step=5 times=2"])
    finally:
        job.unlink()
    assert run.returncode == 0, run.output[-4000:]
    fired = re.findall(r"inject \(kill Worker-1 at-step=5 times=2\): SIGKILL to "
                       r"gloo-inject-worker-1 at step \d+, attempt (\d), restarts (\d) "
                       r"\((\d) of 2\)", run.output)
    assert fired == [("0", "0", "1"), ("1", "1", "2")], run.output[-4000:]
    for attempt in (1, 2):
        assert f"RestartingTogether: replicas of Caffe2Job restart together: starting " \
               f"attempt {attempt} with every replica" in run.output
    assert "Worker pod gloo-inject-worker-1 failed with exit code 137 (Error): rule retry: " \
           "Ignore (0 left)" in run.output, run.output[-4000:]
    assert "Worker pod gloo-inject-worker-1 failed with exit code 137 (Error): rule retry's " \
           "budget is spent; rule restart: RestartJob (0 left)" in run.output
    run_ids = re.findall(r"gloo process group up via nfs rendezvous \(RUN_ID=(\S+)\)",
                         run.output)
    assert sorted({r.rsplit("-", 1)[1] for r in run_ids}) == ["0", "1", "2"], run_ids
    assert re.search(r"gloo-inject: Succeeded in", run.output)
    assert re.search(r"gloo-inject-worker-1\s+Succeeded\s+0\s+2\n", run.output), \
        run.output[-1500:]  # (the processes' restarts, each attempt's)
    shards = run.by_role("worker")
    assert sorted(s["index"] for s in shards) == [0, 1]  # only attempt 2 trained to the end
    assert len({s["param_checksum"] for s in shards}) == 1
    assert _pids_with(MARKER) == []


def test_tensorflow_ps_killed_fails_the_job_naming_the_replica_and_its_rule(
        run_job: Any, tensorflow_venv: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["metadata"]["name"] = "tf-inject"
        chief = doc["spec"]["replicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
        chief["args"] = ["--steps", "40", "--step-delay", "0.2"]
        ps = doc["spec"]["replicaSpecs"].pop("PS")  # no template: the default gRPC server
        doc["spec"].setdefault("runPolicy", {})["failurePolicy"] = [{
            "name": "ps-lost", "action": "FailJob",
            "match": {"replicaTypes": ["PS"], "exitCodes": {"values": [137]}}}]
        _tag_replicas(doc)
        doc["spec"]["replicaSpecs"]["PS"] = ps

    job = _variant(tmp_path, REPO / "examples" / "tensorflow" / "ps.yaml", edit)
    try:
        run = run_job(job, tensorflow_venv, timeout=180,
                      flags=["--inject", "kill ps at-step=3"])
    finally:
        job.unlink()
    assert run.returncode == 1, run.output[-3000:]
    assert re.search(r"inject \(kill ps at-step=3\): SIGKILL to tf-inject-ps-0 at step \d+",
                     run.output), run.output[-3000:]
    assert "tf-inject: Failed in" in run.output
    assert re.search(r"tf-inject: Failed in \S+ - replica PS 0 \(pod tf-inject-ps-0\) failed "
                     r"with exit code 137 \(Error\); failurePolicy rule ps-lost: FailJob",
                     run.output), run.output[-3000:]
    assert re.search(r"tf-inject-ps-0\s+Failed\s+137\s+0\n", run.output)
    assert run.by_role("chief") == []  # the chief did not finish training
    assert _pids_with(MARKER) == []
