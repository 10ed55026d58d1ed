"""`trainjobs convert` on real upstream manifests (tests/fixtures/kubeflow, see its NOTICE.md):
each converts, the result is a valid job, and its pods get the environment the old operator's
programs read. Then the refusals (field paths) and the notes on stderr."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helpers import PLUGINS, render
from trainjobs.cli import main
from trainjobs.convert import NoteKind, convert_document, convert_documents
from trainjobs.core.validation import split_jobs
from trainjobs.errors import SpecInvalid
from trainjobs.yamlio import read_documents

FIXTURES = Path(__file__).parents[2] / "fixtures" / "kubeflow"


@dataclass(frozen=True)
class Expect:
    kind: str
    replicas: dict[str, int]
    restart: str
    clean: str
    env: dict[str, str] = field(default_factory=dict)  # of the first pod of the first type
    passed: tuple[str, ...] = ()


EXPECTED = {
    "tf-v1alpha1-tf_job.yaml": Expect("TfJob", {"Master": 1, "Worker": 1, "PS": 2}, "OnFailure",
                                      "All"),
    "tf-v1alpha1-clean_policy.yaml": Expect("TfJob", {"Master": 1, "Worker": 1, "PS": 2},
                                            "OnFailure", "Running"),
    "tf-v1alpha1-defaults.yaml": Expect("TfJob", {"Master": 1}, "OnFailure", "All"),
    "tf-v1alpha1-gpu.yaml": Expect("TfJob", {"Master": 1}, "OnFailure", "All"),
    "tf-v1alpha1-tensorboard_azure.yaml": Expect("TfJob", {"Master": 1}, "OnFailure", "All"),
    "tf-v1-early-multi_worker.yaml": Expect("TfJob", {"Worker": 2}, "Never", "None"),
    "tfjob-v1-dist_mnist.yaml": Expect("TfJob", {"Chief": 1, "PS": 1, "Worker": 2}, "Never",
                                       "None"),
    "tfjob-v1-multi_worker.yaml": Expect("TfJob", {"Worker": 2}, "Never", "None"),
    "tfjob-v1-mnist_with_summaries.yaml": Expect("TfJob", {"Worker": 1}, "Never", "None"),
    "tfjob-v1-simple.yaml": Expect("TfJob", {"Worker": 2}, "OnFailure", "None"),
    "mxjob-v1-dist.yaml": Expect("MxJob", {"Scheduler": 1, "Server": 1, "Worker": 1}, "Never",
                                 "None", {"DMLC_ROLE": "scheduler", "DMLC_PS_ROOT_PORT": "9991",
                                          "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "1"}),
    "mx-v1alpha1-dist.yaml": Expect("MxJob", {"Scheduler": 1, "Server": 2, "Worker": 2},
                                    "OnFailure", "Running",
                                    {"DMLC_ROLE": "scheduler", "DMLC_PS_ROOT_PORT": "9000",
                                     "DMLC_NUM_SERVER": "2", "DMLC_NUM_WORKER": "2"}),
    "mx-v1alpha2-dist_gpu.yaml": Expect("MxJob", {"Scheduler": 1, "Server": 1, "Worker": 1},
                                        "Never", "None", {"DMLC_PS_ROOT_PORT": "9091"}),
    "mx-v1beta1-dist_gpu.yaml": Expect("MxJob", {"Scheduler": 1, "Server": 1, "Worker": 1},
                                       "Never", "None", {"DMLC_PS_ROOT_PORT": "9091"}),
    "mx-v1-byteps.yaml": Expect("MxJob", {"Scheduler": 1, "Server": 2, "Worker": 2}, "Never",
                                "Running", {"DMLC_NUM_SERVER": "2", "DMLC_NUM_WORKER": "2"}),
    "caffe2-v1alpha1-redis.yaml": Expect("Caffe2Job", {"Worker": 2}, "Never", "Running",
                                         {"SHARD_ID": "0", "NUM_SHARDS": "2",
                                          "REDIS_HOST": "redis-service", "REDIS_PORT": "6379"},
                                         ("Service/redis-service", "Pod/redis")),
    "caffe2-v1alpha1-nfs.yaml": Expect("Caffe2Job", {"Worker": 2}, "Never", "Running",
                                       {"SHARD_ID": "0", "NUM_SHARDS": "2",
                                        "NFS_PATH": "/share2/public/caffe2/"}),
}
REFUSED = {"mxjob-v1-tune.yaml"}


def test_every_fixture_is_covered() -> None:
    assert {p.name for p in FIXTURES.glob("*.yaml")} == set(EXPECTED) | REFUSED


def _env(pod: dict[str, Any], container: str) -> dict[str, str]:
    for c in pod["spec"]["containers"]:
        if c["name"] == container:
            return {e["name"]: e.get("value", "") for e in c.get("env", [])}
    raise AssertionError(f"no container {container} in {pod['metadata']['name']}")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_converts_to_a_valid_job_with_the_expected_environment(name: str) -> None:
    expect = EXPECTED[name]
    source = read_documents(FIXTURES / name)
    result = convert_documents(copy.deepcopy(source), source=name)
    assert result.passed == list(expect.passed)
    for doc in source:
        if doc.get("kind") not in ("TFJob", "MXJob", "Caffe2Job"):
            assert doc in result.documents  # passed through unchanged
    loaded = split_jobs(result.documents, PLUGINS, name)
    [job] = loaded.jobs
    assert job.kind == expect.kind
    assert {k: r.replicas for k, r in job.spec.replica_specs.items()} == expect.replicas
    assert {r.restart_policy.value for r in job.spec.replica_specs.values()} == {expect.restart}
    assert job.spec.run_policy.clean_pod_policy.value == expect.clean
    pods = [m for m in render(job).manifests() if m["kind"] == "Pod"]
    assert len(pods) == sum(expect.replicas.values())
    framework = PLUGINS.framework_for(expect.kind)
    assert framework is not None
    for pod in pods:  # restartPolicy now lives on the replica and reaches every pod
        assert pod["spec"]["restartPolicy"] == ("Never" if expect.restart == "ExitCode" or
                                                expect.kind == "Caffe2Job" else expect.restart)
    first = _env(pods[0], framework.container_name)
    assert {k: first.get(k) for k in expect.env} == expect.env
    if expect.kind == "TfJob" and sum(expect.replicas.values()) > 1:
        tf_config = json.loads(first["TF_CONFIG"])
        assert {k: len(v) for k, v in tf_config["cluster"].items()} == \
            {k.lower(): n for k, n in expect.replicas.items()}


def test_mxtune_is_refused_naming_each_tuning_replica() -> None:
    with pytest.raises(SpecInvalid) as exc:
        convert_documents(read_documents(FIXTURES / "mxjob-v1-tune.yaml"))
    paths = {e.path for e in exc.value.errors}
    assert paths == {f"spec.mxReplicaSpecs.{t}" for t in ("TunerTracker", "TunerServer",
                                                          "Tuner")}
    assert all("MXTune" in e.message for e in exc.value.errors)


def _tfjob_v1(**spec: Any) -> dict[str, Any]:
    worker = {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "tf:1"}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "j"},
            "spec": {"tfReplicaSpecs": {"Worker": worker}, **spec}}


def test_kubeflow_v1_run_policy_and_notes() -> None:
    doc = _tfjob_v1(runPolicy={"backoffLimit": 2, "suspend": True, "schedulingPolicy": {
        "minAvailable": 2, "queue": "q", "scheduleTimeoutSeconds": 5,
        "minResources": {"cpu": 4, "memory": "8Gi"}}}, enableDynamicWorker=True,
        successPolicy="AllWorkers")
    doc["spec"]["tfReplicaSpecs"]["worker"] = doc["spec"]["tfReplicaSpecs"].pop("Worker")
    doc["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"]["restartPolicy"] = "Always"
    doc["status"] = {"conditions": []}
    doc["metadata"].update(uid="u", resourceVersion="7")
    out, notes = convert_document(doc)
    assert out["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 2,
                                        "suspend": True,
                                        "schedulingPolicy": {
                                            "minAvailable": 2, "queue": "q",
                                            "scheduleTimeoutSeconds": 5,
                                            "minResources": {"cpu": 4, "memory": "8Gi"}}}
    assert out["spec"]["successPolicy"] == "AllWorkers"
    assert list(out["spec"]["replicaSpecs"]) == ["Worker"]
    assert "restartPolicy" not in out["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
    assert out["metadata"] == {"name": "j"} and "status" not in out
    dropped = {n.path for n in notes if n.kind is NoteKind.DROPPED}
    assert {"spec.enableDynamicWorker",
            "spec.tfReplicaSpecs.worker.template.spec.restartPolicy", "status",
            "metadata.uid", "metadata.resourceVersion"} <= dropped
    split_jobs([out], PLUGINS)  # valid


def test_refusals_name_every_field_path_at_once() -> None:
    doc = _tfjob_v1(cleanPodPolicy="All", runPolicy={"cleanPodPolicy": "None"}, elastic=True)
    doc["spec"]["tfReplicaSpecs"]["Launcher"] = {"replicas": 1}
    doc["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    with pytest.raises(SpecInvalid) as exc:
        convert_document(doc)
    assert {e.path for e in exc.value.errors} == {
        "spec.cleanPodPolicy", "spec.elastic", "spec.tfReplicaSpecs.Launcher",
        "spec.tfReplicaSpecs.Worker.restartPolicy"}


def _tf_v1alpha1(*entries: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "TFJob", "metadata": {"name": "old"},
            "spec": {"replicaSpecs": list(entries), **spec}}


def _entry(rtype: str, **fields: Any) -> dict[str, Any]:
    return {"tfReplicaType": rtype, "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "tf:1"}], "restartPolicy": "OnFailure"}}, **fields}


def test_tf_v1alpha1_port_termination_policy_and_default_ps() -> None:
    doc = _tf_v1alpha1(_entry("MASTER", tfPort=3333), _entry("WORKER", replicas=2),
                       {"tfReplicaType": "PS", "replicas": 1, "isDefaultPS": True},
                       terminationPolicy={"chief": {"replicaName": "MASTER", "replicaIndex": 0}},
                       tfImage="tensorflow/tensorflow:1.5.0")
    out, notes = convert_document(doc)
    master = out["spec"]["replicaSpecs"]["Master"]
    assert master["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "tfjob-port", "containerPort": 3333}]
    job = split_jobs([out], PLUGINS).jobs[0]
    pods = {p["metadata"]["name"]: p for p in render(job).manifests() if p["kind"] == "Pod"}
    tf_config = json.loads(_env(pods["old-worker-0"], "tensorflow")["TF_CONFIG"])
    assert tf_config["cluster"]["master"] == ["old-master-0:3333"]
    assert _env(pods["old-ps-0"], "tensorflow")["TF_CONFIG"]  # the standard PS server
    assert {"spec.tfImage"} <= {n.path for n in notes if n.kind is NoteKind.DROPPED}


def test_tf_v1alpha1_termination_policy_other_than_the_rule_is_refused() -> None:
    doc = _tf_v1alpha1(_entry("MASTER"), _entry("WORKER", replicas=2),
                       terminationPolicy={"chief": {"replicaName": "WORKER", "replicaIndex": 1}})
    with pytest.raises(SpecInvalid) as exc:
        convert_document(doc)
    assert [e.path for e in exc.value.errors] == ["spec.terminationPolicy.chief"]


def test_cli_prints_yaml_notes_and_refuses_with_every_files_problems(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = FIXTURES / "caffe2-v1alpha1-redis.yaml"
    assert main(["convert", str(good), str(FIXTURES / "tfjob-v1-simple.yaml")]) == 0
    out, err = capsys.readouterr()
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["Service", "Pod", "Caffe2Job", "TfJob"]
    assert f"{good}: Caffe2Job/example-job: changed: spec.backendSpecs:" in err
    assert f"{good}: unchanged: Service/redis-service, Pod/redis" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_tf_v1alpha1(_entry("EVALUATOR"))))
    tune = FIXTURES / "mxjob-v1-tune.yaml"
    assert main(["convert", str(bad), str(tune)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{bad}: spec.replicaSpecs[0].tfReplicaType: 'EVALUATOR' has no" in err
    assert f"{tune}: spec.mxReplicaSpecs.TunerTracker:" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "seeds").glob("*.yaml")))
def test_seed_manifests_convert_to_jobs_the_api_server_accepts(name: str) -> None:
    """The v1alpha1 manifests of the seed texts (tests/fixtures/kubeflow/seeds): the GPU of
    Kubernetes 1.7 (`alpha.kubernetes.io/nvidia-gpu`, refused by today's API server) becomes
    `nvidia.com/gpu`; `kubectl get -o yaml`'s Go field names (`RuntimeId`, `IsDefaultPS`) are
    read as their json names."""
    source = read_documents(FIXTURES / "seeds" / name)
    result = convert_documents(copy.deepcopy(source), source=name)
    [job] = split_jobs(result.documents, PLUGINS, name).jobs
    text = json.dumps(result.documents, default=str)
    assert "alpha.kubernetes.io/nvidia-gpu" not in text
    if "alpha.kubernetes.io/nvidia-gpu" in json.dumps(source, default=str):
        assert '"nvidia.com/gpu": 1' in text
    assert "RuntimeId" not in text and "IsDefaultPS" not in text
    assert [m for m in render(job).manifests() if m["kind"] == "Pod"]
