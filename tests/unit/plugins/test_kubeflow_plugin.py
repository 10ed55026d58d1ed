"""The `kubeflow` plugin: off unless enabled; enabled, Kubeflow's TFJob and MXJob manifests
(the upstream examples of tests/fixtures/kubeflow) are read as they are, their CRDs are in
kubeflow.org with Kubeflow's field names, and their pods get the same environment as the
converted trainjobs job plus Kubeflow's labels."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from trainjobs_kubeflow import KUBEFLOW_LABELS, plugin

from tests.unit.convert.test_convert import FIXTURES
from tests.unit.helpers import DISABLE_AUTOLOAD_ENV, plugin_env, render
from trainjobs.convert import convert_documents
from trainjobs.core.validation import split_jobs
from trainjobs.crdgen import crd_file_name, crd_for, render_crd_yaml
from trainjobs.errors import PluginError, SpecInvalid
from trainjobs.operator.large_jobs import OFFLOAD_REPLICAS, requested_replicas
from trainjobs.plugin.manager import ENABLE_PLUGINS_ENV, PluginManager, load_plugins
from trainjobs.yamlio import read_documents

KINDS = ("TFJob", "MXJob")


@pytest.fixture(scope="module")
def enabled() -> PluginManager:
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1"}):
        return load_plugins(enable=["kubeflow"])


def test_off_unless_enabled() -> None:
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1", ENABLE_PLUGINS_ENV: None}):
        assert not set(KINDS) & set(load_plugins().frameworks)
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1", ENABLE_PLUGINS_ENV: "kubeflow"}):
        assert set(KINDS) <= set(load_plugins().frameworks)
    with pytest.raises(PluginError, match="cannot enable kubeflw"):
        load_plugins(enable=["kubeflw"])


def test_crds_are_kubeflows(enabled: PluginManager) -> None:
    for kind, field in (("TFJob", "tfReplicaSpecs"), ("MXJob", "mxReplicaSpecs")):
        framework = enabled.framework_for(kind)
        assert framework is not None
        crd = crd_for(framework)
        assert crd["metadata"]["name"] == f"{framework.plural}.kubeflow.org"
        assert crd_file_name(framework) == f"kubeflow.org_{framework.plural}.yaml"
        version = crd["spec"]["versions"][0]
        assert (crd["spec"]["group"], version["name"]) == ("kubeflow.org", "v1")
        schema = version["schema"]["openAPIV3Schema"]
        spec = schema["properties"]["spec"]
        assert field in spec["properties"] and "replicaSpecs" not in spec["properties"]
        assert spec["required"] == [field]
        assert spec["properties"]["runPolicy"]["default"] == {}
        status = schema["properties"]["status"]["properties"]
        assert "lastReconcileTime" in status
        assert "lastUpdateTime" in status["conditions"]["items"]["properties"]
        # The reported progress and its columns, as on trainjobs' own kinds (issue 37.4).
        assert "etaSeconds" in status["progress"]["properties"]
        columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
        assert (columns["Progress"], columns["ETA"]) == (
            ".status.progress.summary", ".status.progress.etaSeconds")
        text = render_crd_yaml(framework)
        assert f"self.spec.{field}" in text and "self.spec.replicaSpecs" not in text


def _pods(rendered: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in rendered if m["kind"] == "Pod"}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for c in pod["spec"]["containers"] for e in c.get("env", [])}


@pytest.mark.parametrize("name", ["tfjob-v1-dist_mnist.yaml", "tfjob-v1-simple.yaml",
                                  "mxjob-v1-dist.yaml", "mx-v1beta1-dist_gpu.yaml"])
def test_kubeflow_manifest_read_as_it_is_same_environment_as_converted(
        enabled: PluginManager, name: str) -> None:
    docs = read_documents(FIXTURES / name)
    docs[0]["apiVersion"] = "kubeflow.org/v1"  # (one example is v1beta1: same fields)
    [job] = split_jobs(copy.deepcopy(docs), enabled).jobs
    assert job.kind in KINDS and job.api_version == "kubeflow.org/v1"
    served = _pods(render(job, enabled).manifests())
    [converted] = split_jobs(convert_documents(copy.deepcopy(docs)).documents, enabled).jobs
    expected = _pods(render(converted, enabled).manifests())
    assert list(served) == list(expected)
    for pod_name, pod in served.items():
        assert _env(pod) == _env(expected[pod_name])
        labels = pod["metadata"]["labels"]
        assert labels["training.kubeflow.org/job-name"] == job.name
        assert labels["training.kubeflow.org/replica-index"] == pod_name.rsplit("-", 1)[1]
        assert set(KUBEFLOW_LABELS) - {"training.kubeflow.org/job-role"} <= set(labels)
        assert pod["metadata"]["ownerReferences"][0]["apiVersion"] == "kubeflow.org/v1"
    roles = [n for n, p in served.items()
             if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "master"]
    # training-operator's IsMasterRole: MXJob every Server; TFJob the Chief, else Worker 0.
    expected_roles = ([n for n in served if "-server-" in n] if job.kind == "MXJob"
                      else [next(iter(served))])
    assert roles == expected_roles and roles


@pytest.mark.parametrize("name", ["tfjob-v1-dist_mnist.yaml", "mxjob-v1-dist.yaml"])
def test_services_carry_training_operators_labels(enabled: PluginManager, name: str) -> None:
    """training-operator's CreateNewService: operator-name, job-name, replica-type (lower
    case), replica-index; no job-role (only its pods get one). The selector stays trainjobs'."""
    [job] = split_jobs(read_documents(FIXTURES / name), enabled).jobs
    rendered = render(job, enabled).manifests()
    services = {m["metadata"]["name"]: m for m in rendered if m["kind"] == "Service"}
    assert services and set(services) == set(_pods(rendered))
    operator = "tfjob-controller" if job.kind == "TFJob" else "mxjob-controller"
    for svc_name, svc in services.items():
        labels = svc["metadata"]["labels"]
        rtype, index = svc_name.removeprefix(f"{job.name}-").rsplit("-", 1)
        assert {k: v for k, v in labels.items() if k.startswith("training.kubeflow.org/")} == {
            "training.kubeflow.org/operator-name": operator,
            "training.kubeflow.org/job-name": job.name,
            "training.kubeflow.org/replica-type": rtype,
            "training.kubeflow.org/replica-index": index}
        assert not any(k.startswith("training.kubeflow.org/") for k in svc["spec"]["selector"])


@pytest.mark.parametrize(("specs", "masters"), [
    ({"Chief": 1, "Worker": 2}, ["t-chief-0"]),
    ({"Master": 1, "Worker": 2, "PS": 1}, ["t-master-0"]),
    ({"Chief": 0, "Worker": 2}, []),  # a Chief key decides, even with no replicas
    ({"Worker": 2, "PS": 1}, ["t-worker-0"]),
])
def test_tfjob_master_role_as_training_operator(enabled: PluginManager, specs: dict[str, int],
                                                masters: list[str]) -> None:
    doc = yaml.safe_load((FIXTURES / "tfjob-v1-simple.yaml").read_text())
    worker = doc["spec"]["tfReplicaSpecs"]["Worker"]
    doc["metadata"]["name"] = "t"
    doc["spec"]["tfReplicaSpecs"] = {k: {**copy.deepcopy(worker), "replicas": n}
                                     for k, n in specs.items()}
    doc["spec"]["successPolicy"] = "AllWorkers"  # no matter for the label
    [job] = split_jobs([doc], enabled).jobs
    pods = _pods(render(job, enabled).manifests())
    assert [n for n, p in pods.items()
            if p["metadata"]["labels"].get("training.kubeflow.org/job-role")] == masters


@pytest.mark.parametrize(("name", "field"), [("tfjob-v1-dist_mnist.yaml", "tfReplicaSpecs"),
                                           ("mxjob-v1-dist.yaml", "mxReplicaSpecs")])
def test_replica_keys_in_any_case_are_canonical_as_training_operators_defaulting(
        enabled: PluginManager, name: str, field: str) -> None:
    """`worker`, `PS` → `Worker`, `PS`: the job, its pods and their environment are those of the
    manifest with the canonical keys (training-operator's setTypeNameToCamelCase)."""
    doc = yaml.safe_load((FIXTURES / name).read_text())
    lowered = copy.deepcopy(doc)
    lowered["spec"][field] = {(k.lower() if i % 2 == 0 else k.upper()): v
                              for i, (k, v) in enumerate(doc["spec"][field].items())}
    assert set(lowered["spec"][field]) != set(doc["spec"][field])
    [job] = split_jobs([lowered], enabled).jobs
    [canonical] = split_jobs([copy.deepcopy(doc)], enabled).jobs
    assert list(job.spec.replica_specs) == list(canonical.spec.replica_specs)
    assert render(job, enabled).manifests() == render(canonical, enabled).manifests()
    framework = enabled.framework_for(doc["kind"])
    assert framework is not None and framework.replica_type("worker") is not None
    both = copy.deepcopy(doc)
    both["spec"][field]["worker"] = copy.deepcopy(doc["spec"][field]["Worker"])
    with pytest.raises(SpecInvalid, match="name the same replica type"):
        split_jobs([both], enabled)


def test_refusals_in_kubeflows_terms(enabled: PluginManager) -> None:
    doc = yaml.safe_load((FIXTURES / "tfjob-v1-simple.yaml").read_text())
    worker = doc["spec"]["tfReplicaSpecs"]["Worker"]
    worker["replicas"] = -1
    worker["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    doc["spec"]["tfReplicaSpecs"]["Launcher"] = copy.deepcopy(worker)
    with pytest.raises(SpecInvalid) as exc:
        split_jobs([doc], enabled)
    paths = {e.path for e in exc.value.errors}
    assert paths == {"spec.tfReplicaSpecs.Worker.replicas", "spec.tfReplicaSpecs.Launcher",
                     "spec.tfReplicaSpecs.Launcher.replicas",
                     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy",
                     "spec.tfReplicaSpecs.Launcher.template.spec.containers[0]"
                     ".imagePullPolicyy"}
    tune = read_documents(FIXTURES / "mxjob-v1-tune.yaml")
    with pytest.raises(SpecInvalid) as exc:
        split_jobs(tune, enabled)
    assert "spec.mxReplicaSpecs.TunerTracker" in {e.path for e in exc.value.errors}


def test_status_gets_kubeflows_fields(enabled: PluginManager) -> None:
    [job] = split_jobs(read_documents(FIXTURES / "tfjob-v1-simple.yaml"), enabled).jobs
    framework = enabled.framework_for("TFJob")
    assert framework is not None
    status: dict[str, Any] = {"state": "Running", "startTime": "2026-01-01T00:00:01Z",
                              "conditions": [
        {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}]}
    again = copy.deepcopy(status)
    enabled.adjust_status(job, framework, status)
    assert [c["lastUpdateTime"] for c in status["conditions"]] == [
        "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"]
    # The hook's determinism rule: the time comes from the status, not the clock.
    assert status["lastReconcileTime"] == "2026-01-01T00:00:05Z" and status["state"] == "Running"
    enabled.adjust_status(job, framework, again)
    assert again == status
    ended = {"completionTime": "2026-01-01T01:00:00+00:00", "conditions": []}
    enabled.adjust_status(job, framework, ended)
    assert ended["lastReconcileTime"] == "2026-01-01T01:00:00Z"
    empty: dict[str, Any] = {"conditions": []}
    enabled.adjust_status(job, framework, empty)
    assert empty == {"conditions": []}  # no time known: none invented
    other: dict[str, Any] = {"state": "Running"}
    plugin.trainjobs_adjust_status(job=job.model_copy(update={"kind": "TfJob"}),
                                   framework=framework, status=other)
    assert other == {"state": "Running"}  # not its kind: untouched
    assert json.dumps(status)  # plain data, as the operator sends it


def test_chart_kubeflow_crds_are_up_to_date(enabled: PluginManager) -> None:
    chart = FIXTURES.parents[2] / "charts" / "trainjobs" / "kubeflow-crds"
    for kind in KINDS:
        framework = enabled.framework_for(kind)
        assert framework is not None
        path = chart / crd_file_name(framework)
        assert path.read_text() == render_crd_yaml(framework), (
            f"{path} is stale: regenerate with TRAINJOBS_ENABLE_PLUGINS=kubeflow trainjobs crds")


def test_a_large_kubeflow_job_is_counted_as_large_before_it_is_validated(
        enabled: PluginManager) -> None:
    """The operator validates a job of more than OFFLOAD_REPLICAS off the event loop, deciding
    from the raw object: a Kubeflow kind's replicas are under its own field (tfReplicaSpecs),
    and a count that is not an int is not trusted."""
    framework = enabled.framework_for("TFJob")
    assert framework is not None
    raw = {"spec": {"tfReplicaSpecs": {"Chief": {"replicas": 1}, "PS": {},
                                       "Worker": {"replicas": OFFLOAD_REPLICAS},
                                       "Evaluator": {"replicas": "9"}}}}
    assert requested_replicas(raw, framework.replica_specs_field) == OFFLOAD_REPLICAS + 2
    assert requested_replicas(raw, "replicaSpecs") == 0


@pytest.mark.parametrize(("name", "saver"), [("tfjob-v1-dist_mnist.yaml", "Chief"),
                                           ("mxjob-v1-dist.yaml", "Worker")])
def test_checkpoint_replica_as_the_trainjobs_kind(enabled: PluginManager, name: str,
                                                  saver: str) -> None:
    """Kubeflow's TFJob and MXJob ask the replica TfJob and MxJob would (issue 38)."""
    doc = yaml.safe_load((FIXTURES / name).read_text())
    [job] = split_jobs([doc], enabled).jobs
    framework = enabled.framework_for(doc["kind"])
    assert framework is not None
    found = enabled.checkpoint_replica(job, framework)
    assert found is not None and found.index == 0
    rtype = framework.replica_type(found.type)
    assert rtype is not None and rtype.name == saver
    assert found.type in job.spec.replica_specs
