"""`trainjobs run` semantics with real processes: restart policies when a worker is killed,
in-place restarts, and Ctrl-C/SIGTERM leaving no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import REPO, TRAINJOBS, env_with

pytestmark = pytest.mark.e2e


# Every marker carries this run's token: other test runs on the same machine (several people
# run these tests at once) tag their replicas the same way, and a scan of /proc must never
# find, count or kill theirs.
TOKEN = uuid.uuid4().hex[:12]
MARKER = f"TRAINJOBS_TEST_REPLICA={TOKEN}-"


def _pids_with(marker: str) -> list[int]:
    """Processes whose environment carries `marker` (every replica of one run inherits it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry.name))
    return found


def _variant(tmp_path: Path, example: Path, edit: Any) -> Path:
    """A copy of an example (in the example's directory, so relative commands resolve)."""
    doc = yaml.safe_load(example.read_text())
    edit(doc)
    out = example.parent / f".test-{tmp_path.name}-{example.name}"
    out.write_text(yaml.safe_dump(doc))
    return out


def _kill_when(pattern: str, replica: str, sig: int = signal.SIGKILL) -> Any:
    """An on_line callback that kills `replica`'s process group once `pattern` is printed."""
    killed: list[int] = []

    def on_line(line: str, _proc: subprocess.Popen[str]) -> None:
        if killed or not re.search(pattern, line):
            return
        for pid in _pids_with(f"{MARKER}{replica}\0"):
            try:
                os.killpg(os.getpgid(pid), sig)
                killed.append(pid)
            except ProcessLookupError:
                pass

    on_line.killed = killed  # type: ignore[attr-defined]
    return on_line


def _tag_replicas(doc: dict[str, Any]) -> None:
    """Give each replica a findable variable: TRAINJOBS_TEST_REPLICA=<token>-<type>-$(index)."""
    for rtype, rspec in doc["spec"]["replicaSpecs"].items():
        for container in rspec["template"]["spec"]["containers"]:
            container.setdefault("env", []).append(
                {"name": "TRAINJOBS_TEST_REPLICA",
                 "value": f"{TOKEN}-{rtype}-$(TRAINJOBS_TEST_INDEX)"})
            container["env"].insert(0, {"name": "TRAINJOBS_TEST_INDEX", "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.labels['trainjobs.io/replica-index']"}}})


def test_killed_worker_fails_job_under_never(run_job: Any, mxnet_venv: Path,
                                             tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["spec"]["replicaSpecs"]["Worker"]["restartPolicy"] = "Never"
        doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = [
            "--steps", "400"]
        _tag_replicas(doc)

    job = _variant(tmp_path, REPO / "examples" / "mxnet" / "dist-sync.yaml", edit)
    try:
        killer = _kill_when(r"worker 1 step 5 ", "Worker-1")
        run = run_job(job, mxnet_venv, on_line=killer)
    finally:
        job.unlink()
    assert killer.killed, "worker 1 was never seen training"
    assert run.returncode == 1, run.output[-3000:]
    assert re.search(r"Failed in .* replica Worker 1 \(pod mxnet-dist-sync-worker-1\) failed "
                     r"with exit code 137", run.output), run.output[-3000:]
    assert "restartPolicy Never" in run.output
    assert _pids_with(MARKER) == []


def _synthetic_job(tmp_path: Path, policy: str, program: str, backoff: int = 3) -> Path:
    """Two MXNet workers running `program` (every worker must succeed for the job to; the
    scheduler and server run `sleep`). MXNet's replicas restart alone, in place or not."""
    def rspec(replicas: int, command: list[str], restart: str) -> dict[str, Any]:
        return {"replicas": replicas, "restartPolicy": restart,
                "template": {"spec": {"containers": [{
                    "name": "mxnet", "image": "unused", "command": command,
                    "env": [{"name": "TRAINJOBS_TEST_REPLICA",
                             "value": f"{TOKEN}-synthetic-$(DMLC_WORKER_ID)"}]}]}}}

    job = {
        "apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob",
        "metadata": {"name": "synthetic"},
        "spec": {"runPolicy": {"backoffLimit": backoff}, "replicaSpecs": {
            "Scheduler": rspec(1, ["sleep", "300"], "Never"),
            "Server": rspec(1, ["sleep", "300"], "Never"),
            "Worker": rspec(2, ["python3", "-c", program], policy)}},
    }
    path = tmp_path / "synthetic.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


# Shard 1 waits for a marker file; the test SIGKILLs it the first time, the recreated process
# finds the marker (written before the kill) and exits 0.
PROGRAM = """
import os, pathlib, time
shard = int(os.environ["DMLC_WORKER_ID"])
marker = pathlib.Path(os.environ["MARKER"])
if shard == 1 and not marker.exists():
    marker.write_text("started once")
    print("shard 1 waiting to be killed", flush=True)
    time.sleep(120)
print(f"shard {shard} done", flush=True)
"""


def test_killed_worker_is_recreated_under_exit_code(run_job: Any, mxnet_venv: Path,
                                                    tmp_path: Path) -> None:
    os.environ["MARKER"] = str(tmp_path / "marker")
    try:
        job = _synthetic_job(tmp_path, "ExitCode", PROGRAM)
        killer = _kill_when("shard 1 waiting to be killed", "synthetic-1", signal.SIGKILL)
        run = run_job(job, mxnet_venv, timeout=120, on_line=killer)
    finally:
        del os.environ["MARKER"]
    assert killer.killed
    assert run.returncode == 0, run.output[-3000:]
    assert "exit code 137" in run.output and "restarting it" in run.output
    assert re.search(r"synthetic-worker-1\s+Succeeded\s+0\s+1", run.output), run.output[-1500:]


def test_exit_code_1_is_permanent_and_on_failure_restarts_in_place(
        run_job: Any, mxnet_venv: Path, tmp_path: Path) -> None:
    failing = "import sys; print('failing', flush=True); sys.exit(3)"
    run = run_job(_synthetic_job(tmp_path, "ExitCode", failing), mxnet_venv, timeout=60)
    assert run.returncode == 1
    assert "failed with exit code 3" in run.output and "permanent" in run.output

    run = run_job(_synthetic_job(tmp_path, "OnFailure", failing, backoff=2), mxnet_venv,
                  timeout=60)
    assert run.returncode == 1
    assert "restarting in place" in run.output
    assert "BackoffLimitExceeded" in run.output and "exceed backoffLimit 2" in run.output


def test_sigterm_stops_every_replica(mxnet_venv: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = [
            "--steps", "100000"]
        _tag_replicas(doc)

    job = _variant(tmp_path, REPO / "examples" / "mxnet" / "dist-sync.yaml", edit)
    try:
        proc = subprocess.Popen([str(TRAINJOBS), "run", "--no-color", "--run-dir",
                                 str(tmp_path), str(job)], env=env_with(mxnet_venv),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if "worker 2 step 3 " in line or time.monotonic() > deadline:
                break
        assert len(_pids_with(MARKER)) >= 6
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=60)[0]
        proc.stdout.close()
    finally:
        job.unlink()
    assert proc.returncode == 130, rest[-2000:]
    assert "Interrupted" in rest
    assert _pids_with(MARKER) == [], "replica processes outlived the runner"


@pytest.mark.parametrize(("example", "policy"), [("redis.yaml", "ExitCode"),
                                                 ("nfs.yaml", "OnFailure")])
def test_killed_gloo_shard_restarts_every_shard_into_a_fresh_rendezvous(
        run_job: Any, gloo_venv: Path, tmp_path: Path, example: str, policy: str) -> None:
    """The issue's reproduction, with the real Gloo: shard 1 SIGKILLed mid-training (exit
    137). Every shard restarts as attempt 1 under a new RUN_ID (a shard restarted alone used
    to rendezvous through the old attempt's store "in 0.0s" and abort: "Received data size
    doesn't match expected size"); the job Succeeds within backoffLimit 1."""
    def edit(doc: dict[str, Any]) -> None:
        doc["metadata"]["name"] = f"gloo-kill-{example.removesuffix('.yaml')}"
        doc["spec"]["runPolicy"]["backoffLimit"] = 1
        if doc["spec"]["backend"]["type"] == "nfs":
            doc["spec"]["backend"]["nfsPath"] = str(tmp_path / "nfs")
        worker = doc["spec"]["replicaSpecs"]["Worker"]
        worker["restartPolicy"] = policy
        worker["template"]["spec"]["containers"][0]["args"] = ["--steps", "300"]
        _tag_replicas(doc)

    job = _variant(tmp_path, REPO / "examples" / "caffe2" / example, edit)
    try:
        killer = _kill_when(r"shard 1 step 5 ", "Worker-1")
        run = run_job(job, gloo_venv, timeout=300, on_line=killer)
    finally:
        job.unlink()
    assert killer.killed, f"shard 1 was never seen training:\n{run.output[-3000:]}"
    assert run.returncode == 0, run.output[-4000:]
    assert ": Succeeded in" in run.output
    run_ids = re.findall(r"gloo process group up via \w+ rendezvous \(RUN_ID=(\S+)\)",
                         run.output)
    attempts = sorted({r.rsplit("-", 1)[1] for r in run_ids})
    assert attempts == ["0", "1"], run_ids
    assert "RestartingTogether: replicas of Caffe2Job restart together: starting attempt 1" \
        in run.output
    assert "doesn't match expected size" not in run.output
    shards = run.by_role("worker")
    assert sorted(s["index"] for s in shards) == list(range(shards[0]["num_shards"]))
    assert len({s["param_checksum"] for s in shards}) == 1
    assert _pids_with(MARKER) == []
