"""Builders and readers shared by the unit tests: job documents, parsing and rendering.

Kept as plain functions (not fixtures) so hypothesis strategies and parametrized tests can use
them directly. Everything renders with the built-in plugins only (see `builtin_plugins`), so a
third-party plugin installed in the same environment cannot change what these tests see.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import yaml

from trainjobs.api.models import Job
from trainjobs.core.render import RenderedJob, render_job
from trainjobs.core.validation import parse_job
from trainjobs.errors import SpecInvalid
from trainjobs.plugin.manager import (
    DISABLE_AUTOLOAD_ENV,
    DISABLE_PLUGINS_ENV,
    PluginManager,
    load_plugins,
)
from trainjobs.plugin.types import ClusterLayout, Framework

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(REPO.glob("examples/*/*.yaml"))
GOLDEN_DIR = REPO / "tests" / "golden"
API_VERSION = "trainjobs.io/v1alpha1"

Doc = dict[str, Any]


@contextmanager
def plugin_env(**values: str | None) -> Iterator[None]:
    """Sets (or, with None, removes) environment variables for the duration of the block."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def builtin_plugins() -> PluginManager:
    """The plugins shipped with trainjobs, loaded through the entry-point group, and no others."""
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1", DISABLE_PLUGINS_ENV: None}):
        return load_plugins()


PLUGINS = builtin_plugins()


def framework_of(kind: str, plugins: PluginManager = PLUGINS) -> Framework:
    framework = plugins.framework_for(kind)
    assert framework is not None, f"{kind} is not installed"
    return framework


def load_doc(path: Path) -> Doc:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    return doc


def parse(doc: Doc, plugins: PluginManager = PLUGINS) -> Job:
    return parse_job(copy.deepcopy(doc), plugins)


def render(
    doc: Doc | Job,
    plugins: PluginManager = PLUGINS,
    backend: Literal["kubernetes", "local"] = "kubernetes",
    layout: ClusterLayout | None = None,
    controller_config: Mapping[str, Any] | None = None,
) -> RenderedJob:
    job = doc if isinstance(doc, Job) else parse(doc, plugins)
    return render_job(job, framework_of(job.kind, plugins), plugins, backend=backend,
                      layout=layout, controller_config=controller_config)


def errors_of(doc: Any, plugins: PluginManager = PLUGINS) -> dict[str, str]:
    """The problems `parse_job` reports, as {path: message}; fails if the job is accepted."""
    try:
        parse_job(copy.deepcopy(doc), plugins)
    except SpecInvalid as exc:
        return {e.path: e.message for e in exc.errors}
    raise AssertionError("the job was accepted, expected SpecInvalid")


def container(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": f"example.invalid/{name}:1", **fields}


def template(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(containers), **spec}}


def replica(replicas: int, tmpl: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"replicas": replicas, "template": tmpl, **fields}


def job_doc(kind: str, name: str, replica_specs: dict[str, Any], **spec: Any) -> Doc:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name},
            "spec": {"replicaSpecs": replica_specs, **spec}}


def mxjob(name: str = "mx", scheduler: int = 1, server: int = 2, worker: int = 3) -> Doc:
    specs = {
        "Scheduler": replica(scheduler, template(container("mxnet"))),
        "Server": replica(server, template(container("mxnet"))),
        "Worker": replica(worker, template(container("mxnet"))),
    }
    return job_doc("MxJob", name, specs)


def tfjob(name: str = "tf", **counts: int) -> Doc:
    """A TfJob with the given replica counts by key, e.g. tfjob(Chief=1, Worker=2, PS=1)."""
    specs = {key: replica(n, template(container("tensorflow"))) for key, n in counts.items()}
    return job_doc("TfJob", name, specs)


def caffe2job(name: str = "c2", workers: int = 2, **backend: Any) -> Doc:
    doc = job_doc("Caffe2Job", name, {"Worker": replica(workers, template(container("caffe2")))})
    if backend:
        doc["spec"]["backend"] = backend
    return doc


def env_list(container_obj: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = container_obj.get("env", [])
    return env


def env_values(container_obj: dict[str, Any]) -> dict[str, str]:
    """name -> value of a container's plain (value, not valueFrom) variables."""
    return {e["name"]: e["value"] for e in env_list(container_obj) if "value" in e}


def containers_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers of a Pod, or of the pod template of a Deployment."""
    spec = obj["spec"]
    if obj["kind"] == "Pod":
        pods: list[dict[str, Any]] = spec["containers"]
        return pods
    templ: list[dict[str, Any]] = spec["template"]["spec"]["containers"]
    return templ


def named(containers: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for c in containers:
        if c["name"] == name:
            return c
    raise AssertionError(f"no container named {name!r} in {[c['name'] for c in containers]}")
