"""Tests of the PyTorchJob plugin, as its author writes them: against the installed package,
through nothing but trainjobs' public surface — the plugin API (`trainjobs.plugin`), the test
control plane (`trainjobs.testing`) and the `trainjobs` command.

Run them with the plugin and trainjobs installed: `pip install -e .[test]; pytest`. The last
test starts a real Kubernetes control plane (etcd, kube-apiserver, scheduler, KWOK nodes) on
127.0.0.1 through the `kube_cluster` fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainjobs_pytorch import JOB_ROLE_LABEL, PYTORCH, PyTorchJobSpec, plugin

from trainjobs.plugin import (
    Address,
    ClusterLayout,
    Job,
    RenderContext,
    Replica,
    ReplicaOutcome,
    ReplicaPhase,
)
from trainjobs.testing import ControlPlane

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pytorch-gloo.yaml"
TRAINJOBS = Path(sys.executable).with_name("trainjobs")


def job(name: str = "mnist", workers: int = 2, **spec: Any) -> Job:
    """A PyTorchJob as the core hands it to hooks (already validated by the schema)."""
    container = {"name": "pytorch", "image": "example.invalid/pytorch:1"}
    replica_specs = {"Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}},
                     "Worker": {"replicas": workers,
                                "template": {"spec": {"containers": [container]}}}}
    return Job(kind="PyTorchJob", metadata={"name": name},  # type: ignore[arg-type]
               spec=PyTorchJobSpec.model_validate({"replicaSpecs": replica_specs, **spec}))


def context(j: Job, backend: str = "kubernetes") -> RenderContext:
    """Addresses as each backend gives them: Service names on Kubernetes, loopback locally."""
    replicas = [Replica("Master", 0)] + [Replica("Worker", i) for i in
                                         range(j.spec.replica_specs["Worker"].replicas)]
    addresses = {r: Address(r.object_name(j.name), PYTORCH.default_port)
                 if backend == "kubernetes" else Address("127.0.0.1", 40000 + n)
                 for n, r in enumerate(replicas)}
    return RenderContext(backend, PYTORCH, ClusterLayout(addresses, job_name=j.name))  # type: ignore[arg-type]


def env(j: Job, replica: Replica, backend: str = "kubernetes") -> dict[str, str]:
    result = plugin.trainjobs_replica_env(job=j, replica=replica, ctx=context(j, backend))
    assert result is not None and result.all_containers, "Kubeflow sets it in every container"
    return dict(result.values)


def install_crd(cluster: ControlPlane, path: Path, timeout: float = 60.0) -> str:
    """Apply a CRD and wait until the API server serves it; its name.

    (Polls instead of `trainjobs.testing.apply_crds`, whose `kubectl wait` fails when it asks
    before the API server has written the CRD's first status condition.)
    """
    applied = cluster.kubectl("apply", "--server-side", "-f", str(path), "-o", "name")
    name = applied.stdout.strip().rsplit("/", 1)[1]
    deadline = time.monotonic() + timeout
    while True:
        crd = json.loads(cluster.kubectl("get", "crd", name, "-o", "json").stdout)
        conditions = crd.get("status", {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return name
        assert time.monotonic() < deadline, f"{name} not Established after {timeout}s"
        time.sleep(0.2)


def test_registered_in_the_trainjobs_entry_point_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="trainjobs") if ep.name == "pytorch"]
    assert ep.value == "trainjobs_pytorch:plugin"
    assert ep.dist is not None and ep.dist.name == "trainjobs-pytorch"
    assert ep.load() is plugin
    assert plugin.trainjobs_frameworks() == [PYTORCH]


def test_kubeflow_environment_contract_on_kubernetes() -> None:
    j = job(workers=2)
    master = {"MASTER_ADDR": "mnist-master-0", "PET_MASTER_ADDR": "mnist-master-0",
              "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456", "WORLD_SIZE": "3",
              "PET_NNODES": "3", "PET_NPROC_PER_NODE": "1"}
    assert env(j, Replica("Master", 0)) == {**master, "RANK": "0", "PET_NODE_RANK": "0"}
    assert env(j, Replica("Worker", 0)) == {**master, "RANK": "1", "PET_NODE_RANK": "1"}
    assert env(j, Replica("Worker", 1)) == {**master, "RANK": "2", "PET_NODE_RANK": "2"}


def test_locally_gloo_is_pinned_to_the_loopback_interface() -> None:
    j = job(workers=1)
    values = env(j, Replica("Worker", 0), backend="local")
    assert values["GLOO_SOCKET_IFNAME"] == "lo"
    assert (values["MASTER_ADDR"], values["MASTER_PORT"]) == ("127.0.0.1", "40000")
    assert "GLOO_SOCKET_IFNAME" not in env(j, Replica("Worker", 0))


@pytest.mark.parametrize(("nproc", "world", "pet_nproc"),
                         [(None, "3", "1"), ("4", "12", "4"), ("auto", "3", "auto")])
def test_nproc_per_node(nproc: str | None, world: str, pet_nproc: str) -> None:
    values = env(job(workers=2, nprocPerNode=nproc), Replica("Worker", 1))
    assert (values["WORLD_SIZE"], values["PET_NNODES"], values["PET_NPROC_PER_NODE"]) == (
        world, "3", pet_nproc)


def test_a_master_alone_is_a_world_of_one() -> None:
    values = env(job(workers=0), Replica("Master", 0))
    assert (values["WORLD_SIZE"], values["RANK"], values["PET_NNODES"]) == ("1", "0", "1")


def test_validation_refuses_elastic_policy_and_ignores_other_kinds() -> None:
    j = job()
    assert plugin.trainjobs_validate(job=j, framework=PYTORCH) == []
    elastic = job()
    spec = elastic.spec.model_dump(by_alias=True)
    spec["replicaSpecs"]["Worker"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    elastic = elastic.model_copy(update={"spec": PyTorchJobSpec.model_validate(spec)})
    (error,) = plugin.trainjobs_validate(job=elastic, framework=PYTORCH) or []
    assert error.path == "spec.replicaSpecs.Worker.elasticPolicy"
    assert "not supported" in error.message
    other = j.model_copy(update={"kind": "TfJob"})
    assert plugin.trainjobs_validate(job=other, framework=PYTORCH) is None


def test_the_master_exit_decides_success() -> None:
    j = job(workers=2)
    master, w0, w1 = Replica("Master", 0), Replica("Worker", 0), Replica("Worker", 1)

    def outcome(replica: Replica, phase: ReplicaPhase) -> ReplicaOutcome:
        return ReplicaOutcome(replica, phase, 0 if phase is ReplicaPhase.SUCCEEDED else None)

    def decide(*outcomes: ReplicaOutcome) -> bool | None:
        return plugin.trainjobs_job_succeeded(job=j, framework=PYTORCH, outcomes=list(outcomes))

    running, done = ReplicaPhase.RUNNING, ReplicaPhase.SUCCEEDED
    assert decide(outcome(master, done), outcome(w0, running), outcome(w1, running)) is True
    assert decide(outcome(master, running), outcome(w0, done), outcome(w1, done)) is False
    assert plugin.trainjobs_job_succeeded(job=j.model_copy(update={"kind": "TfJob"}),
                                          framework=PYTORCH, outcomes=[]) is None


def test_the_master_is_asked_for_checkpoints() -> None:
    j = job()
    assert plugin.trainjobs_checkpoint_replica(job=j, framework=PYTORCH) == Replica("Master", 0)
    assert plugin.trainjobs_checkpoint_replica(job=j.model_copy(update={"kind": "TfJob"}),
                                               framework=PYTORCH) is None


def test_the_master_pod_is_labelled() -> None:
    j = job()
    pods = {r: {"metadata": {"labels": {}}} for r in (Replica("Master", 0), Replica("Worker", 0))}
    for replica, pod in pods.items():
        for _ in range(2):  # idempotent: reconcile renders the same pod again and again
            plugin.trainjobs_adjust_pod(job=j, replica=replica, pod=pod, ctx=context(j))
    assert pods[Replica("Master", 0)]["metadata"]["labels"] == {JOB_ROLE_LABEL: "master"}
    assert pods[Replica("Worker", 0)]["metadata"]["labels"] == {}


def test_trainjobs_render_of_the_example() -> None:
    """The whole path through the installed `trainjobs`: validation, rendering, env, ports."""
    out = subprocess.run([str(TRAINJOBS), "render", str(EXAMPLE)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    pods = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Pod"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    names = ["pytorch-gloo-master-0", "pytorch-gloo-worker-0", "pytorch-gloo-worker-1"]
    assert sorted(pods) == sorted(services) == names
    for rank, name in enumerate(names):
        (container,) = pods[name]["spec"]["containers"]
        values = {e["name"]: e["value"] for e in container["env"]}
        assert values["MASTER_ADDR"] == "pytorch-gloo-master-0"
        assert (values["RANK"], values["WORLD_SIZE"]) == (str(rank), "3")
        assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert pods[names[0]]["metadata"]["labels"][JOB_ROLE_LABEL] == "master"


def test_trainjobs_render_explains_a_bad_job(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["replicaSpecs"]["Master"]["replicas"] = 2
    doc["spec"]["nprocPerNode"] = "many"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    out = subprocess.run([str(TRAINJOBS), "render", str(bad)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "spec.nprocPerNode" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.integration
def test_the_crd_serves_on_a_real_control_plane(
    kube_cluster: ControlPlane, kube_namespace: str, tmp_path: Path
) -> None:
    out = subprocess.run([str(TRAINJOBS), "crds", "-o", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    crd_file = tmp_path / "trainjobs.io_pytorchjobs.yaml"
    assert install_crd(kube_cluster, crd_file) == "pytorchjobs.trainjobs.io"

    kube_cluster.kubectl("apply", "-n", kube_namespace, "-f", str(EXAMPLE))
    listed = kube_cluster.kubectl("get", "trainjobs", "-n", kube_namespace, "-o", "name")
    assert listed.stdout.split() == ["pytorchjob.trainjobs.io/pytorch-gloo"]
    short = kube_cluster.kubectl("get", "ptj", "-n", kube_namespace, "-o", "name")
    assert short.stdout.split() == ["pytorchjob.trainjobs.io/pytorch-gloo"]

    # The API server itself refuses what the schema and its CEL rules forbid.
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = "two-masters"
    doc["spec"]["replicaSpecs"]["Master"]["replicas"] = 2
    refused = kube_cluster.kubectl("apply", "-n", kube_namespace, "-f", "-",
                                   input=yaml.safe_dump(doc), check=False)
    assert refused.returncode != 0
    assert "Master" in refused.stderr, refused.stderr
