"""The operator admits jobs through the real Kueue v0.19.2 (issue 25, points 2 and 4).

The control plane's KWOK nodes run the pods (they end through the annotations of
``kwok_stages.yaml``); Kueue (the session's ``kueue`` fixture) admits the Workloads the
operator creates. Each test has its own ResourceFlavor, ClusterQueue (a small CPU quota),
LocalQueue ``queue`` and priority classes, deleted after it; the operator is started after
Kueue, so it finds Kueue's Workload API at start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.kueue_queue import tainted_queue
from tests.integration.operator_helpers import (
    REPO,
    Namespace,
    Operator,
    Operators,
    condition,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import (
    EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    ControlPlane,
    Kueue,
    WaitForPodsReady,
    apply_crds,
)
from trainjobs.testing._kueue_objects import workloads_owned_by

pytestmark = pytest.mark.integration

WORKLOADS = "workloads.v1beta2.kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass
class Queue:
    """One test's Kueue objects, and the operator watching its namespace."""

    ns: Namespace
    flavor: str
    low: str
    high: str
    operator: Operator
    nodes: list[str]

    def tfjob(self, name: str, cpu: str, run: str = "3s", workers: int = 1,
              priority: str | None = None, exit_code: int | None = 0,
              node_selector: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
        labels = {QUEUE_LABEL: "queue"}
        if priority:
            labels[PRIORITY_LABEL] = priority
        manifest = job("TfJob", name, {"Worker": replica(
            "TfJob", workers, exit_code=exit_code, run=run,
            resources={"requests": {"cpu": cpu}}, **extra)})
        manifest["metadata"]["labels"] = labels
        if node_selector:
            manifest["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = (
                node_selector)
        return self.ns.create(manifest)

    def workloads(self, uid: str) -> list[dict[str, Any]]:
        return workloads_owned_by(self.ns.plane, self.ns.name, uid)

    def queued(self, name: str, contains: str, timeout: float = 60) -> dict[str, Any]:
        """Wait until the TfJob is Queued with `contains` in its Queued condition."""
        def check() -> dict[str, Any] | None:
            status = self.ns.status("TfJob", name)
            cond = condition(status, "Queued")
            if status.get("state") == "Queued" and cond and contains in cond["message"]:
                return status
            return None

        found: dict[str, Any] = wait_for(
            check, lambda: f"TfJob {name} Queued with {contains!r}: "
            f"{json.dumps(self.ns.status('TfJob', name))}", timeout)
        return found


@pytest.fixture
def queue(kube_cluster: ControlPlane, kueue: Kueue, bare_ns: Namespace,
          operators: Operators) -> Iterator[Queue]:
    """`tainted_queue` (4 CPU, LocalQueue ``queue``, priorities low and high, two tainted
    KWOK nodes of the test's own) and an operator started after it."""
    with tainted_queue(kube_cluster, bare_ns.name, "ko") as q:
        try:
            operator = operators.start()
            yield Queue(bare_ns, q.flavor, q.low, q.high, operator=operator, nodes=q.nodes)
        finally:
            bare_ns.kubectl("delete", "tfjobs,mxjobs", "--all", "--wait=false", check=False)
            wait_for(lambda: not (bare_ns.get_path(
                f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{bare_ns.name}/workloads") or {}
            ).get("items"), "the test's Workloads to go with their jobs", timeout=60)


def test_second_job_waits_for_quota_with_kueues_words_then_runs(queue: Queue) -> None:
    """(a) Two jobs that each need 3 of the 4 CPU: one runs, the other is Queued with no pod
    and Kueue's reason, visible in `kubectl get`, then runs when the first has finished."""
    ns = queue.ns
    first = queue.tfjob("first", cpu="3", exit_code=None)  # runs until ended below
    ns.wait_state("TfJob", "first", "Running", timeout=60)
    second = queue.tfjob("second", cpu="3")
    status = queue.queued("second", "insufficient unused quota")
    assert not ns.pods("second") and not ns.services("second")
    assert status.get("startTime") is None
    table = ns.kubectl("get", "tfjob", "second", "--no-headers").stdout.split()
    assert table[1] == "Queued", table
    # The first's pods carry Kueue's labels; its Workload shows in its status.
    (pod,) = ns.pods("first")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == queue.flavor
    (wl,) = queue.workloads(first["metadata"]["uid"])
    owned = ns.status("TfJob", "first").get("ownedObjects") or []
    assert {"kind": "Workload", "name": wl["metadata"]["name"]}.items() <= next(
        o for o in owned if o["kind"] == "Workload").items(), owned

    assert "insufficient unused quota" in trainjobs_status(ns, "second")
    assert ns.status("TfJob", "second")["state"] == "Queued"
    ns.end_pod(pod["metadata"]["name"])
    ns.wait_finished("TfJob", "first", timeout=60)
    # Finished reported to the Workload, then Kueue's finalizer taken off (two passes).
    (wl,) = wait_for(lambda: [w for w in queue.workloads(first["metadata"]["uid"])
                              if "kueue.x-k8s.io/resource-in-use" not in
                              w["metadata"].get("finalizers", [])],
                     "the finished job's Workload to lose its finalizer", timeout=30)
    finished = next(c for c in wl["status"]["conditions"] if c["type"] == "Finished")
    assert finished["status"] == "True" and finished["reason"] == "Succeeded"
    status = ns.wait_finished("TfJob", "second", timeout=60)
    assert status["state"] == "Succeeded", status
    queued = condition(status, "Queued")
    assert queued is not None and queued["status"] == "False" and queued["reason"] == "Admitted"
    assert status["replicaStatuses"]["Worker"]["restarts"] == 0
    (wl,) = queue.workloads(second["metadata"]["uid"])
    assert wl["metadata"]["uid"]  # one Workload, never recreated
    assert not queue.operator.problems()


def test_job_deleted_while_queued_leaves_no_workload(queue: Queue) -> None:
    """(h) A job that can never be admitted (5 CPU, the quota is 4) waits; deleted, its
    Workload goes too (the operator removes Kueue's finalizer, as Kueue does for its jobs)."""
    ns = queue.ns
    created = queue.tfjob("big", cpu="5")
    queue.queued("big", "insufficient quota")
    uid = created["metadata"]["uid"]
    assert len(queue.workloads(uid)) == 1 and not ns.pods("big")
    ns.kubectl("delete", "tfjob", "big", "--wait=true")
    wait_for(lambda: not queue.workloads(uid), "the deleted job's Workload to go", timeout=60)
    assert not queue.operator.problems()


def trainjobs_status(ns: Namespace, name: str) -> str:
    """`trainjobs status NAME` as a user runs it."""
    out = subprocess.run(
        [sys.executable, "-m", "trainjobs.cli", "status", name, "-n", ns.name,
         "--kubeconfig", str(ns.plane.kubeconfig)],
        capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_high_priority_job_preempts_a_running_low_one_through_kueue(queue: Queue) -> None:
    """(b) The low job runs; a high one that does not fit beside it makes Kueue preempt it:
    its pods go, it is Queued, reason Evicted (not Failed, no restart), the high one runs;
    then the low one is admitted again and succeeds."""
    ns = queue.ns
    queue.tfjob("low", cpu="3", priority=queue.low, exit_code=None)
    ns.wait_state("TfJob", "low", "Running", timeout=60)
    (before,) = ns.pods("low")
    queue.tfjob("high", cpu="3", priority=queue.high, exit_code=None)
    status = queue.queued("low", "Preempted", timeout=60)
    cond = condition(status, "Queued")
    assert cond is not None and cond["reason"] == "Evicted", cond
    assert "Preempted to accommodate a workload" in cond["message"], cond
    ns.wait_event("low", "Evicted")
    wait_for(lambda: not ns.pods("low"), "the low job's pods to go", timeout=30)
    ns.wait_state("TfJob", "high", "Running", timeout=60)
    assert "Preempted" in trainjobs_status(ns, "low")
    assert ns.status("TfJob", "low")["state"] == "Queued" and not ns.pods("low")
    (high,) = ns.pods("high")
    ns.end_pod(high["metadata"]["name"])
    ns.wait_finished("TfJob", "high", timeout=60)
    ns.wait_state("TfJob", "low", "Running", timeout=60)
    (again,) = ns.pods("low")
    assert again["metadata"]["uid"] != before["metadata"]["uid"]
    ns.end_pod(again["metadata"]["name"])
    status = ns.wait_finished("TfJob", "low", timeout=60)
    assert status["state"] == "Succeeded", status
    worker = status["replicaStatuses"]["Worker"]
    assert (worker["restarts"], worker["lost"]) == (0, 0), worker
    assert condition(status, "Failed") is None
    assert not queue.operator.problems()


def test_flavor_node_labels_and_tolerations_land_on_the_pods(queue: Queue) -> None:
    """(c) The flavor's node label and toleration are on the admitted pods, which bind to
    the flavor's (tainted) nodes. The pods are read while both run: once worker 0 succeeds
    the job does, and the default cleanPodPolicy (Running) deletes a worker still running."""
    ns = queue.ns
    queue.tfjob("placed", cpu="1", workers=2, exit_code=None)
    pods = ns.wait_pods("placed", {"placed-worker-0": "Running", "placed-worker-1": "Running"},
                        timeout=60)
    for pod in pods:
        assert pod["spec"]["nodeSelector"]["pool"] == queue.flavor
        assert {"key": "pool", "operator": "Equal", "value": queue.flavor,
                "effect": "NoSchedule"} in pod["spec"]["tolerations"]
        assert pod["spec"]["nodeName"] in queue.nodes, pod["spec"].get("nodeName")
    # Worker 1 first: ending worker 0 first makes the job succeed at once, and its
    # cleanPodPolicy deleted worker 1 before the test could end it (kubectl: NotFound).
    for name in ("placed-worker-1", "placed-worker-0"):
        ns.end_pod(name)
    status = ns.wait_finished("TfJob", "placed", timeout=60)
    assert status["state"] == "Succeeded", status
    assert not queue.operator.problems()


def test_operator_restarted_mid_admission_makes_no_second_workload(
        queue: Queue, operators: Operators, kube_cluster: ControlPlane) -> None:
    """(g) A queued job's operator is killed (SIGKILL) and another starts: the same one
    Workload, no pod before admission; admitted (the quota raised), it runs once."""
    ns = queue.ns
    created = queue.tfjob("waits", cpu="6", run="2s")
    queue.queued("waits", "insufficient quota")
    uid = created["metadata"]["uid"]
    (first,) = queue.workloads(uid)
    queue.operator.kill()
    restarted = operators.start(name="restarted")
    wait_for(lambda: restarted.logged("caches synced"), "the new operator to sync", timeout=60)
    assert [w["metadata"]["uid"] for w in queue.workloads(uid)] == [first["metadata"]["uid"]]
    assert not ns.pods("waits")
    kube_cluster.kubectl("patch", "clusterqueue", queue.flavor, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
          "value": "8"}]))
    status = ns.wait_finished("TfJob", "waits", timeout=60)
    assert status["state"] == "Succeeded", status
    assert [w["metadata"]["uid"] for w in queue.workloads(uid)] == [first["metadata"]["uid"]]
    assert sum(1 for n in ns.scheduled() if n.startswith("waits-")) == 1
    assert not restarted.problems()


PYTORCH = REPO / "examples" / "plugins" / "trainjobs-pytorch"


@pytest.fixture
def pytorch_path(tmp_path: Path, kube_cluster: ControlPlane) -> Iterator[str]:
    """The example PyTorchJob plugin, unchanged, made importable as an installed distribution
    (its source tree and a dist-info with its `trainjobs` entry point, on PYTHONPATH; not
    pip-installed, which would change what the session's other tests see), and its CRD
    (written by `trainjobs crds` with the plugin) applied; the CRD is deleted after."""
    site = tmp_path / "site"
    info = site / "trainjobs_pytorch-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trainjobs-pytorch\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text("[trainjobs]\npytorch = trainjobs_pytorch:plugin\n")
    path = f"{site}{os.pathsep}{PYTORCH / 'src'}"
    out, crds = tmp_path / "all-crds", tmp_path / "crds"
    crds.mkdir()
    subprocess.run([sys.executable, "-m", "trainjobs.cli", "crds", "-o", str(out)],
                   env={**os.environ, "PYTHONPATH": path}, check=True, timeout=120,
                   capture_output=True)
    shutil.copy(out / "trainjobs.io_pytorchjobs.yaml", crds)
    names = apply_crds(kube_cluster.kubeconfig, crds)
    try:
        yield path
    finally:
        kube_cluster.kubectl("delete", "crd", *names, "--wait=true", check=False, timeout=120)


def test_a_third_party_plugin_kind_is_admitted_with_no_plugin_change(
        queue: Queue, operators: Operators, pytorch_path: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(d) The example PyTorchJob (Master + 2 Workers, a pip-installable plugin that knows
    nothing of Kueue) gets its Workload with one podSet per replica type, is admitted, its
    pods get the flavor, and it succeeds."""
    ns = queue.ns
    queue.operator.stop()
    monkeypatch.setenv("PYTHONPATH", pytorch_path)
    op = operators.start(name="with-pytorch")
    doc: dict[str, Any] = yaml.safe_load((PYTORCH / "examples" / "pytorch-gloo.yaml").read_text())
    doc["metadata"] = {"name": "torch", "labels": {QUEUE_LABEL: "queue"}}
    specs = doc["spec"]["replicaSpecs"]
    specs["Master"]["template"]["metadata"] = {"annotations": {
        EXIT_CODE_ANNOTATION: "0", RUN_DURATION_ANNOTATION: "3s"}}
    specs["Worker"]["template"]["metadata"] = {"annotations": {RUN_DURATION_ANNOTATION: "1s"}}
    for spec in specs.values():  # the ClusterQueue covers cpu only (Kueue refuses the rest)
        for main in spec["template"]["spec"]["containers"]:
            main["resources"] = {"limits": {"cpu": "1"}}
    created = json.loads(ns.kubectl("create", "-f", "-", "-o", "json",
                                    input=json.dumps(doc)).stdout)
    (wl,) = wait_for(lambda: queue.workloads(created["metadata"]["uid"]),
                     "the PyTorchJob's Workload", timeout=60)
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("master", 1), ("worker", 2)]

    def finished() -> dict[str, Any] | None:
        got = ns.get_path(f"/apis/trainjobs.io/v1alpha1/namespaces/{ns.name}/pytorchjobs/torch")
        status: dict[str, Any] = (got or {}).get("status") or {}
        return status if status.get("state") in ("Succeeded", "Failed") else None

    try:
        status = wait_for(finished, lambda: "the PyTorchJob to finish: " + json.dumps(
            ns.get_path(f"/apis/trainjobs.io/v1alpha1/namespaces/{ns.name}/pytorchjobs/torch")),
            timeout=90)
        assert status["state"] == "Succeeded", status
        # Three pods ran (the Workers are cleaned up once the Master succeeded: cleanPodPolicy
        # Running), on the flavor's nodes.
        assert sorted(n for n in ns.scheduled() if n.startswith("torch-")) == [
            "torch-master-0", "torch-worker-0", "torch-worker-1"]
        for pod in ns.pods("torch"):
            assert pod["spec"]["nodeSelector"]["pool"] == queue.flavor
            assert pod["spec"]["nodeName"] in queue.nodes
        assert not op.problems()
    finally:
        # Deleted while its CRD exists, and its Workload with it: the garbage collector learns
        # of a CRD made during the session only at its discovery resync (30 s), and cannot
        # resolve an owner whose kind is gone once the fixture deletes the CRD.
        ns.kubectl("delete", "pytorchjob", "torch", "--wait=true", check=False)
        ns.kubectl("delete", WORKLOADS, wl["metadata"]["name"], "--ignore-not-found",
                   check=False)


def test_suspend_deactivates_the_workload_and_resume_runs_again(queue: Queue) -> None:
    """`runPolicy.suspend: true` on an admitted, running job: the Workload is deactivated
    (spec.active false; Kueue evicts it), the job is Suspended (not Queued) with no pod; on
    resume it is admitted again and runs, with no restart counted."""
    ns = queue.ns
    created = queue.tfjob("pausing", cpu="1", exit_code=None)
    uid = created["metadata"]["uid"]
    ns.wait_state("TfJob", "pausing", "Running", timeout=60)
    ns.patch_job("TfJob", "pausing", {"spec": {"runPolicy": {"suspend": True}}})
    ns.wait_state("TfJob", "pausing", "Suspended", timeout=30)
    wait_for(lambda: not ns.pods("pausing"), "the suspended job's pods to go", timeout=30)
    (wl,) = wait_for(lambda: [w for w in queue.workloads(uid)
                              if w["spec"].get("active") is False
                              and not any(c["type"] == "QuotaReserved" and c["status"] == "True"
                                          for c in w["status"].get("conditions", []))],
                     "the Workload deactivated and its quota released", timeout=30)
    ns.patch_job("TfJob", "pausing", {"spec": {"runPolicy": {"suspend": False}}})
    ns.wait_state("TfJob", "pausing", "Running", timeout=60)
    (pod,) = ns.pods("pausing")
    ns.end_pod(pod["metadata"]["name"])
    status = ns.wait_finished("TfJob", "pausing", timeout=60)
    assert status["state"] == "Succeeded", status
    assert status["replicaStatuses"]["Worker"]["restarts"] == 0
    assert [w["metadata"]["uid"] for w in queue.workloads(uid)] == [wl["metadata"]["uid"]]
    assert not queue.operator.problems()


def test_pods_that_never_get_ready_are_evicted_by_wait_for_pods_ready(
        kueue: Kueue, queue: Queue) -> None:
    """(f) Kueue restarted with a 10 s waitForPodsReady: a job whose pod can never be
    scheduled (a nodeSelector no node has) is admitted, then evicted (PodsReadyTimeout): its
    pod goes, it is Queued/Evicted saying so, not Failed, with no restart counted."""
    ns = queue.ns
    with kueue.configured(kueue.with_options(wait_for_pods_ready=WaitForPodsReady(
            timeout="10s"))):
        queue.tfjob("stuck", cpu="1", exit_code=None, node_selector={"no-such-label": "x"})
        status = queue.queued("stuck", "PodsReadyTimeout", timeout=90)
        cond = condition(status, "Queued")
        assert cond is not None and cond["reason"] == "Evicted", cond
        assert condition(status, "Failed") is None
        assert status["replicaStatuses"]["Worker"]["restarts"] == 0
        ns.wait_event("stuck", "Evicted")
        assert not queue.operator.problems()


def test_manage_jobs_without_queue_name_in_the_selected_namespaces(
        queue: Queue, operators: Operators) -> None:
    """Kueue's manageJobsWithoutQueueName for the operator: with
    --manage-jobs-without-queue-name and a namespace selector, an unlabelled job in a
    namespace the selector does not match runs as without Kueue (no Workload); once the
    namespace matches, an unlabelled job gets a Workload with no queue name and waits Queued
    with no pod, and given a queue it is admitted (the flavor on its pod) and Succeeds."""
    ns = queue.ns
    queue.operator.stop()
    op = operators.start("--manage-jobs-without-queue-name", "--managed-jobs-namespace-selector",
                         "trainjobs-test/kueue=managed", name="unlabelled")

    def unlabelled(name: str) -> dict[str, Any]:
        return ns.create(job("TfJob", name, {"Worker": replica(
            "TfJob", 1, exit_code=0, run="2s", resources={"requests": {"cpu": "1"}})}))

    free = unlabelled("free")
    assert ns.wait_finished("TfJob", "free", timeout=60)["state"] == "Succeeded"
    assert not queue.workloads(free["metadata"]["uid"])

    ns.plane.kubectl("label", "namespace", ns.name, "trainjobs-test/kueue=managed")
    held = unlabelled("held")
    (wl,) = wait_for(lambda: queue.workloads(held["metadata"]["uid"]),
                     "the unlabelled job's Workload", timeout=60)
    assert not wl["spec"].get("queueName")
    ns.wait_state("TfJob", "held", "Queued", timeout=60)
    assert not ns.pods("held")
    ns.kubectl("label", "tfjob", "held", f"{QUEUE_LABEL}=queue")
    status = ns.wait_finished("TfJob", "held", timeout=90)
    assert status["state"] == "Succeeded", status
    assert [n for n in ns.scheduled() if n.startswith("held-")] == ["held-worker-0"]
    (wl,) = queue.workloads(held["metadata"]["uid"])
    assert wl["spec"]["queueName"] == "queue"
    assert not op.problems()
