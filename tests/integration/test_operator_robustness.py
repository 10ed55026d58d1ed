"""Robustness on the real control plane: jobs the API server accepts but that cannot run end
Failed with a reason and never stall other jobs; an operator SIGKILLed while it creates a
50-replica job is restarted and converges to exactly the desired pods, each created once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.fault_proxy import FaultProxy
from tests.integration.operator_helpers import (
    Namespace,
    Operators,
    condition,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import ControlPlane

pytestmark = pytest.mark.integration


def test_jobs_that_cannot_run_fail_with_a_reason_and_never_stall_others(ns: Namespace) -> None:
    bad_env = job("MxJob", "bad-env", {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        # Collides with the variable trainjobs injects: refused, never silently overwritten.
        "Worker": replica("MxJob", exit_code=0, env=[{"name": "DMLC_ROLE", "value": "server"}]),
    })
    bad_pod = job("TfJob", "bad-pod", {
        "Chief": replica("TfJob", exit_code=0),
        # Valid for the CRD schema, refused by pod validation (a volume name is a DNS label).
        "Worker": replica("TfJob", 2, volumeMounts=[{"name": "Bad_Volume", "mountPath": "/d"}]),
    })
    bad_pod["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [
        {"name": "Bad_Volume", "emptyDir": {}}]
    # The same contract for the other kinds: a variable a framework plugin injects is refused
    # by the operator (the schema cannot know it; plugin rules it can express are CEL rules
    # and the API server refuses those, see test_crds.py).
    tf_config = job("TfJob", "tf-config", {
        "Chief": replica("TfJob", exit_code=0, env=[{"name": "TF_CONFIG", "value": "{}"}]),
        "Worker": replica("TfJob", 2),
    })
    shard_id = job("Caffe2Job", "shard-id", {
        "Worker": replica("Caffe2Job", 2, env=[{"name": "SHARD_ID", "value": "0"}]),
    }, backend={"type": "redis", "redisHost": "redis.example.invalid", "redisPort": 6379})
    for manifest in (bad_env, bad_pod, tf_config, shard_id):
        ns.apply(manifest)  # the API server accepts them all
    good = job("MxJob", "good", {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2, exit_code=0),
    })
    started = time.monotonic()
    ns.apply(good)
    ns.wait_condition("MxJob", "good", "Succeeded", timeout=30)
    assert time.monotonic() - started < 20

    expected = {
        ("MxJob", "bad-env"): ("InvalidSpec", ["DMLC_ROLE", "spec.replicaSpecs.Worker"]),
        ("TfJob", "bad-pod"): ("CreateFailed", ["bad-pod-worker-", "spec.volumes[0].name",
                                                "Bad_Volume"]),
        ("TfJob", "tf-config"): ("InvalidSpec", ["TF_CONFIG", "spec.replicaSpecs.Chief"]),
        ("Caffe2Job", "shard-id"): ("InvalidSpec", ["SHARD_ID", "spec.replicaSpecs.Worker"]),
    }
    for (kind, name), (reason, words) in expected.items():
        ns.wait_condition(kind, name, "Failed", timeout=20)
        status = ns.status(kind, name)
        failed = condition(status, "Failed")
        assert failed is not None and failed["reason"] == reason, status
        for word in words:
            assert word in failed["message"], (word, failed["message"])
        assert status["state"] == "Failed" and status.get("completionTime"), status
        assert status["observedGeneration"] == 1, status
        ns.wait_event(name, reason)
    # The pods were being created: the job had its Created condition, and keeps it.
    created = condition(ns.status("TfJob", "bad-pod"), "Created")
    assert created is not None and created["status"] == "True"
    # A refused spec creates nothing; a refused pod leaves no running pods behind.
    for name in ("bad-env", "tf-config", "shard-id"):
        assert ns.pods(name) == [] and ns.services(name) == []
    wait_for(lambda: all(p["status"].get("phase") != "Running" or
                         p["metadata"].get("deletionTimestamp") for p in ns.pods("bad-pod")),
             lambda: f"bad-pod's running pods to be cleaned: {ns.pod_summary('bad-pod')}")
    # Still Failed a moment later: nothing retries a job that cannot run.
    time.sleep(1)
    assert ns.status("TfJob", "bad-pod")["state"] == "Failed"


def test_sigkill_while_creating_50_replicas_then_restart_creates_each_pod_once(
    bare_ns: Namespace, operators: Operators, kube_cluster: ControlPlane, tmp_path: Path
) -> None:
    ns = bare_ns
    # The first operator's pod creates take 2 s each at the fault proxy (16 in flight: the 50
    # take about 8 s), so the kill lands mid-creation whatever the machine's load; polling
    # alone raced a fast operator (all 50 were created before the poll saw the first).
    with FaultProxy(kube_cluster, log=tmp_path / "fault-proxy.log") as proxy:
        proxy.delay("POST", "big-worker-", 2.0)
        first = operators.start(
            "--kubeconfig", str(proxy.kubeconfig(tmp_path / "proxy.kubeconfig")), name="first")
        ns.create(job("TfJob", "big", {"Worker": replica("TfJob", 50)}))

        def some_pods() -> int:
            return len(ns.pods("big"))

        wait_for(some_pods, "the first pods of the 50", timeout=30, interval=0.01)
        first.kill()
        time.sleep(3)  # requests in flight at the kill have landed (the proxy forwards them)
    at_kill = {p["metadata"]["name"]: (p["metadata"]["uid"], p["metadata"]["creationTimestamp"])
               for p in ns.pods("big")}
    services_at_kill = len(ns.services("big"))
    assert 0 < len(at_kill) < 50, f"the kill came after all pods were created: {len(at_kill)}"

    second = operators.start(name="second")
    names = {f"big-worker-{i}" for i in range(50)}
    status = ns.wait_state("TfJob", "big", "Running", timeout=60)
    wait_for(lambda: {p["metadata"]["name"] for p in ns.pods("big")} == names,
             lambda: f"exactly the 50 worker pods, have {len(ns.pods('big'))}")
    pods = ns.pods("big")
    assert len(pods) == 50 and not any(p["metadata"].get("deletionTimestamp") for p in pods)
    for pod in pods:
        name = pod["metadata"]["name"]
        if name in at_kill:
            assert (pod["metadata"]["uid"], pod["metadata"]["creationTimestamp"]) == \
                at_kill[name], f"{name} was recreated"
    assert {s["metadata"]["name"] for s in ns.services("big")} == names
    # Each pod was scheduled exactly once: no pod was ever deleted and created again.
    scheduled = ns.scheduled()
    assert set(scheduled) == names and set(scheduled.values()) == {1}, scheduled
    time.sleep(1.5)
    status = ns.status("TfJob", "big")
    assert status["replicaStatuses"]["Worker"]["active"] == 50, status
    assert status["replicaStatuses"]["Worker"]["restarts"] == 0, status
    # The second operator found everything the first made: no conflict, no error.
    problems = second.problems(allowed=r"\b429\b", levels=("error", "critical", "warning"))
    assert not problems, problems
    assert not second.logged(r"\b409\b|already exists"), second.logged(r"409")
    print(f"at the kill: {len(at_kill)} pods, {services_at_kill} services")
