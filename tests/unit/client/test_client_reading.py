"""Reading jobs is cheap, and validation sees the operator's controller config (issue 24.6).

The client's `list`, `watch` and `wait` turn every job the API server returns into a `Job` on
every event; rendering a job's pods costs with the square of its replicas (every pod's
TF_CONFIG lists every peer), so reading must parse without rendering. The operator validates
a job by rendering it once: with the controller config it renders the real pods with, so the
plugins that read that config are checked on the pods it creates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.helpers import DISABLE_AUTOLOAD_ENV, PLUGINS, plugin_env
from trainjobs.client.aio import AsyncClient, job_from_api
from trainjobs.core import render
from trainjobs.core.validation import parse_job
from trainjobs.kube import ApiNotFound, Resource
from trainjobs.plugin import Job, RenderContext, Replica, hookimpl
from trainjobs.plugin.manager import LoadedPlugin, load_plugins


def tfjob(name: str, workers: int = 3) -> dict[str, Any]:
    tmpl = {"spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}}
    return {"apiVersion": "trainjobs.io/v1alpha1", "kind": "TfJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"replicaSpecs": {"Chief": {"replicas": 1, "template": tmpl},
                                      "Worker": {"replicas": workers, "template": tmpl}}},
            "status": {"state": "Running", "conditions": [
                {"type": "Running", "status": "True", "reason": "Running"}]}}


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every job whose pods get rendered while the test runs."""
    seen: list[str] = []
    original = render.Rendering.replicas

    def counting(self: render.Rendering) -> Iterator[Any]:
        seen.append(self.job.metadata.name)
        return original(self)

    monkeypatch.setattr(render.Rendering, "replicas", counting)
    return seen


class ListingKube:
    """The transport's `list` for a client: the TfJobs given; no other kind installed."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    async def list(self, resource: Resource, namespace: str | None, *,
                   label_selector: str = "", field_selector: str = ""
                   ) -> tuple[list[dict[str, Any]], str]:
        if resource.kind != "TfJob":
            raise ApiNotFound(404, "Not Found")
        return [{k: v for k, v in i.items() if k != "kind"} for i in self.items], "9"


def test_listing_100_jobs_renders_none_of_them(renders: list[str]) -> None:
    client = AsyncClient(namespace="ns", plugins=PLUGINS)
    client._kube = ListingKube([tfjob(f"job-{i:03d}") for i in range(100)])  # type: ignore[assignment]
    jobs = asyncio.run(client.list())
    assert [j.name for j in jobs] == [f"job-{i:03d}" for i in range(100)]
    assert all(j.spec.replica_specs["Worker"].replicas == 3 for j in jobs)
    assert all(j.status.state == "Running" for j in jobs)
    assert renders == []
    # The counter does count: validating a job for the operator renders it once.
    parse_job(tfjob("checked"), PLUGINS)
    assert renders == ["checked"]


def test_a_watched_version_is_read_without_rendering(renders: list[str]) -> None:
    job = job_from_api(tfjob("watched", workers=200), PLUGINS)
    assert job.spec.replica_specs["Worker"].replicas == 200
    assert renders == []


def test_reading_still_refuses_what_the_models_refuse() -> None:
    """Without rendering, the model and replica rules still apply: a job the operator refuses
    for them reads with an empty spec, as the operator reads it."""
    raw = tfjob("bad")
    raw["spec"]["replicaSpecs"]["Chief"]["replicas"] = 2  # a TfJob has at most one Chief
    assert job_from_api(raw, PLUGINS).spec.replica_specs == {}


class ConfigReader:
    """A feature plugin that reads the controller config while rendering, as the
    accelerators, gang and tf_ps_server plugins do."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    @hookimpl
    def trainjobs_adjust_pod(self, job: Job, replica: Replica, pod: dict[str, Any],
                             ctx: RenderContext) -> None:
        self.seen.append(dict(ctx.controller_config))


def test_validation_renders_with_the_controller_config_it_is_given() -> None:
    reader = ConfigReader()
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1"}):
        plugins = load_plugins(extra=[(reader, LoadedPlugin("config-reader", "test", "test",
                                                            "0"))])
    config = {"tfImage": "registry.example/tf:2", "accelerators": {"nvidia.com/gpu": {}}}
    parse_job(tfjob("configured"), plugins, controller_config=config)
    assert reader.seen == [config] * 4  # the Chief and 3 Workers, each with the config
    reader.seen.clear()
    parse_job(tfjob("unconfigured"), plugins)
    assert reader.seen == [{}] * 4


def test_a_plugin_reading_the_config_is_validated_on_the_pods_it_will_shape() -> None:
    """The default PS server (tf_ps_server) takes its image from the controller config: the
    pods validation renders are the operator's pods, image included."""
    seen: list[str] = []
    original = render.Rendering.replicas

    def images(self: render.Rendering) -> Iterator[Any]:
        for name, replica, pod, service in original(self):
            seen.append(pod["spec"]["containers"][0]["image"])
            yield name, replica, pod, service

    raw = tfjob("ps")
    raw["spec"]["replicaSpecs"]["PS"] = {"replicas": 1}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(render.Rendering, "replicas", images)
        parse_job(raw, PLUGINS, controller_config={"tfImage": "registry.example/tf:2"})
    assert "registry.example/tf:2" in seen


def test_the_operator_validates_with_its_own_controller_config() -> None:
    """The controller's parse (validation, cached per generation) passes the controller
    config it renders with, not an empty one."""
    from trainjobs.operator.cache import reduce_job
    from trainjobs.operator.controller import Controller, ControllerSettings
    from trainjobs.operator.memory import Expectations, JobMemory

    reader = ConfigReader()
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1"}):
        plugins = load_plugins(extra=[(reader, LoadedPlugin("config-reader", "test", "test",
                                                            "0"))])
    config = {"tfImage": "registry.example/tf:2"}
    controller = Controller(None, plugins,  # type: ignore[arg-type]  # parse calls no API
                            ControllerSettings(controller_config=config))
    memory = JobMemory(reduce_job(tfjob("op")), Expectations(1.0, lambda: 0.0))
    parsed = asyncio.run(controller._parse("ns/op", memory))
    assert parsed.job is not None
    assert reader.seen == [config] * 4
