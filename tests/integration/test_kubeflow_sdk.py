"""Kubeflow's own kinds served by trainjobs (the `kubeflow` plugin, enabled), driven by
Kubeflow's Python SDK unmodified (`kubeflow-training`'s TrainingClient), against the real
control plane with the operator running. KWOK ends the pods with the exit codes their
templates' annotations name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubeflow.training import (
    KubeflowOrgV1MXJob,
    KubeflowOrgV1MXJobSpec,
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
    TrainingClient,
)
from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec
from trainjobs_kubeflow import GROUP, KUBEFLOW_LABELS

from tests.integration.operator_helpers import IMAGE, Namespace, Operators, wait_for
from trainjobs.testing import (
    EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    ControlPlane,
)

pytestmark = pytest.mark.integration

POLL = 1  # seconds between the SDK's polls (its default, 15, is for real clusters)


@pytest.fixture
def sdk(kube_cluster: ControlPlane, kubeflow_crds: list[str], operators: Operators,
        request: pytest.FixtureRequest) -> Iterator[TrainingClient]:
    """A TrainingClient for the kind the test names (`@pytest.mark.parametrize("sdk", ...,
    indirect=True)`): its wait_for_job_conditions reads conditions with the client's own
    job_kind (PyTorchJob unless told), so the client must be made for the kind."""
    assert sorted(kubeflow_crds) == ["mxjobs.kubeflow.org", "tfjobs.kubeflow.org"]
    operators.start("--enable-plugins", "kubeflow")
    yield TrainingClient(config_file=str(kube_cluster.kubeconfig), job_kind=request.param)


TF = pytest.mark.parametrize("sdk", ["TFJob"], indirect=True)
MX = pytest.mark.parametrize("sdk", ["MXJob"], indirect=True)


def _replica(container: str, replicas: int, exit_code: int | None,
             restart_policy: str = "Never") -> KubeflowOrgV1ReplicaSpec:
    annotations = {} if exit_code is None else {EXIT_CODE_ANNOTATION: str(exit_code),
                                                 RUN_DURATION_ANNOTATION: "2s"}
    return KubeflowOrgV1ReplicaSpec(
        replicas=replicas, restart_policy=restart_policy,
        template=V1PodTemplateSpec(
            metadata=V1ObjectMeta(annotations=annotations),
            spec=V1PodSpec(containers=[V1Container(name=container, image=IMAGE)])))


def _tfjob(name: str, worker_exit: int, chief_exit: int | None = 0) -> KubeflowOrgV1TFJob:
    return KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1", kind="TFJob", metadata=V1ObjectMeta(name=name),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None", backoff_limit=0),
            tf_replica_specs={"Chief": _replica("tensorflow", 1, chief_exit),
                              "Worker": _replica("tensorflow", 2, worker_exit),
                              "PS": _replica("tensorflow", 1, None)}))


def _pods_gone(ns: Namespace, name: str) -> bool:
    pods = ns.get_path(f"/api/v1/namespaces/{ns.name}/pods",
                       {"labelSelector": f"training.kubeflow.org/job-name={name}"})
    services = ns.get_path(f"/api/v1/namespaces/{ns.name}/services",
                           {"labelSelector": f"trainjobs.io/job-name={name}"})
    return not pods["items"] and not services["items"]


@TF
def test_tfjob_through_the_kubeflow_sdk(sdk: TrainingClient, bare_ns: Namespace) -> None:
    ns, name = bare_ns.name, "mnist"
    sdk.create_job(job=_tfjob(name, worker_exit=0), namespace=ns)
    job: Any = sdk.get_job(name, ns, job_kind="TFJob")
    assert job.spec.tf_replica_specs["Worker"].replicas == 2
    job = sdk.wait_for_job_conditions(name, ns, job_kind="TFJob", timeout=120,
                                      polling_interval=POLL)
    assert sdk.is_job_succeeded(name, ns, job_kind="TFJob")
    assert not sdk.is_job_failed(name, ns, job_kind="TFJob")
    status = job.status
    types = [c.type for c in status.conditions if c.status == "True"]
    assert types == ["Created", "Succeeded"], status.conditions
    assert {c.type for c in status.conditions} >= {"Created", "Running", "Succeeded"}
    assert status.replica_statuses["Chief"].succeeded == 1
    worker = status.replica_statuses["Worker"]  # the Chief decides; workers may still run
    assert (worker.active or 0) + (worker.succeeded or 0) == 2, worker
    assert status.start_time and status.completion_time and status.last_reconcile_time
    assert sorted(sdk.get_job_pod_names(name, ns)) == [
        "mnist-chief-0", "mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    [master] = sdk.get_job_pods(name, ns, is_master=True)
    assert master.metadata.name == "mnist-chief-0"
    assert set(KUBEFLOW_LABELS) <= set(master.metadata.labels)
    assert master.metadata.labels["training.kubeflow.org/operator-name"] == "tfjob-controller"
    workers = sdk.get_job_pod_names(name, ns, replica_type="worker", replica_index=1)
    assert workers == ["mnist-worker-1"]
    sdk.delete_job(name, ns, job_kind="TFJob")
    wait_for(lambda: _pods_gone(bare_ns, name), "the job's pods and Services deleted",
             timeout=60)
    assert bare_ns.get_path(f"/apis/{GROUP}/v1/namespaces/{ns}/tfjobs/{name}") is None


@TF
def test_failing_tfjob_is_failed_for_the_sdk(sdk: TrainingClient, bare_ns: Namespace) -> None:
    ns, name = bare_ns.name, "broken"
    # The Chief runs on: its success must not race the workers' failure.
    sdk.create_job(job=_tfjob(name, worker_exit=1, chief_exit=None), namespace=ns)
    job: Any = sdk.wait_for_job_conditions(name, ns, job_kind="TFJob",
                                           expected_conditions={"Failed"}, timeout=120,
                                           polling_interval=POLL)
    assert sdk.is_job_failed(name, ns, job_kind="TFJob")
    assert not sdk.is_job_succeeded(name, ns, job_kind="TFJob")
    [failed] = [c for c in job.status.conditions if c.type == "Failed"]
    assert "exit code 1" in failed.message, failed.message
    sdk.delete_job(name, ns, job_kind="TFJob")
    wait_for(lambda: _pods_gone(bare_ns, name), "the job's pods and Services deleted",
             timeout=60)


def _mxjob(name: str, mode: str, workers: int, worker_exit: int = 0,
           run_policy: KubeflowOrgV1RunPolicy | None = None) -> KubeflowOrgV1MXJob:
    """Scheduler and Server run on; the Workers exit `worker_exit`. The SDK's model needs
    run_policy."""
    return KubeflowOrgV1MXJob(
        api_version="kubeflow.org/v1", kind="MXJob", metadata=V1ObjectMeta(name=name),
        spec=KubeflowOrgV1MXJobSpec(
            job_mode=mode, run_policy=run_policy or KubeflowOrgV1RunPolicy(),
            mx_replica_specs={"Scheduler": _replica("mxnet", 1, None),
                              "Server": _replica("mxnet", 2, None),
                              "Worker": _replica("mxnet", workers, worker_exit)}))


@MX
def test_mxjob_through_the_kubeflow_sdk(sdk: TrainingClient, bare_ns: Namespace) -> None:
    ns, name = bare_ns.name, "mx"
    sdk.create_job(job=_mxjob(name, "MXTrain", 2), namespace=ns)
    assert sdk.get_job(name, ns, job_kind="MXJob").spec.job_mode == "MXTrain"
    job: Any = sdk.wait_for_job_conditions(name, ns, job_kind="MXJob", timeout=120,
                                           polling_interval=POLL)
    assert sdk.is_job_succeeded(name, ns, job_kind="MXJob")
    assert not sdk.is_job_failed(name, ns, job_kind="MXJob")
    assert job.status.replica_statuses["Worker"].succeeded == 2
    # trainjobs' default cleanPodPolicy (Running) deleted the scheduler and server.
    assert sorted(sdk.get_job_pod_names(name, ns)) == ["mx-worker-0", "mx-worker-1"]
    sdk.delete_job(name, ns, job_kind="MXJob")
    wait_for(lambda: _pods_gone(bare_ns, name), "the job's pods and Services deleted",
             timeout=60)


@MX
def test_mxtune_is_refused_with_the_reason(sdk: TrainingClient, bare_ns: Namespace) -> None:
    ns, name = bare_ns.name, "tune"
    sdk.create_job(job=_mxjob(name, "MXTune", 1), namespace=ns)
    job: Any = sdk.wait_for_job_conditions(name, ns, job_kind="MXJob",
                                           expected_conditions={"Failed"}, timeout=60,
                                           polling_interval=POLL)
    [failed] = [c for c in job.status.conditions if c.type == "Failed"]
    assert failed.reason == "InvalidSpec" and "MXTune" in failed.message


@MX
def test_failing_mxjob_is_failed_for_the_sdk(sdk: TrainingClient, bare_ns: Namespace) -> None:
    """A Worker exits 1: Failed for the SDK; with cleanPodPolicy None the pods stay, and
    `get_job_pods(is_master=True)` finds the Servers, as training-operator labels them."""
    ns, name = bare_ns.name, "mxbroken"
    sdk.create_job(job=_mxjob(name, "MXTrain", 1, worker_exit=1, run_policy=(
        KubeflowOrgV1RunPolicy(clean_pod_policy="None", backoff_limit=0))), namespace=ns)
    job: Any = sdk.wait_for_job_conditions(name, ns, job_kind="MXJob",
                                           expected_conditions={"Failed"}, timeout=120,
                                           polling_interval=POLL)
    assert sdk.is_job_failed(name, ns, job_kind="MXJob")
    assert not sdk.is_job_succeeded(name, ns, job_kind="MXJob")
    [failed] = [c for c in job.status.conditions if c.type == "Failed"]
    assert "exit code 1" in failed.message, failed.message
    masters = sdk.get_job_pods(name, ns, is_master=True)
    assert sorted(p.metadata.name for p in masters) == ["mxbroken-server-0", "mxbroken-server-1"]
    assert {p.metadata.labels["training.kubeflow.org/operator-name"] for p in masters} == {
        "mxjob-controller"}
    [worker] = sdk.get_job_pods(name, ns, replica_type="worker", replica_index=0)
    assert worker.metadata.name == "mxbroken-worker-0"
    assert sorted(sdk.get_job_pod_names(name, ns, replica_type="scheduler")) == [
        "mxbroken-scheduler-0"]
    sdk.delete_job(name, ns, job_kind="MXJob")
    wait_for(lambda: _pods_gone(bare_ns, name), "the job's pods and Services deleted",
             timeout=60)
