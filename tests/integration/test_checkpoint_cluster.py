"""Checkpoint, then yield, on a real control plane with the real Kueue (issue 38.5).

A low-priority TfJob (Chief, PS, Worker) admitted through Kueue is preempted by a high one.
The test acts as the low job's chief through `trainjobs_progress`, with a token the API
server binds to the chief's pod (as test_progress_cluster does: KWOK's kubelet mounts
nothing). The operator must ask the chief before deleting anything, keep every pod until it
answers (or until checkpointTimeoutSeconds), delete the chief before the PS, record
status.lastCheckpoint, and give the re-admitted pods the checkpoint in their environment. The
operator SIGKILLed mid-wait: the next one keeps the same request and deadline, deletes nothing
early, asks at most once more, and counts nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from trainjobs_progress import Reporter, from_environment

from tests.integration.kueue_queue import tainted_queue
from tests.integration.operator_helpers import (
    Namespace,
    Operator,
    Operators,
    condition,
    env_of,
    free_port,
    job,
    replica,
    wait_for,
    watch_objects,
)
from trainjobs.testing import ControlPlane, Kueue

pytestmark = pytest.mark.integration

AUDIENCE = "trainjobs.io/progress"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass
class Preemption:
    ns: Namespace
    operators: Operators
    low: str
    high: str
    progress_args: tuple[str, ...]
    operator: Operator

    def tfjob(self, name: str, priority: str, cpu: str, timeout: int | None = None
              ) -> dict[str, Any]:
        specs = {t: replica("TfJob", resources={"requests": {"cpu": cpu}})
                 for t in ("Chief", "PS", "Worker")}
        for spec in specs.values():
            spec["template"]["spec"]["serviceAccountName"] = "default"  # a token is bound
        run_policy = {"checkpointTimeoutSeconds": timeout} if timeout else {}
        manifest = job("TfJob", name, specs, runPolicy=run_policy)
        manifest["metadata"]["labels"] = {QUEUE_LABEL: "queue", PRIORITY_LABEL: priority}
        return self.ns.create(manifest)

    def chief_reporter(self, job_name: str, tmp: Path) -> Reporter:
        """`trainjobs_progress` as the chief's process would run it: its own environment,
        its pod's token."""
        pod = self.ns.pod(f"{job_name}-chief-0")
        assert pod is not None
        token = self.ns.kubectl(
            "create", "token", "default", f"--audience={AUDIENCE}", "--bound-object-kind=Pod",
            f"--bound-object-name={pod['metadata']['name']}",
            f"--bound-object-uid={pod['metadata']['uid']}", "--duration=10m").stdout.strip()
        token_file = tmp / f"{job_name}-token"
        token_file.write_text(token)
        env = env_of(pod, "tensorflow")
        return from_environment({**env, "TRAINJOBS_PROGRESS_TOKEN_FILE": str(token_file)})

    def restart_operator(self) -> None:
        self.operator.kill()
        self.operator = self.operators.start(*self.progress_args, name="next")


@pytest.fixture
def preemption(kube_cluster: ControlPlane, kueue: Kueue, bare_ns: Namespace,
               operators: Operators) -> Iterator[Preemption]:
    """A 4-CPU queue with priorities low and high, and an operator that receives progress
    (plain HTTP on loopback) started after Kueue."""
    ns = bare_ns
    wait_for(lambda: ns.kubectl("get", "serviceaccount", "default", check=False)
             .returncode == 0, "the default ServiceAccount", timeout=30)
    with tainted_queue(kube_cluster, ns.name, "ck") as q:
        port = free_port()
        args = ("--progress-listen", f"127.0.0.1:{port}", "--progress-url",
                f"http://127.0.0.1:{port}/v1/progress", "--progress-interval", "1")
        try:
            yield Preemption(ns, operators, q.low, q.high, args, operators.start(*args))
        finally:
            ns.kubectl("delete", "tfjobs", "--all", "--wait=false", check=False)
            wait_for(lambda: not (ns.get_path(
                f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns.name}/workloads") or {}
            ).get("items"), "the test's Workloads to go with their jobs", timeout=60)


def asked(reporter: Reporter, step: int, timeout: float = 60) -> None:
    """Report (as a training loop does) until a reply asks for a checkpoint."""
    deadline = time.monotonic() + timeout
    while not reporter.checkpoint_requested:
        assert time.monotonic() < deadline, "no checkpoint was asked"
        reporter.report(step)
        reporter.flush(5.0)
        time.sleep(0.2)


def undeleted(ns: Namespace, job_name: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in ns.pods(job_name)
                  if not p["metadata"].get("deletionTimestamp"))


def deletion_marks(versions: list[dict[str, Any]]) -> dict[str, int]:
    """Each pod's first version marked for deletion (its resourceVersion)."""
    marks: dict[str, int] = {}
    for pod in versions:
        if pod["metadata"].get("deletionTimestamp"):
            name, rv = pod["metadata"]["name"], int(pod["metadata"]["resourceVersion"])
            marks[name] = min(marks.get(name, rv), rv)
    return marks


def last_versions(versions: list[dict[str, Any]]) -> dict[str, int]:
    last: dict[str, int] = {}
    for pod in versions:
        name, rv = pod["metadata"]["name"], int(pod["metadata"]["resourceVersion"])
        last[name] = max(last.get(name, rv), rv)
    return last


def test_preemption_waits_for_the_chiefs_checkpoint_and_the_next_pods_resume_from_it(
        preemption: Preemption, tmp_path: Path) -> None:
    p = preemption
    ns = p.ns
    p.tfjob("low", p.low, cpu="1", timeout=120)
    ns.wait_state("TfJob", "low", "Running", timeout=60)
    chief = p.chief_reporter("low", tmp_path)
    chief.report(10, total=100)
    assert chief.flush(10.0) and chief.sent == 1, p.operator.tail()
    pods = {"low-chief-0", "low-ps-0", "low-worker-0"}
    with watch_objects(ns, f"/api/v1/namespaces/{ns.name}/pods",
                       {"labelSelector": "trainjobs.io/job-name=low"}) as versions:
        p.tfjob("high", p.high, cpu="1.2")  # 3.6 CPU: does not fit beside the low job's 3
        asked(chief, 40)
        request = ns.status("TfJob", "low")["checkpointRequest"]
        assert (request["reason"], request["method"], request["replica"], request["outcome"]) \
            == ("Queued", "Report", "low-chief-0", "Pending"), request
        time.sleep(2)  # the operator has had its passes: it holds everything back
        assert set(undeleted(ns, "low")) == pods
        assert ns.pods("high") == []  # Kueue's quota is not released while they run
        assert chief.checkpoint_saved(50, "s3://ckpt/low/50", timeout=10.0)
        wait_for(lambda: not ns.pods("low"), "the low job's pods to go", timeout=30)
    marks, last = deletion_marks(versions), last_versions(versions)
    assert set(marks) == pods, marks
    # The chief went first; the PS and the worker were marked only after its last version.
    assert marks["low-ps-0"] > last["low-chief-0"] and marks["low-worker-0"] > \
        last["low-chief-0"], (marks, last)
    status = ns.status("TfJob", "low")
    saved = status["lastCheckpoint"]
    assert (saved["step"], saved["uri"], saved["replica"], saved["attempt"], saved["id"]) == \
        (50, "s3://ckpt/low/50", "low-chief-0", 0, request["id"]), saved
    assert status["checkpointRequest"]["outcome"] == "Saved"
    queued = condition(status, "Queued")
    assert status["state"] == "Queued" and queued is not None and queued["reason"] == "Evicted"
    assert "CheckpointSaved" in ns.wait_event("low", "CheckpointSaved")
    # An answer from the old pods' process now is refused: the request is over.
    assert not chief.checkpoint_saved(51, "s3://ckpt/low/51", timeout=5.0)
    ns.wait_state("TfJob", "high", "Running", timeout=60)
    ns.end_pod("high-chief-0")  # the chief's success is the TfJob's
    ns.wait_finished("TfJob", "high", timeout=60)
    # Admitted again: every new pod starts from the checkpoint.
    ns.wait_state("TfJob", "low", "Running", timeout=60)
    for pod in ns.pods("low"):
        env = env_of(pod, "tensorflow")
        assert (env.get("TRAINJOBS_CHECKPOINT_STEP"), env.get("TRAINJOBS_CHECKPOINT_URI")) \
            == ("50", "s3://ckpt/low/50"), pod["metadata"]["name"]
    restarts = {k: v.get("restarts", 0) for k, v in
                ns.status("TfJob", "low")["replicaStatuses"].items()}
    assert set(restarts.values()) == {0}, restarts
    assert not p.operator.problems()


def test_a_silent_chief_is_waited_for_across_an_operator_kill_then_stopped_at_the_bound(
        preemption: Preemption, tmp_path: Path) -> None:
    p = preemption
    ns = p.ns
    p.tfjob("low", p.low, cpu="1", timeout=25)
    ns.wait_state("TfJob", "low", "Running", timeout=60)
    chief = p.chief_reporter("low", tmp_path)
    chief.report(10, total=100)
    assert chief.flush(10.0) and chief.sent == 1, p.operator.tail()
    p.tfjob("high", p.high, cpu="1.2")
    asked(chief, 20)  # and never answered
    request = ns.status("TfJob", "low")["checkpointRequest"]
    assert request["outcome"] == "Pending"
    deadline = datetime.fromisoformat(request["deadline"].replace("Z", "+00:00"))
    p.restart_operator()  # SIGKILL mid-wait; the next one reads the request from the status
    # It hands the same request out again (the library ignores it: not saved twice).
    chief2 = p.chief_reporter("low", tmp_path)  # (a fresh process would ask again too)
    asked(chief2, 21)
    assert ns.status("TfJob", "low")["checkpointRequest"] == request  # same id and deadline
    left = (deadline - datetime.now(deadline.tzinfo)).total_seconds()
    assert left > 2, f"the test was too slow to see the wait ({left:.1f}s left)"
    time.sleep(max(left - 2, 0))
    assert len(undeleted(ns, "low")) == 3  # nothing deleted before the deadline
    wait_for(lambda: not ns.pods("low"), "the low job's pods to go at the deadline",
             timeout=30)
    status = ns.status("TfJob", "low")
    assert status["checkpointRequest"]["id"] == request["id"]
    assert status["checkpointRequest"]["outcome"] == "TimedOut"
    assert "lastCheckpoint" not in status or status["lastCheckpoint"] is None
    ns.wait_event("low", "CheckpointTimedOut")
    requested = [e for e in ns.events("low") if e.get("reason") == "CheckpointRequested"]
    assert sum(e.get("count", 1) for e in requested) == 1, requested  # asked once, not twice
    ns.wait_state("TfJob", "high", "Running", timeout=60)
    restarts = {k: v.get("restarts", 0) for k, v in status["replicaStatuses"].items()}
    assert set(restarts.values()) == {0}, restarts
    assert not p.operator.problems()
