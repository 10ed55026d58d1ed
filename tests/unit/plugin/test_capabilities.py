"""Feature plugins act on what a kind declares (`Framework.capabilities`), never on its name:
Kubeflow's TFJob gets TensorBoard and the default PS server exactly as TfJob does, and a
third party's kind gets them, and the managed Redis, by declaring the same capabilities."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import Field
from trainjobs_features.managed_redis import REDIS_IMAGE
from trainjobs_features.tf_ps_server import PS_SERVER_PROGRAM

from tests.unit.helpers import (
    DISABLE_AUTOLOAD_ENV,
    Doc,
    container,
    env_values,
    named,
    plugin_env,
    render,
    replica,
    template,
)
from trainjobs.core.validation import split_jobs
from trainjobs.crdgen import render_crd_yaml
from trainjobs.errors import SpecInvalid
from trainjobs.plugin import (
    Capability,
    Framework,
    FrameworkPlugin,
    Job,
    JobSpec,
    ParameterServers,
    RedisRendezvous,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaType,
    TensorBoard,
    TensorBoardSpec,
)
from trainjobs.plugin.manager import LoadedPlugin, PluginManager, load_plugins

BOARD = {"logDir": "/logs", "serviceType": "NodePort"}


@pytest.fixture(scope="module")
def enabled() -> PluginManager:
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1"}):
        return load_plugins(enable=["kubeflow"])


def _tf(api_version: str, kind: str, field: str, **spec: Any) -> Doc:
    """The same job as a TfJob (replicaSpecs) and a Kubeflow TFJob (tfReplicaSpecs): a Chief,
    two Workers and two PS without a template."""
    specs = {"Chief": replica(1, template(container("tensorflow"))),
             "Worker": replica(2, template(container("tensorflow"))),
             "PS": {"replicas": 2}}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "tf"},
            "spec": {field: specs, **spec}}


def _parse(doc: Doc, plugins: PluginManager) -> Job:
    [job] = split_jobs([copy.deepcopy(doc)], plugins).jobs
    return job


def _extras(job: Job, plugins: PluginManager,
            config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The extra objects, without what names the job's kind (ownerReferences, labels)."""
    found = []
    for obj in render(job, plugins, controller_config=config).extras:
        obj = copy.deepcopy(obj)
        del obj["metadata"]["ownerReferences"]
        obj["metadata"]["labels"].pop("trainjobs.io/kind", None)
        found.append(obj)
    return found


def test_kubeflow_tfjob_gets_tensorboard_like_tfjob(enabled: PluginManager) -> None:
    ours = _parse(_tf("trainjobs.io/v1alpha1", "TfJob", "replicaSpecs", tensorboard=BOARD),
                  enabled)
    kubeflow = _parse(_tf("kubeflow.org/v1", "TFJob", "tfReplicaSpecs", tensorboard=BOARD),
                      enabled)
    extras = _extras(kubeflow, enabled)
    assert [(o["kind"], o["metadata"]["name"]) for o in extras] == [
        ("Deployment", "tf-tensorboard"), ("Service", "tf-tensorboard")]
    assert extras == _extras(ours, enabled)
    assert extras[1]["spec"]["type"] == "NodePort"
    without = _parse(_tf("kubeflow.org/v1", "TFJob", "tfReplicaSpecs"), enabled)
    assert _extras(without, enabled) == []


def test_kubeflow_tfjob_ps_without_template_gets_the_default_ps_server(
        enabled: PluginManager) -> None:
    config = {"tfImage": "mirror.example/tensorflow:2"}
    job = _parse(_tf("kubeflow.org/v1", "TFJob", "tfReplicaSpecs"), enabled)
    pods = render(job, enabled, controller_config=config).pods
    for i in (0, 1):
        server = named(pods[f"tf-ps-{i}"]["spec"]["containers"], "tensorflow")
        assert server["image"] == "mirror.example/tensorflow:2"
        assert server["command"] == ["python", "-u", "-c", PS_SERVER_PROGRAM]
        assert f'"task":{{"type":"ps","index":{i}}}' in env_values(server)["TF_CONFIG"]
    ours = _parse(_tf("trainjobs.io/v1alpha1", "TfJob", "replicaSpecs"), enabled)
    assert [c["image"] for c in render(ours, enabled, controller_config=config)
            .pods["tf-ps-0"]["spec"]["containers"]] == ["mirror.example/tensorflow:2"]


def test_kubeflow_tfjob_crd_keeps_tensorboard_and_its_name_rule(enabled: PluginManager) -> None:
    framework = enabled.framework_for("TFJob")
    assert framework is not None and framework.capability(TensorBoard) == TensorBoard()
    text = render_crd_yaml(framework)
    assert "tensorboard:" in text and "!has(self.spec.tensorboard)" in text
    assert "tfReplicaSpecs.PS.template is required" not in text


# A third party's kind, declaring the capabilities -------------------------------------------


class WidgetSpec(JobSpec):
    tensorboard: TensorBoardSpec | None = None
    redis_host: str = Field(default="")


def _widget(capabilities: tuple[Capability, ...]) -> Framework:
    return Framework(
        kind="WidgetJob", plural="widgetjobs", short_names=(), name="widget",
        replica_types=(ReplicaType("Worker", 1, None),
                       ReplicaType("Server", 0, None, container_optional=True)),
        container_name="widget", default_port=7000, spec_model=WidgetSpec,
        capabilities=capabilities)


def _wants_redis(job: Job) -> bool:
    spec: WidgetSpec = job.spec  # type: ignore[assignment]
    return not spec.redis_host


class WidgetPlugin(FrameworkPlugin):
    def __init__(self, framework: Framework) -> None:
        self.framework = framework  # type: ignore[misc]

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> ReplicaEnv | None:
        return None

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        return False


def _with_widget(capabilities: tuple[Capability, ...]) -> PluginManager:
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1"}):
        return load_plugins(extra=[(WidgetPlugin(_widget(capabilities)), LoadedPlugin(
            "widget", __name__, "tests", "0"))])


WIDGET: Doc = {"apiVersion": "trainjobs.io/v1alpha1", "kind": "WidgetJob",
               "metadata": {"name": "w"},
               "spec": {"replicaSpecs": {"Worker": replica(2, template(container("widget"))),
                                         "Server": {"replicas": 1}},
                        "tensorboard": {"logDir": "/logs"}}}


def test_a_third_party_kind_gets_each_feature_by_declaring_its_capability() -> None:
    declared = _with_widget((TensorBoard(), ParameterServers("Server"),
                             RedisRendezvous(managed=_wants_redis)))
    rendered = render(_parse(WIDGET, declared), declared)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered.extras) == [
        ("Deployment", "w-tensorboard"), ("Pod", "w-redis"), ("Service", "w-redis"),
        ("Service", "w-tensorboard")]
    redis = next(o for o in rendered.extras if o["kind"] == "Pod")
    assert redis["spec"]["containers"][0]["image"] == REDIS_IMAGE
    worker = named(rendered.pods["w-worker-0"]["spec"]["containers"], "widget")
    assert env_values(worker) == {"REDIS_HOST": "w-redis", "REDIS_PORT": "6379"}
    server = rendered.pods["w-server-0"]["spec"]["containers"]
    assert [c["name"] for c in server] == ["widget"]
    assert server[0]["command"] == ["python", "-u", "-c", PS_SERVER_PROGRAM]
    own_redis = copy.deepcopy(WIDGET)
    own_redis["spec"]["redisHost"] = "redis.example"
    assert {o["metadata"]["name"] for o in render(_parse(own_redis, declared), declared)
            .extras} == {"w-tensorboard"}


def test_the_same_kind_without_capabilities_gets_none_of_them() -> None:
    bare = _with_widget(())
    with pytest.raises(SpecInvalid) as refused:  # no plugin supplies the Server's container
        _parse(WIDGET, bare)
    assert "no installed plugin supplies a 'widget' container" in str(refused.value)
    doc = copy.deepcopy(WIDGET)
    del doc["spec"]["replicaSpecs"]["Server"]
    rendered = render(_parse(doc, bare), bare)
    assert rendered.extras == []
    assert "REDIS_HOST" not in env_values(
        named(rendered.pods["w-worker-0"]["spec"]["containers"], "widget"))
