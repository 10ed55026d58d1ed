"""Kueue runs for real in the tests: Kueue v0.19.2 (the ``kueue`` fixture) admits
``batch/v1`` Jobs through a ClusterQueue's quota, with Kubernetes' own Job controller and KWOK
nodes; no trainjobs operator is involved. The baseline the operator's own Kueue integration
is measured against.

Two Jobs that each need 3 of the ClusterQueue's 4 CPUs: Kueue's webhook suspends both at
creation; one is admitted (its Workload Admitted, the Job unsuspended, its pod given the
flavor's node label and bound to the labelled KWOK node), the other stays suspended with no
pod and Kueue's "insufficient unused quota" in its Workload's QuotaReserved condition, and is
admitted and runs once the first has finished.

And the two restarts with other options later scenarios need (``kueue.configured``): Kueue's
own ``kubeflow.org/tfjob`` integration handles a Kubeflow TFJob on trainjobs' CRD up to its
admission; a 5 s ``waitForPodsReady`` evicts and requeues a Job whose pod cannot run.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.operator_helpers import wait_for
from trainjobs.testing import (
    EXIT_CODE_ANNOTATION,
    QUEUE_LABEL,
    RUN_DURATION_ANNOTATION,
    ClusterOptions,
    ControlPlane,
    Kueue,
    WaitForPodsReady,
    condition_true,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
    wait_for_workload,
    workload_condition,
    workloads_owned_by,
)

pytestmark = pytest.mark.integration

POOL_LABEL = "kueue-harness.trainjobs.io/pool"


@pytest.fixture
def pool(kube_cluster: ControlPlane) -> Iterator[tuple[str, list[str]]]:
    """Two KWOK nodes of 4 CPU labelled with a value of their own; deleted after the test."""
    value = uuid.uuid4().hex[:8]
    nodes = kube_cluster.add_nodes(ClusterOptions(
        nodes=2, node_prefix=f"kueue-{value}", node_cpu="4", node_memory="8Gi",
        node_labels={POOL_LABEL: value}))
    try:
        yield value, nodes
    finally:
        kube_cluster.kubectl("delete", "node", *nodes, "--wait=false", check=False)


def batch_job(name: str, namespace: str, queue: str, cpu: str, run: str) -> dict[str, Any]:
    """A one-pod Job in ``queue`` whose pod asks ``cpu`` and succeeds after ``run``."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0",
                                             RUN_DURATION_ANNOTATION: run}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "busybox",
                    "resources": {"requests": {"cpu": cpu}}}]},
            },
        },
    }


def create(plane: ControlPlane, obj: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = json.loads(
        plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj)).stdout)
    return created


def get_json(plane: ControlPlane, *args: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(plane.kubectl("get", "-o", "json", *args).stdout)
    return got


def pods_of(plane: ControlPlane, namespace: str, job_name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        plane, "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job_name}")["items"]
    return items


def admitted(wl: dict[str, Any]) -> bool:
    return condition_true(wl, "Admitted")


def finished(wl: dict[str, Any]) -> bool:
    return condition_true(wl, "Finished")


@dataclass(frozen=True)
class Queue:
    """A ResourceFlavor for the pool's nodes, a ClusterQueue of 4 CPU of it, and the
    LocalQueue ``queue`` of the test's namespace."""

    namespace: str
    flavor: str
    value: str
    nodes: list[str]
    local: str = "queue"


@pytest.fixture
def queue(kube_cluster: ControlPlane, kueue: Kueue, kube_namespace: str,
          pool: tuple[str, list[str]]) -> Iterator[Queue]:
    value, nodes = pool
    name = f"kh-{value}"
    create_resource_flavor(kube_cluster, name, node_labels={POOL_LABEL: value})
    try:
        create_cluster_queue(kube_cluster, name, quotas={name: {"cpu": "4"}})
        create_local_queue(kube_cluster, kube_namespace, "queue", name)
        yield Queue(kube_namespace, name, value, nodes)
    finally:
        # The jobs first: a ClusterQueue is deleted only once no admitted Workload uses it.
        kube_cluster.kubectl("delete", "jobs", "--all", "-n", kube_namespace,
                             "--cascade=foreground", "--wait=true", check=False, timeout=60)
        kube_cluster.kubectl("delete", "localqueue", "queue", "-n", kube_namespace,
                             "--ignore-not-found", "--wait=true", check=False, timeout=60)
        kube_cluster.kubectl("delete", "clusterqueue", name, "--ignore-not-found",
                             "--wait=true", check=False, timeout=60)
        kube_cluster.kubectl("delete", "resourceflavor", name, "--ignore-not-found",
                             "--wait=true", check=False, timeout=60)


def test_kueue_admits_within_quota_and_queues_the_rest(
    kube_cluster: ControlPlane, queue: Queue
) -> None:
    ns, name, value, nodes = queue.namespace, queue.flavor, queue.value, queue.nodes
    # The CRD conversion webhook answers: the ClusterQueue read as v1beta1 (it is stored as
    # v1beta2) goes through Kueue's /convert.
    v1beta1 = kube_cluster.api().get(f"/apis/kueue.x-k8s.io/v1beta1/clusterqueues/{name}")
    assert v1beta1.status == 200, v1beta1.body
    assert v1beta1.json()["apiVersion"] == "kueue.x-k8s.io/v1beta1"

    first = create(kube_cluster, batch_job("first", ns, queue.local, "3", "6s"))
    # Kueue's mutating webhook suspended it at creation.
    assert first["spec"]["suspend"] is True
    wl_first = wait_for_workload(kube_cluster, ns, first["metadata"]["uid"], admitted,
                                 "the first Job's Workload to be admitted")
    admission = wl_first["status"]["admission"]
    assert admission["clusterQueue"] == name
    assert admission["podSetAssignments"][0]["flavors"] == {"cpu": name}

    second = create(kube_cluster, batch_job("second", ns, queue.local, "3", "1s"))
    assert second["spec"]["suspend"] is True
    wl_second = wait_for_workload(
        kube_cluster, ns, second["metadata"]["uid"],
        lambda wl: (c := workload_condition(wl, "QuotaReserved")) is not None
        and c.status == "False" and "insufficient unused quota" in c.message,
        "the second Job's Workload to say it lacks quota")
    reserved = workload_condition(wl_second, "QuotaReserved")
    assert reserved is not None and f"in flavor {name}" in reserved.message, reserved

    # The first runs: unsuspended by Kueue, its pod steered to the flavor's nodes.
    wait_for(lambda: get_json(kube_cluster, "job", "first", "-n", ns)["spec"]["suspend"]
             is False, "Kueue to unsuspend the first Job")
    pod = wait_for(
        lambda: next((p for p in pods_of(kube_cluster, ns, "first")
                      if p["status"].get("phase") in ("Running", "Succeeded")), None),
        "the first Job's pod to run", timeout=60)
    assert pod["spec"]["nodeSelector"] == {POOL_LABEL: value}
    assert pod["spec"]["nodeName"] in nodes
    # The second stays suspended with no pod while the first runs.
    assert get_json(kube_cluster, "job", "second", "-n", ns)["spec"]["suspend"] is True
    assert pods_of(kube_cluster, ns, "second") == []
    assert not admitted(wl_second)

    # The first finishes, its quota is released, and the second is admitted and runs.
    wait_for_workload(kube_cluster, ns, first["metadata"]["uid"], finished,
                      "the first Job's Workload to finish", timeout=90)
    wait_for_workload(kube_cluster, ns, second["metadata"]["uid"], admitted,
                      "the second Job's Workload to be admitted", timeout=60)
    done = wait_for(
        lambda: next((p for p in pods_of(kube_cluster, ns, "second")
                      if p["status"].get("phase") == "Succeeded"), None),
        "the second Job's pod to succeed", timeout=90)
    assert done["spec"]["nodeSelector"] == {POOL_LABEL: value}
    assert done["spec"]["nodeName"] in nodes
    wait_for_workload(kube_cluster, ns, second["metadata"]["uid"], finished,
                      "the second Job's Workload to finish", timeout=90)


def test_kueue_tfjob_integration_on_the_kubeflow_crd(
    kube_cluster: ControlPlane, kueue: Kueue, kubeflow_crds: list[str], queue: Queue
) -> None:
    """Kueue restarted with its ``kubeflow.org/tfjob`` integration (the Kubeflow CRDs installed
    first) handles an unchanged ``kubeflow.org/v1`` TFJob on trainjobs' CRD: its webhook
    suspends it, its tfjob controller creates the Workload (one pod set per replica type)
    and, on admission, unsuspends it with the flavor's node label in the templates. No
    operator runs: what happens next is issue 25 point 3's."""
    assert "tfjobs.kubeflow.org" in kubeflow_crds
    frameworks = ("batch/job", "kubeflow.org/tfjob")
    with kueue.configured(kueue.with_options(frameworks=frameworks)):
        assert kueue.options.frameworks == frameworks
        worker = {"replicas": 2, "template": {"spec": {"containers": [{
            "name": "tensorflow", "image": "tf",
            "resources": {"requests": {"cpu": "1"}}}]}}}
        tfjob = create(kube_cluster, {
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "tf", "namespace": queue.namespace,
                         "labels": {QUEUE_LABEL: queue.local}},
            "spec": {"tfReplicaSpecs": {"Worker": worker}}})
        assert tfjob["spec"]["runPolicy"]["suspend"] is True
        wl = wait_for_workload(kube_cluster, queue.namespace, tfjob["metadata"]["uid"],
                               admitted, "the TFJob's Workload to be admitted")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("worker", 2)]
        got = wait_for(
            lambda: (j := get_json(kube_cluster, "tfjobs.kubeflow.org", "tf", "-n",
                                   queue.namespace))["spec"]["runPolicy"]["suspend"] is False
            and j, "Kueue to unsuspend the TFJob")
        template = got["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
        assert template["nodeSelector"] == {POOL_LABEL: queue.value}
        # Deleted while Kueue's tfjob controller runs, which takes its finalizer off the
        # Workload (jobframework's finalizeWorkloads); the garbage collector deletes it later
        # (it learns new CRDs' resources on its 30 s discovery resync).
        kube_cluster.kubectl("delete", "tfjobs.kubeflow.org", "tf", "-n", queue.namespace,
                             "--wait=true", timeout=60)
        wait_for(lambda: all(not wl["metadata"].get("finalizers")
                             for wl in workloads_owned_by(kube_cluster, queue.namespace,
                                                          tfjob["metadata"]["uid"])),
                 "Kueue to release the TFJob's Workload", timeout=60)
    assert kueue.options.frameworks == ("batch/job",)


def test_kueue_wait_for_pods_ready_per_start(kube_cluster: ControlPlane, kueue: Kueue,
                                             queue: Queue) -> None:
    """Kueue restarted with a 5 s ``waitForPodsReady`` (scenario f's setting) evicts an
    admitted Job whose pod cannot be scheduled (a nodeSelector no node has), suspends it
    again and requeues it; its default (30 min) is back after the block."""
    pods_ready = WaitForPodsReady(timeout="5s", requeuing_backoff_base_seconds=1)
    with kueue.configured(kueue.with_options(wait_for_pods_ready=pods_ready)):
        stuck = batch_job("stuck", queue.namespace, queue.local, "1", "1s")
        stuck["spec"]["template"]["spec"]["nodeSelector"] = {f"{POOL_LABEL}-none": "x"}
        job = create(kube_cluster, stuck)
        uid = job["metadata"]["uid"]
        wait_for_workload(kube_cluster, queue.namespace, uid, admitted,
                          "the Job's Workload to be admitted")
        evicted = wait_for_workload(
            kube_cluster, queue.namespace, uid,
            lambda wl: (c := workload_condition(wl, "Evicted")) is not None and c.true
            and c.reason == "PodsReadyTimeout",
            "Kueue to evict the Workload for PodsReadyTimeout", timeout=60)
        assert not condition_true(evicted, "PodsReady")
        # Requeued and admitted again after the 1 s back-off (requeueState counts it).
        again = wait_for_workload(
            kube_cluster, queue.namespace, uid,
            lambda wl: admitted(wl)
            and ((wl["status"].get("requeueState") or {}).get("count") or 0) >= 1,
            "the Workload to be requeued and admitted again", timeout=60)
        assert again["status"]["requeueState"]["count"] >= 1
    assert kueue.options.wait_for_pods_ready is None


def test_a_dead_kueue_is_named_with_its_log_and_restarts(kube_cluster: ControlPlane,
                                                         kueue: Kueue) -> None:
    """Kueue is a component of the control plane: killed, ``dead()`` names it with its log
    (what fails a test during which it died); ``start_component`` brings it back serving."""
    os.kill(kube_cluster.pids["kueue"], signal.SIGKILL)
    try:
        line = wait_for(lambda: next((d for d in kube_cluster.dead()
                                      if d.startswith("kueue exited")), None),
                        "dead() to name kueue")
        assert str(kueue.log) in line
    finally:
        kube_cluster.start_component("kueue", timeout=90)
    assert kube_cluster.dead() == []
    assert kueue.webhooks_answer()
