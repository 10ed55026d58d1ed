"""The example third-party plugin (examples/plugins/trainjobs-pytorch) with the real core, fast.

The package is loaded from its source tree and registered beside the built-ins (not installed:
installing it here would change what every other test sees). Its installed, end-to-end
behaviour — entry point, CLI, CRD on a real control plane, operator, real torch.distributed
training — is tests/plugins/test_third_party_plugin.py's.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.unit.helpers import (
    container,
    env_list,
    env_values,
    errors_of,
    named,
    parse,
    plugin_env,
    render,
)
from trainjobs.crdgen import crd_file_name, crd_for
from trainjobs.local.runner import local_layout
from trainjobs.plugin.manager import (
    DISABLE_AUTOLOAD_ENV,
    DISABLE_PLUGINS_ENV,
    LoadedPlugin,
    PluginManager,
    load_plugins,
)
from trainjobs.plugin.types import ReplicaOutcome, ReplicaPhase

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "examples" / "plugins" / "trainjobs-pytorch"
EXAMPLE = PACKAGE / "examples" / "pytorch-gloo.yaml"
CONTRACT = ["MASTER_PORT", "PET_MASTER_PORT", "MASTER_ADDR", "PET_MASTER_ADDR", "WORLD_SIZE",
            "RANK", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_NNODES"]


@pytest.fixture(scope="module")
def pytorch() -> Iterator[ModuleType]:
    """The plugin's module, imported from its source tree."""
    init = PACKAGE / "src" / "trainjobs_pytorch" / "__init__.py"
    spec = importlib.util.spec_from_file_location("trainjobs_pytorch", init)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["trainjobs_pytorch"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("trainjobs_pytorch", None)


@pytest.fixture(scope="module")
def plugins(pytorch: ModuleType) -> PluginManager:
    """The built-ins plus the PyTorchJob plugin, registered as its entry point would be."""
    info = LoadedPlugin("pytorch", "trainjobs_pytorch:plugin", "trainjobs-pytorch", "0.1.0")
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1", DISABLE_PLUGINS_ENV: None}):
        return load_plugins(extra=[(pytorch.plugin, info)])


def example() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return doc


def test_the_example_renders_with_kubeflows_environment(plugins: PluginManager) -> None:
    doc = example()
    sidecar = container("log-shipper")
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(sidecar)
    rendered = render(doc, plugins)
    assert list(rendered.pods) == ["pytorch-gloo-master-0", "pytorch-gloo-worker-0",
                                   "pytorch-gloo-worker-1"]
    for rank, (name, pod) in enumerate(rendered.pods.items()):
        containers = pod["spec"]["containers"]
        for c in containers:  # every container, as Kubeflow's setPodEnv does
            assert [e["name"] for e in env_list(c)] == CONTRACT, c["name"]
            assert env_values(c) == {
                "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456",
                "MASTER_ADDR": "pytorch-gloo-master-0", "PET_MASTER_ADDR": "pytorch-gloo-master-0",
                "WORLD_SIZE": "3", "RANK": str(rank), "PET_NPROC_PER_NODE": "1",
                "PET_NODE_RANK": str(rank), "PET_NNODES": "3"}
        assert named(containers, "pytorch")["ports"] == [
            {"name": "pytorchjob-port", "containerPort": 23456}]
        assert rendered.services[name]["spec"]["ports"][0]["port"] == 23456
        role = pod["metadata"]["labels"].get("trainjobs.io/job-role")
        assert role == ("master" if rank == 0 else None)


def test_locally_the_master_is_a_loopback_port_and_gloo_uses_lo(plugins: PluginManager) -> None:
    job = parse(example(), plugins)
    layout = local_layout(job)
    rendered = render(job, plugins, backend="local", layout=layout)
    master = layout.of_type("Master")[0]
    for pod in rendered.pods.values():
        values = env_values(pod["spec"]["containers"][0])
        assert (values["MASTER_ADDR"], values["MASTER_PORT"]) == ("127.0.0.1", str(master.port))
        assert values["GLOO_SOCKET_IFNAME"] == "lo"


def test_nproc_per_node_scales_the_world(plugins: PluginManager) -> None:
    doc = example()
    doc["spec"]["nprocPerNode"] = "2"
    values = env_values(render(doc, plugins).pods["pytorch-gloo-worker-1"]["spec"]
                        ["containers"][0])
    assert (values["WORLD_SIZE"], values["PET_NNODES"], values["PET_NPROC_PER_NODE"],
            values["RANK"]) == ("6", "3", "2", "2")


def test_invalid_jobs_are_refused_with_paths(plugins: PluginManager) -> None:
    def with_(change: Any) -> dict[str, Any]:
        doc = example()
        change(doc["spec"])
        return doc

    specs = "spec.replicaSpecs"
    assert "at most 1" in errors_of(with_(lambda s: s["replicaSpecs"]["Master"].update(
        replicas=2)), plugins)[f"{specs}.Master.replicas"]
    assert errors_of(with_(lambda s: s["replicaSpecs"].pop("Master")), plugins)
    assert "spec.nprocPerNode" in errors_of(with_(lambda s: s.update(nprocPerNode="many")),
                                            plugins)
    elastic = errors_of(with_(lambda s: s["replicaSpecs"]["Worker"].update(
        elasticPolicy={"minReplicas": 1, "maxReplicas": 2})), plugins)
    assert "not supported" in elastic[f"{specs}.Worker.elasticPolicy"]

    def user_sets_rank(spec: dict[str, Any]) -> None:
        spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": "RANK", "value": "7"}]

    assert "RANK is set by trainjobs" in errors_of(with_(user_sets_rank), plugins)[
        f"{specs}.Worker.template.spec.containers[0].env"]


def test_the_master_decides_success(plugins: PluginManager) -> None:
    job = parse(example(), plugins)
    framework = plugins.framework_for("PyTorchJob")
    assert framework is not None
    replicas = list(render(job, plugins).replicas.values())
    master_done = [ReplicaOutcome(r, ReplicaPhase.SUCCEEDED if r.type == "Master" else
                                  ReplicaPhase.RUNNING) for r in replicas]
    workers_done = [ReplicaOutcome(r, ReplicaPhase.RUNNING if r.type == "Master" else
                                   ReplicaPhase.SUCCEEDED) for r in replicas]
    assert plugins.job_succeeded(job, framework, master_done) is True
    assert plugins.job_succeeded(job, framework, workers_done) is False


def test_its_crd(plugins: PluginManager) -> None:
    framework = plugins.framework_for("PyTorchJob")
    assert framework is not None and framework.package == "trainjobs-pytorch"
    crd = crd_for(framework)
    assert crd_file_name(framework) == "trainjobs.io_pytorchjobs.yaml"
    assert crd["metadata"]["annotations"]["trainjobs.io/plugin-package"] == "trainjobs-pytorch"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "PyTorchJob", "pytorchjobs", ["ptj"], ["trainjobs"])
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["nprocPerNode"]["pattern"] == "^(auto|cpu|gpu|[1-9][0-9]*)$"
    rules = {r["rule"] for r in spec["properties"]["replicaSpecs"]["x-kubernetes-validations"]}
    assert "'Master' in self" in rules


def test_the_example_is_not_picked_up_as_a_built_in_example() -> None:
    """Other tests run every examples/*/*.yaml with the built-ins only; this one needs the
    plugin, so it lives one level deeper."""
    assert EXAMPLE not in set(REPO.glob("examples/*/*.yaml"))
