"""Kueue's MultiKueue across real clusters (issue 26.3), proven first with Kueue's built-in
``batch/v1`` Job integration and Kubernetes' own Job controller (no trainjobs operator): the
harness (``multi_cluster``: a manager and two workers, each a whole control plane with Kueue
v0.19.2, trainjobs' CRDs installed, our kinds listed in ``multiKueue.externalFrameworks``) is
right when a Job created in the manager runs in a worker only and its status in the manager
follows it to Complete, and when, one worker full, it runs on the other. Then our MxJob, with
an operator in every cluster: dispatched by MultiKueue's generic adapter, run in a worker by
that worker's operator on the prebuilt Workload, its status copied back to the manager.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_helpers import (
    CRDS_DIR,
    LABEL_JOB,
    Operators,
    job,
    replica,
    wait_for,
)
from trainjobs.api.models import MANAGED_BY_MULTIKUEUE
from trainjobs.plugin.manager import load_plugins
from trainjobs.testing import (
    EXIT_CODE_ANNOTATION,
    MULTIKUEUE_CONTROLLER,
    QUEUE_LABEL,
    RUN_DURATION_ANNOTATION,
    ControlPlane,
    KueueOptions,
    MultiCluster,
    MultiClusterOptions,
    QueueNames,
    condition_true,
    wait_for_workload,
    workload_condition,
)

pytestmark = [pytest.mark.integration, pytest.mark.multikueue]

#: The Kubeflow plugin's CRDs (kubeflow.org TFJob, MXJob), as the chart ships them.
KUBEFLOW_CRDS = CRDS_DIR.parent / "charts" / "trainjobs" / "kubeflow-crds"
#: Our kinds, as Kueue names external frameworks (Kind.version.group).
KINDS = tuple(sorted(f"{fw.kind}.{fw.version}.{fw.group}"
                     for fw in load_plugins().frameworks.values()))


@pytest.fixture(scope="module")
def multi_cluster_options() -> MultiClusterOptions:
    """trainjobs' CRDs in every cluster, our kinds known to every Kueue and dispatched by the
    manager's generic MultiKueue adapter."""
    return MultiClusterOptions(crds=(CRDS_DIR, KUBEFLOW_CRDS), external_frameworks=KINDS,
                               kueue=KueueOptions(
                                   frameworks=("batch/job", "kubeflow.org/tfjob"),
                                   external_frameworks=KINDS))


def batch_job(name: str, queue: str, cpu: str, run: str) -> dict[str, Any]:
    """A one-pod Job in LocalQueue ``queue`` whose pod asks ``cpu`` and succeeds after
    ``run`` on a KWOK node."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
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


def create(plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = json.loads(plane.kubectl(
        "create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(obj)).stdout)
    return created


def get(plane: ControlPlane, namespace: str, *what: str) -> dict[str, Any] | None:
    out = plane.kubectl("get", "-n", namespace, "-o", "json", *what, check=False)
    if out.returncode != 0:
        if "NotFound" in out.stderr:
            return None
        raise AssertionError(out.stderr)
    got: dict[str, Any] = json.loads(out.stdout)
    return got


def pods_of(plane: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    found = get(plane, namespace, "pods", "-l", f"batch.kubernetes.io/job-name={job}")
    return list((found or {}).get("items") or [])


def job_condition(job: dict[str, Any] | None, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in ((job or {}).get("status") or {}).get("conditions") or [])


@pytest.fixture
def queues(multi_cluster: MultiCluster) -> Iterator[QueueNames]:
    """A namespace in every cluster; a ClusterQueue of 8 CPUs in the manager (with the
    MultiKueue AdmissionCheck) and of 4 in each worker, and LocalQueue ``queue``."""
    namespace = f"mk-{uuid.uuid4().hex[:8]}"
    multi_cluster.create_namespace(namespace)
    names = multi_cluster.create_queues(namespace, manager_quota={"cpu": "8"},
                                        worker_quotas={"cpu": "4"},
                                        prefix=namespace)
    try:
        yield names
    finally:
        for plane in multi_cluster.planes:
            plane.kubectl("delete", "jobs", "--all", "-n", namespace, "--cascade=foreground",
                          "--wait=true", check=False, timeout=90)
        multi_cluster.delete_queues(names)
        multi_cluster.delete_namespace(namespace)
        multi_cluster.check_alive()


def _running_in(multi_cluster: MultiCluster, namespace: str, name: str) -> str | None:
    """The worker in which a pod of Job ``name`` runs or ran, if any."""
    for worker, plane in multi_cluster.workers.items():
        if any(p["status"].get("phase") in ("Running", "Succeeded")
               for p in pods_of(plane, namespace, name)):
            return worker
    return None


def test_a_job_created_in_the_manager_runs_in_a_worker(multi_cluster: MultiCluster,
                                                       queues: QueueNames) -> None:
    """Scenario a with batch/v1: Kueue's webhook in the manager marks the Job managed by
    MultiKueue, the manager's Workload is admitted once a worker reserved quota, the Job
    runs there (pods there, none in the manager) and the manager's Job status follows it to
    Complete."""
    ns = queues.namespace
    manager = multi_cluster.plane("manager")
    job = create(manager, ns, batch_job("hello", queues.local_queue, "1", "4s"))
    assert job["spec"]["managedBy"] == MULTIKUEUE_CONTROLLER
    uid = job["metadata"]["uid"]
    workload = wait_for_workload(
        manager, ns, uid, lambda wl: condition_true(wl, "Admitted"),
        "the manager's Workload to be admitted through MultiKueue", timeout=90)
    checks = {c["name"]: c for c in workload["status"].get("admissionChecks") or []}
    assert checks[multi_cluster.admission_check]["state"] == "Ready", checks
    worker = wait_for(lambda: _running_in(multi_cluster, ns, "hello"),
                      "the Job's pod to run in a worker", timeout=90)
    # MultiKueue names the worker that holds it on the Workload (the AdmissionCheck's message
    # and status.clusterName).
    assert workload["status"].get("clusterName") in (worker, None), workload["status"]
    remote = get(multi_cluster.workers[worker], ns, "job", "hello")
    assert remote is not None and "managedBy" not in remote["spec"], remote
    done = wait_for(lambda: (j := get(manager, ns, "job", "hello")) is not None
                    and job_condition(j, "Complete") and j,
                    "the manager's Job to be Complete", timeout=120)
    assert done["status"].get("succeeded") == 1, done["status"]
    assert pods_of(manager, ns, "hello") == []
    others = [w for w in multi_cluster.workers if w != worker]
    for other in others:
        assert pods_of(multi_cluster.workers[other], ns, "hello") == []
    wait_for_workload(manager, ns, uid, lambda wl: condition_true(wl, "Finished"),
                      "the manager's Workload to finish", timeout=60)


def test_with_one_worker_full_the_job_runs_on_the_other(multi_cluster: MultiCluster,
                                                        queues: QueueNames) -> None:
    """Scenario b with batch/v1: worker1's ClusterQueue is full (a Job of its own holds all 4
    CPUs); a Job of 3 CPUs created in the manager runs in worker2, and worker1 ends with
    neither a copy of it nor a pod."""
    ns = queues.namespace
    manager = multi_cluster.plane("manager")
    full, free = list(multi_cluster.workers)
    local = create(multi_cluster.workers[full], ns,
                   batch_job("hog", queues.local_queue, "4", "10m"))
    wait_for(lambda: _running_in(multi_cluster, ns, "hog") == full,
             f"the local Job to fill {full}", timeout=90)
    assert "managedBy" not in local["spec"]
    job = create(manager, ns, batch_job("big", queues.local_queue, "3", "3s"))
    uid = job["metadata"]["uid"]
    wait_for_workload(manager, ns, uid, lambda wl: condition_true(wl, "Admitted"),
                      "the manager's Workload to be admitted", timeout=90)
    worker = wait_for(lambda: _running_in(multi_cluster, ns, "big"),
                      "the Job's pod to run in a worker", timeout=90)
    assert worker == free
    wait_for(lambda: job_condition(get(manager, ns, "job", "big"), "Complete"),
             "the manager's Job to be Complete", timeout=120)
    # MultiKueue removed the copy it had also made in the full worker.
    wait_for(lambda: get(multi_cluster.workers[full], ns, "job", "big") is None,
             f"no copy of the Job left in {full}", timeout=60)
    assert pods_of(multi_cluster.workers[full], ns, "big") == []
    assert pods_of(manager, ns, "big") == []
    reserved = workload_condition(
        wait_for_workload(manager, ns, uid, lambda wl: True, "the Workload"), "QuotaReserved")
    assert reserved is not None


def test_an_mxjob_created_in_the_manager_runs_in_a_worker(
        multi_cluster: MultiCluster, queues: QueueNames, tmp_path: Path) -> None:
    """Scenario a with our MxJob and an operator in every cluster: the manager's operator
    creates the Workload and nothing else (the job is managed by MultiKueue); MultiKueue
    copies the job (without managedBy, with the prebuilt-workload label) and the Workload to
    a worker; that worker's operator runs it on the prebuilt Workload; the manager's job
    status follows it to Succeeded; no pod in the manager or the other worker. Then scenario
    c: a second MxJob, running in a worker, deleted in the manager, is deleted in the worker
    too, pods and all."""
    ns = queues.namespace
    manager = multi_cluster.plane("manager")
    with _operators_everywhere(multi_cluster, ns, tmp_path, "mxjobs.trainjobs.io") as operators:
        for name, ops in operators.items():
            # The manager's as the chart's multiKueue.manager runs it: it runs no job there.
            ops.start(*(["--multikueue-manager"] if name == "manager" else []),
                      name=f"operator-{name}")
        manifest = job("MxJob", "mx", {
            "Scheduler": replica("MxJob", resources={"requests": {"cpu": "100m"}}),
            "Server": replica("MxJob", resources={"requests": {"cpu": "100m"}}),
            "Worker": replica("MxJob", 2, exit_code=0, run="3s",
                              resources={"requests": {"cpu": "500m"}}),
        }, managedBy=MANAGED_BY_MULTIKUEUE)
        manifest["metadata"]["labels"] = {QUEUE_LABEL: queues.local_queue}
        created = create(manager, ns, manifest)
        uid = created["metadata"]["uid"]
        workload = wait_for_workload(
            manager, ns, uid, lambda wl: condition_true(wl, "Admitted"),
            "the manager's Workload (made by the manager's operator) to be admitted",
            timeout=120)
        assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [
            ("scheduler", 1), ("server", 1), ("worker", 2)]
        worker = wait_for(
            lambda: next((w for w, plane in multi_cluster.workers.items()
                          if get(plane, ns, "mxjobs.trainjobs.io", "mx") is not None
                          and _mx_pods(plane, ns)), None),
            "the MxJob's pods in a worker", timeout=120)
        remote = get(multi_cluster.workers[worker], ns, "mxjobs.trainjobs.io", "mx")
        assert remote is not None and "managedBy" not in remote["spec"], remote
        # v0.19.2 writes the annotation (WorkloadIdentifierAnnotations), not the label.
        prebuilt = remote["metadata"]["annotations"].get(
            "kueue.x-k8s.io/prebuilt-workload-name")
        assert prebuilt == workload["metadata"]["name"], remote["metadata"]
        assert remote["metadata"]["labels"].get("kueue.x-k8s.io/multikueue-origin") == \
            multi_cluster.options.origin
        # The worker's operator took the prebuilt Workload over: it is the only one there.
        remote_wls = wait_for_workload(
            multi_cluster.workers[worker], ns, remote["metadata"]["uid"],
            lambda wl: wl["metadata"]["name"] == prebuilt and condition_true(wl, "Admitted"),
            "the worker's operator to own the prebuilt Workload, admitted", timeout=60)
        assert remote_wls["metadata"]["name"] == prebuilt
        done = wait_for(
            lambda: (j := get(manager, ns, "mxjobs.trainjobs.io", "mx")) is not None
            and (j.get("status") or {}).get("state") == "Succeeded" and j,
            "the manager's MxJob status to follow the worker's to Succeeded", timeout=180)
        assert done["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2, done["status"]
        assert _mx_pods(manager, ns) == []
        for other, plane in multi_cluster.workers.items():
            if other != worker:
                assert _mx_pods(plane, ns) == []
        assert operators["manager"].started[0].logged(
            "is managed by kueue.x-k8s.io/multikueue"), "the manager's operator said nothing"
        wait_for_workload(manager, ns, uid, lambda wl: condition_true(wl, "Finished"),
                          "the manager's Workload to finish", timeout=60)

        # Scenario c: a running MxJob deleted in the manager goes from its worker too.
        manifest["metadata"]["name"] = "mx2"
        manifest["spec"]["replicaSpecs"]["Worker"] = replica(
            "MxJob", 2, resources={"requests": {"cpu": "500m"}})  # runs until deleted
        create(manager, ns, manifest)
        running = wait_for(
            lambda: next((w for w, plane in multi_cluster.workers.items()
                          if any(p["status"].get("phase") == "Running"
                                 for p in _mx_pods(plane, ns, "mx2"))), None),
            "mx2's pods to run in a worker", timeout=120)
        # What the user sees in the manager while it runs (issue 26.4): who manages it and
        # where it runs, and logs that point to the worker instead of coming back empty.
        status = _cli(manager, "status", "mx2", "-n", ns)
        assert status.returncode == 0, status.stderr
        assert (f"  runs in worker cluster {running} (its Workload's status.clusterName); "
                "its pods, events and logs are there") in status.stdout.splitlines(), status
        logs = _cli(manager, "logs", "mx2", "-n", ns)
        assert logs.returncode == 5, (logs.stdout, logs.stderr)
        assert logs.stderr.startswith(
            "error: MxJob mx2 is managed by kueue.x-k8s.io/multikueue: its pods run in the "
            f"worker cluster '{running}' (its Workload's status.clusterName), not in this "
            "cluster"), logs.stderr
        manager.kubectl("delete", "mxjobs.trainjobs.io", "mx2", "-n", ns, "--wait=false")
        wait_for(lambda: get(multi_cluster.workers[running], ns, "mxjobs.trainjobs.io",
                             "mx2") is None,
                 f"mx2's copy in {running} to be deleted after the manager's", timeout=120)
        wait_for(lambda: _mx_pods(multi_cluster.workers[running], ns, "mx2") == [],
                 f"mx2's pods in {running} to go", timeout=60)


@contextlib.contextmanager
def _operators_everywhere(multi_cluster: MultiCluster, ns: str, tmp_path: Path,
                          resource: str) -> Iterator[dict[str, Operators]]:
    """An `Operators` per cluster (the manager first) for namespace `ns`, each with a folder of
    its own. After the block: `resource` deleted in every cluster and every operator stopped;
    then, when the block passed, none may have exited badly or logged an error."""
    planes = (("manager", multi_cluster.plane("manager")), *multi_cluster.workers.items())
    operators = {name: Operators(plane, [ns], tmp_path / name) for name, plane in planes}
    for name in operators:
        (tmp_path / name).mkdir()
    try:
        yield operators
    finally:
        for plane in multi_cluster.planes:
            plane.kubectl("delete", resource, "--all", "-n", ns, "--wait=true",
                          check=False, timeout=90)
        problems = [p for ops in operators.values() for p in ops.stop_all()]
        errors = [f"{name}: {e}" for name, ops in operators.items() for op in ops.started
                  for e in op.problems()]
    assert not problems, problems
    assert not errors, errors


def _cli(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """`trainjobs ARGS` against ``plane``, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-m", "trainjobs.cli", *args,
                           "--kubeconfig", str(plane.kubeconfig)],
                          capture_output=True, text=True, timeout=90, env=env)


def _mx_pods(plane: ControlPlane, namespace: str, name: str = "mx") -> list[dict[str, Any]]:
    found = get(plane, namespace, "pods", "-l", f"{LABEL_JOB}={name}")
    return list((found or {}).get("items") or [])


def test_a_kubeflow_tfjob_goes_through_kueues_own_adapter(
        multi_cluster: MultiCluster, queues: QueueNames, tmp_path: Path) -> None:
    """Scenario d: an unchanged kubeflow.org/v1 TFJob with runPolicy.managedBy
    kueue.x-k8s.io/multikueue, operators with the Kubeflow plugin in every cluster: Kueue's
    own tfjob integration makes the manager's Workload and its MultiKueue adapter the
    worker's copy (managedBy cleared); the worker's operator runs it once Kueue unsuspends it;
    the manager's TFJob status follows to Succeeded; no pod in the manager."""
    ns = queues.namespace
    manager = multi_cluster.plane("manager")
    tfjobs = "tfjobs.kubeflow.org"
    with _operators_everywhere(multi_cluster, ns, tmp_path, tfjobs) as operators:
        for name, ops in operators.items():
            ops.start("--enable-plugins", "kubeflow", name=f"operator-{name}")
        worker_spec = replica("TfJob", 1, exit_code=0, run="3s",
                              resources={"requests": {"cpu": "500m"}})
        created = create(manager, ns, {
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "tf", "labels": {QUEUE_LABEL: queues.local_queue}},
            "spec": {"runPolicy": {"managedBy": MANAGED_BY_MULTIKUEUE},
                     "tfReplicaSpecs": {"Worker": worker_spec}}})
        uid = created["metadata"]["uid"]
        wait_for_workload(manager, ns, uid, lambda wl: condition_true(wl, "Admitted"),
                          "Kueue's Workload of the TFJob to be admitted", timeout=120)
        worker = wait_for(
            lambda: next((w for w, plane in multi_cluster.workers.items()
                          if _mx_pods(plane, ns, "tf")), None),
            "the TFJob's pods in a worker", timeout=120)
        remote = get(multi_cluster.workers[worker], ns, tfjobs, "tf")
        assert remote is not None
        assert "managedBy" not in remote["spec"].get("runPolicy", {}), remote["spec"]
        done = wait_for(
            lambda: (j := get(manager, ns, tfjobs, "tf")) is not None
            and any(c.get("type") == "Succeeded" and c.get("status") == "True"
                    for c in (j.get("status") or {}).get("conditions") or []) and j,
            "the manager's TFJob status to follow the worker's to Succeeded", timeout=180)
        assert done["status"]["replicaStatuses"]["Worker"]["succeeded"] == 1, done["status"]
        assert _mx_pods(manager, ns, "tf") == []
        assert operators["manager"].started[0].logged(
            "TFJob/.*/tf is managed by kueue.x-k8s.io/multikueue")


def test_with_one_worker_full_an_mxjob_runs_on_the_other(
        multi_cluster: MultiCluster, queues: QueueNames, tmp_path: Path) -> None:
    """Scenario b with our MxJob: worker1's ClusterQueue is full (a batch Job of its own holds
    all 4 CPUs); an MxJob of 3 CPUs created in the manager runs in worker2 by worker2's
    operator and Succeeds in the manager; worker1 ends with neither a copy nor a pod of it."""
    ns = queues.namespace
    manager = multi_cluster.plane("manager")
    full, free = list(multi_cluster.workers)
    create(multi_cluster.workers[full], ns, batch_job("hog", queues.local_queue, "4", "10m"))
    wait_for(lambda: _running_in(multi_cluster, ns, "hog") == full,
             f"the local Job to fill {full}", timeout=90)
    with _operators_everywhere(multi_cluster, ns, tmp_path, "mxjobs.trainjobs.io") as operators:
        for name, ops in operators.items():
            ops.start(name=f"operator-{name}")
        manifest = job("MxJob", "big", {
            "Scheduler": replica("MxJob", resources={"requests": {"cpu": "500m"}}),
            "Server": replica("MxJob", resources={"requests": {"cpu": "500m"}}),
            "Worker": replica("MxJob", 2, exit_code=0, run="3s",
                              resources={"requests": {"cpu": "1"}}),
        }, managedBy=MANAGED_BY_MULTIKUEUE)
        manifest["metadata"]["labels"] = {QUEUE_LABEL: queues.local_queue}
        create(manager, ns, manifest)
        worker = wait_for(
            lambda: next((w for w, plane in multi_cluster.workers.items()
                          if _mx_pods(plane, ns, "big")), None),
            "the MxJob's pods in a worker", timeout=120)
        assert worker == free
        wait_for(lambda: ((get(manager, ns, "mxjobs.trainjobs.io", "big") or {})
                          .get("status") or {}).get("state") == "Succeeded",
                 "the manager's MxJob to be Succeeded", timeout=180)
        wait_for(lambda: get(multi_cluster.workers[full], ns, "mxjobs.trainjobs.io", "big")
                 is None, f"no copy of the MxJob in {full}", timeout=60)
        assert _mx_pods(multi_cluster.workers[full], ns, "big") == []
        assert _mx_pods(manager, ns, "big") == []
