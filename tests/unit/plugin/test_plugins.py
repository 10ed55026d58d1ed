"""The plugin system: entry-point loading, blocking, load errors, a third-party kind end to end,
and every hook documented and exercised.

Third-party plugins here are real distributions: a package and a `*.dist-info` with
`entry_points.txt`, written into a temporary directory put on `sys.path`, so
`importlib.metadata` finds them exactly as it finds a pip-installed plugin.
"""

from __future__ import annotations

import inspect
import itertools
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import trainjobs.plugin as plugin_api
from tests.unit.helpers import REPO, container, errors_of, job_doc, mxjob, replica, template
from trainjobs.api.models import Job
from trainjobs.core.render import render_job
from trainjobs.core.validation import parse_job
from trainjobs.crdgen import crd_file_name, crd_for
from trainjobs.errors import PluginError, SpecError, SpecInvalid
from trainjobs.plugin import hookspecs
from trainjobs.plugin.manager import (
    DISABLE_AUTOLOAD_ENV,
    DISABLE_PLUGINS_ENV,
    ENTRY_POINT_GROUP,
    OPT_IN_PLUGINS,
    LoadedPlugin,
    PluginManager,
    load_plugins,
)
from trainjobs.plugin.types import (
    Framework,
    ObjectStatus,
    OwnedResource,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
)

BUILTIN_FRAMEWORKS = {"mxnet": "MxJob", "tensorflow": "TfJob", "caffe2": "Caffe2Job"}
BUILTIN_FEATURES = {"accelerators", "tensorboard", "tf_ps_server", "managed_redis", "gang",
                    "coscheduling", "volcano"}

Install = Callable[..., Path]


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with autoload on and nothing blocked, whatever the caller's shell has."""
    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)
    monkeypatch.delenv(DISABLE_PLUGINS_ENV, raising=False)


_counter = itertools.count()


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Installs a throwaway distribution: `install(dist, source, entry_points) -> site dir`.

    `source` becomes the package's `__init__.py`; `entry_points` maps entry-point names of the
    `trainjobs` group to targets, where `{module}` stands for the package's unique name.
    """
    modules: list[str] = []

    def _install(dist: str, source: str, entry_points: dict[str, str],
                 version: str = "0.1.0") -> Path:
        module = f"tj_test_plugin_{next(_counter)}"
        site = tmp_path / f"site-{module}"
        (site / module).mkdir(parents=True)
        (site / module / "__init__.py").write_text(textwrap.dedent(source))
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = [f"[{ENTRY_POINT_GROUP}]"]
        lines += [f"{name} = {target.format(module=module)}"
                  for name, target in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        monkeypatch.syspath_prepend(str(site))
        modules.append(module)
        return site

    yield _install
    for module in modules:
        sys.modules.pop(module, None)


# A third-party kind, written the way the plugin author guide says: a FrameworkPlugin subclass.
PTJOB_SOURCE = """
from typing import Literal

from pydantic import Field

from trainjobs.plugin import (Framework, FrameworkPlugin, JobSpec, ReplicaEnv, ReplicaPhase,
                              ReplicaType, SpecError)


class PtJobSpec(JobSpec):
    backend: Literal["gloo", "nccl"] = Field(default="gloo", description="c10d backend.")


PTJOB = Framework(
    kind="PtJob",
    plural="ptjobs",
    short_names=("ptj",),
    name="pytorch",
    replica_types=(ReplicaType("Master", 1, 1), ReplicaType("Worker", 0, None)),
    container_name="pytorch",
    default_port=23456,
    spec_model=PtJobSpec,
    description="A PyTorch DDP job (test plugin).",
)


class PtJobPlugin(FrameworkPlugin):
    framework = PTJOB

    def validate(self, job):
        if job.spec.backend == "nccl":
            return [SpecError("spec.backend", "nccl needs GPUs, none requested")]
        return []

    def replica_env(self, job, replica, ctx):
        master = ctx.cluster.of_type("Master")[0]
        world = sum(r.replicas for r in job.spec.replica_specs.values())
        rank = 0 if replica.type == "Master" else replica.index + 1
        return ReplicaEnv({"MASTER_ADDR": master.host, "MASTER_PORT": str(master.port),
                           "WORLD_SIZE": str(world), "RANK": str(rank)})

    def succeeded(self, job, outcomes):
        return any(o.replica.type == "Master" and o.phase is ReplicaPhase.SUCCEEDED
                   for o in outcomes)


plugin = PtJobPlugin()
"""


def ptjob(name: str = "ptj", workers: int = 2, **spec: Any) -> dict[str, Any]:
    return job_doc("PtJob", name, {
        "Master": replica(1, template(container("pytorch"))),
        "Worker": replica(workers, template(container("pytorch"))),
    }, **spec)


# Built-ins ---------------------------------------------------------------------------------


def test_builtins_load_through_the_entry_point_group() -> None:
    manager = load_plugins()
    builtins = {p.name: p for p in manager.plugins if p.builtin}
    assert set(builtins) >= set(BUILTIN_FRAMEWORKS) | BUILTIN_FEATURES
    for name, plugin in builtins.items():
        assert plugin.package == "trainjobs"
        assert plugin.version
        assert plugin.kinds == ((BUILTIN_FRAMEWORKS[name],) if name in BUILTIN_FRAMEWORKS
                                else ())
    assert builtins["mxnet"].module == "trainjobs_mxnet:plugin"
    assert builtins["tensorboard"].module == "trainjobs_features.tensorboard"
    # Exactly the entry points the trainjobs distribution declares, nothing registered by hand.
    from importlib import metadata

    declared = {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
                if ep.dist is not None and ep.dist.name == "trainjobs"}
    assert declared == set(builtins) | OPT_IN_PLUGINS  # those load only when enabled
    assert not OPT_IN_PLUGINS & set(builtins)
    assert set(manager.frameworks) >= {"MxJob", "TfJob", "Caffe2Job"}
    for kind in ("MxJob", "TfJob", "Caffe2Job"):
        framework = manager.framework_for(kind)
        assert framework is not None and framework.package == "trainjobs"


def test_builtins_load_first_in_a_fixed_order(install: Install) -> None:
    install("aaa-first-by-name", "from trainjobs.plugin import hookimpl\n", {"aaa": "{module}"})
    manager = load_plugins()
    names = [p.name for p in manager.plugins]
    assert names[-1] == "aaa"
    assert all(p.builtin for p in manager.plugins[:-1])
    assert names[:-1] == sorted(names[:-1])
    assert [p.name for p in load_plugins().plugins] == names


def test_public_plugin_api_exports_exist() -> None:
    for name in plugin_api.__all__:
        assert getattr(plugin_api, name) is not None, name
    assert plugin_api.PLUGIN_API_VERSION


# Blocking ----------------------------------------------------------------------------------


def test_third_party_plugin_loads_with_its_package(install: Install) -> None:
    install("trainjobs-pytorch", PTJOB_SOURCE, {"pytorch": "{module}:plugin"}, version="1.2.3")
    manager = load_plugins()
    (loaded,) = [p for p in manager.plugins if p.name == "pytorch"]
    assert loaded.package == "trainjobs-pytorch"
    assert loaded.version == "1.2.3"
    assert loaded.kinds == ("PtJob",)
    assert not loaded.builtin
    framework = manager.framework_for("PtJob")
    assert framework is not None and framework.package == "trainjobs-pytorch"


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_disable_autoload_blocks_third_party_plugins(
        install: Install, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    install("trainjobs-pytorch", PTJOB_SOURCE, {"pytorch": "{module}:plugin"})
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, value)
    manager = load_plugins()
    assert "pytorch" not in {p.name for p in manager.plugins}
    assert manager.framework_for("PtJob") is None
    # The built-ins still load: they are part of trainjobs.
    assert {"mxnet", "tensorflow", "caffe2"} <= {p.name for p in manager.plugins}
    assert "PtJob" in errors_of(ptjob(), manager)["kind"]


def test_disable_autoload_zero_keeps_autoload(
        install: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    install("trainjobs-pytorch", PTJOB_SOURCE, {"pytorch": "{module}:plugin"})
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "0")
    assert load_plugins().framework_for("PtJob") is not None


def test_disable_plugins_blocks_by_name(install: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    install("trainjobs-pytorch", PTJOB_SOURCE, {"pytorch": "{module}:plugin"})
    monkeypatch.setenv(DISABLE_PLUGINS_ENV, "pytorch")
    manager = load_plugins()
    assert "pytorch" not in {p.name for p in manager.plugins}
    assert manager.framework_for("PtJob") is None

    # A list, with spaces; built-ins can be blocked too.
    monkeypatch.setenv(DISABLE_PLUGINS_ENV, " tensorboard , caffe2,pytorch")
    manager = load_plugins()
    names = {p.name for p in manager.plugins}
    assert names.isdisjoint({"tensorboard", "caffe2", "pytorch"})
    assert "Caffe2Job" not in manager.frameworks
    doc = yaml.safe_load((REPO / "examples/tensorflow/ps.yaml").read_text())
    job = parse_job(doc, manager)
    framework = manager.framework_for("TfJob")
    assert framework is not None
    rendered = render_job(job, framework, manager)
    assert rendered.extras == [], "a blocked tensorboard plugin must add no Deployment"


# Load errors -------------------------------------------------------------------------------


def test_misspelt_hook_is_a_load_error_naming_the_plugin(install: Install) -> None:
    install("trainjobs-typo", """
        from trainjobs.plugin import hookimpl

        @hookimpl
        def trainjobs_replica_envv(job, replica, ctx):
            return None
    """, {"typo": "{module}"})
    with pytest.raises(PluginError) as info:
        load_plugins()
    message = str(info.value)
    assert "'typo'" in message and "trainjobs-typo" in message
    assert "trainjobs_replica_envv" in message


def test_wrong_argument_name_is_a_load_error(install: Install) -> None:
    install("trainjobs-badargs", """
        from trainjobs.plugin import hookimpl

        @hookimpl
        def trainjobs_replica_env(job, replica, context):
            return None
    """, {"badargs": "{module}"})
    with pytest.raises(PluginError) as info:
        load_plugins()
    assert "'badargs'" in str(info.value) and "context" in str(info.value)


def test_import_failure_is_a_load_error_naming_the_plugin(install: Install) -> None:
    install("trainjobs-broken", "raise ImportError('needs libfoo')\n", {"broken": "{module}"})
    with pytest.raises(PluginError, match=r"'broken' from trainjobs-broken failed to import: "
                                          r"needs libfoo"):
        load_plugins()


def test_two_plugins_declaring_the_same_kind_is_an_error(install: Install) -> None:
    install("trainjobs-mxnet-fork", """
        from trainjobs_mxnet import MxNetPlugin
        plugin = MxNetPlugin()
    """, {"mxnet_fork": "{module}:plugin"})
    with pytest.raises(PluginError) as info:
        load_plugins()
    message = str(info.value)
    assert "'mxnet_fork'" in message and "trainjobs-mxnet-fork" in message
    assert "MxJob" in message


def test_a_kind_whose_short_name_is_taken_is_an_error(install: Install) -> None:
    install("trainjobs-clash", PTJOB_SOURCE.replace('short_names=("ptj",)',
                                                    'short_names=("mxj",)'),
            {"clash": "{module}:plugin"})
    with pytest.raises(PluginError, match=r"\['mxj'\] already belong to MxJob"):
        load_plugins()


def test_two_third_party_plugins_with_the_same_kind(install: Install) -> None:
    install("trainjobs-pytorch", PTJOB_SOURCE, {"pytorch": "{module}:plugin"})
    install("trainjobs-pytorch-too", PTJOB_SOURCE, {"pytorch2": "{module}:plugin"})
    with pytest.raises(PluginError, match="PtJob"):
        load_plugins()


# A third-party kind, end to end ------------------------------------------------------------


def test_third_party_kind_is_validated_rendered_and_gets_a_crd(install: Install) -> None:
    install("trainjobs-pytorch", PTJOB_SOURCE, {"pytorch": "{module}:plugin"})
    manager = load_plugins()
    framework = manager.framework_for("PtJob")
    assert framework is not None

    # Validated: the core's rules (replica types, counts, templates) and the plugin's own.
    job = parse_job(ptjob(), manager)
    assert errors_of(ptjob(backend="nccl"), manager) == {
        "spec.backend": "nccl needs GPUs, none requested"}
    assert "at most 1" in errors_of(
        {**ptjob(), "spec": {"replicaSpecs": {**ptjob()["spec"]["replicaSpecs"],
                                              "Master": replica(2, template(
                                                  container("pytorch")))}}},
        manager)["spec.replicaSpecs.Master.replicas"]
    assert "unknown field" in errors_of(ptjob(backnd="gloo"), manager)["spec.backnd"]
    bad = ptjob()
    bad["spec"]["replicaSpecs"]["Worker"]["template"] = template(container("main"))
    assert "needs a container named 'pytorch'" in errors_of(bad, manager)[
        "spec.replicaSpecs.Worker.template.spec.containers"]
    env_clash = ptjob()
    env_clash["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "RANK", "value": "7"}]
    assert "RANK is set by trainjobs" in errors_of(env_clash, manager)[
        "spec.replicaSpecs.Worker.template.spec.containers[0].env"]

    # Rendered: names, labels, env contract, port, Services.
    rendered = render_job(job, framework, manager)
    assert list(rendered.pods) == ["ptj-master-0", "ptj-worker-0", "ptj-worker-1"]
    assert list(rendered.services) == list(rendered.pods)
    worker = rendered.pods["ptj-worker-1"]
    assert worker["metadata"]["labels"]["trainjobs.io/framework"] == "pytorch"
    assert worker["metadata"]["ownerReferences"][0]["kind"] == "PtJob"
    (c,) = worker["spec"]["containers"]
    assert c["env"] == [
        {"name": "MASTER_ADDR", "value": "ptj-master-0"},
        {"name": "MASTER_PORT", "value": "23456"},
        {"name": "WORLD_SIZE", "value": "3"},
        {"name": "RANK", "value": "2"},
    ]
    assert c["ports"] == [{"name": "ptjob-port", "containerPort": 23456}]
    assert rendered.services["ptj-master-0"]["spec"]["ports"] == [
        {"name": "ptjob-port", "port": 23456, "targetPort": 23456}]

    # Its success rule.
    master = ReplicaOutcome(Replica("Master", 0), ReplicaPhase.SUCCEEDED, 0)
    running = ReplicaOutcome(Replica("Master", 0), ReplicaPhase.RUNNING)
    assert manager.job_succeeded(job, framework, [master])
    assert not manager.job_succeeded(job, framework, [running])

    # And a CRD, beside the built-ins'.
    crd = crd_for(framework)
    assert crd["metadata"]["name"] == "ptjobs.trainjobs.io"
    assert crd["metadata"]["annotations"]["trainjobs.io/plugin-package"] == "trainjobs-pytorch"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "PtJob", "ptjobs", ["ptj"], ["trainjobs"])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert schema["properties"]["backend"]["enum"] == ["gloo", "nccl"]
    rules = {r["rule"] for r in
             schema["properties"]["replicaSpecs"]["x-kubernetes-validations"]}
    assert "self.all(k, k in ['Master', 'Worker'])" in rules
    assert "'Master' in self" in rules
    # `trainjobs crds` writes one file per kind of `manager.frameworks`.
    assert list(manager.frameworks) == ["Caffe2Job", "MxJob", "PtJob", "TfJob"]
    assert crd_file_name(framework) == "trainjobs.io_ptjobs.yaml"


def test_cli_lists_a_third_party_plugin_and_its_package(install: Install) -> None:
    site = install("trainjobs-pytorch", PTJOB_SOURCE, {"pytorch": "{module}:plugin"})
    result = subprocess.run(
        [sys.executable, "-m", "trainjobs.cli", "plugins"],
        capture_output=True, text=True, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["pytorch"][1:4] == ["trainjobs-pytorch", "0.1.0", "PtJob"]
    assert rows["mxnet"][1:4] == ["trainjobs", rows["mxnet"][2], "MxJob"]


IANA_SVC_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-)){0,13}[a-z0-9]$")


@pytest.mark.parametrize("kind", ["MxJob", "TfJob", "Caffe2Job", "PtJob", "PyTorchJob",
                                  "ElasticJobXyzW", "AVeryLongKindNameIndeed", "X"])
def test_port_name_is_a_valid_service_port_name(kind: str) -> None:
    framework = Framework(kind=kind, plural=kind.lower() + "s", short_names=(), name="x",
                          replica_types=(), container_name="x", default_port=1)
    assert IANA_SVC_NAME.match(framework.port_name), framework.port_name
    assert framework.port_name == f"{kind.lower()}-port"[:15].rstrip("-")


# Hooks: documented, exercised, and how the manager combines them ---------------------------

HOOKS = sorted(name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction)
               if name.startswith("trainjobs_"))


def test_every_hook_is_documented() -> None:
    assert PluginManager().hook_names() == HOOKS
    for name in HOOKS:
        doc = inspect.getdoc(getattr(hookspecs, name))
        assert doc and len(doc.split()) >= 10, f"{name} needs a docstring saying its contract"
    # The module docstring lists every hook, in the order the module defines (and runs) them.
    module_doc = hookspecs.__doc__ or ""
    defined = sorted(HOOKS, key=lambda n: inspect.getsourcelines(getattr(hookspecs, n))[1])
    assert all(f"`{name}`" in module_doc for name in HOOKS)
    assert sorted(HOOKS, key=lambda n: module_doc.index(f"`{n}`")) == defined


class Recorder:
    """Implements every hook, records each call, changes nothing."""

    def __init__(self) -> None:
        self.calls: dict[str, list[dict[str, Any]]] = {}

    def _record(self, hook: str, **args: Any) -> None:
        self.calls.setdefault(hook, []).append(args)

    @hookspecs.hookimpl
    def trainjobs_frameworks(self) -> Sequence[Framework]:
        self._record("trainjobs_frameworks")
        return []

    @hookspecs.hookimpl
    def trainjobs_validate(self, job: Job, framework: Framework) -> Sequence[SpecError] | None:
        self._record("trainjobs_validate", job=job, framework=framework)
        return None

    @hookspecs.hookimpl
    def trainjobs_replica_env(self, job: Job, replica: Replica,
                              ctx: RenderContext) -> ReplicaEnv | None:
        self._record("trainjobs_replica_env", job=job, replica=replica, ctx=ctx)
        return None

    @hookspecs.hookimpl
    def trainjobs_adjust_pod(self, job: Job, replica: Replica, pod: dict[str, Any],
                             ctx: RenderContext) -> None:
        self._record("trainjobs_adjust_pod", job=job, replica=replica, pod=pod, ctx=ctx)

    @hookspecs.hookimpl
    def trainjobs_adjust_service(self, job: Job, replica: Replica, service: dict[str, Any],
                                 ctx: RenderContext) -> None:
        self._record("trainjobs_adjust_service", job=job, replica=replica, service=service,
                     ctx=ctx)
        service["metadata"]["labels"]["example.com/seen"] = "yes"

    @hookspecs.hookimpl
    def trainjobs_extra_objects(self, job: Job,
                                ctx: RenderContext) -> Sequence[dict[str, Any]] | None:
        self._record("trainjobs_extra_objects", job=job, ctx=ctx)
        return None

    @hookspecs.hookimpl
    def trainjobs_job_succeeded(self, job: Job, framework: Framework,
                                outcomes: Sequence[ReplicaOutcome]) -> bool | None:
        self._record("trainjobs_job_succeeded", job=job, framework=framework,
                     outcomes=outcomes)
        return None

    @hookspecs.hookimpl
    def trainjobs_config_overrides(
            self, options: Mapping[str, object]) -> Mapping[str, object] | None:
        self._record("trainjobs_config_overrides", options=options)
        return {"feature": {"on": options.get("feature_on")}}

    @hookspecs.hookimpl
    def trainjobs_check_config(self, controller_config: Mapping[str, object]) -> None:
        self._record("trainjobs_check_config", controller_config=controller_config)

    @hookspecs.hookimpl
    def trainjobs_owned_resources(
            self, controller_config: Mapping[str, object]) -> Sequence[OwnedResource] | None:
        self._record("trainjobs_owned_resources", controller_config=controller_config)
        return [OwnedResource("example.com/v1", "Thing", "things", with_replicas=True)]

    @hookspecs.hookimpl
    def trainjobs_object_status(self, job: Job, obj: dict[str, Any]) -> ObjectStatus | None:
        self._record("trainjobs_object_status", job=job, obj=obj)
        if obj.get("kind") != "Thing":
            return None
        return ObjectStatus("Thing", obj["metadata"]["name"], obj["status"]["phase"])

    @hookspecs.hookimpl
    def trainjobs_adjust_status(self, job: Job, framework: Framework,
                                status: dict[str, Any]) -> None:
        self._record("trainjobs_adjust_status", job=job, framework=framework,
                     status=dict(status))
        status["example"] = "seen"

    @hookspecs.hookimpl
    def trainjobs_checkpoint_replica(self, job: Job, framework: Framework) -> Replica | None:
        self._record("trainjobs_checkpoint_replica", job=job, framework=framework)
        return None  # the kind's own plugin answers


def info(name: str) -> LoadedPlugin:
    return LoadedPlugin(name=name, module=__name__, package="tests", version="0")


def test_every_hook_is_called_through_the_manager() -> None:
    recorder = Recorder()
    manager = load_plugins(extra=[(recorder, info("recorder"))])
    assert [p.name for p in manager.plugins][-1] == "recorder"
    job = parse_job(mxjob(), manager)
    framework = manager.framework_for("MxJob")
    assert framework is not None
    recorder.calls.clear()

    assert manager.validate(job, framework) == []
    rendered = render_job(job, framework, manager)
    outcomes = [ReplicaOutcome(r, ReplicaPhase.SUCCEEDED if r.index == 0 else
                               ReplicaPhase.RUNNING) for r in rendered.replicas.values()]
    assert manager.job_succeeded(job, framework, outcomes) is False  # 1 of 3 workers done
    assert manager.config_overrides({"feature_on": True}) == {"feature": {"on": True}}
    config = {"feature": {"on": True}}
    manager.check_config(config)
    assert OwnedResource("example.com/v1", "Thing", "things", with_replicas=True) in \
        manager.owned_resources(config)
    thing = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"},
             "status": {"phase": "Waiting"}}
    assert manager.object_status(job, thing) == ObjectStatus("Thing", "t", "Waiting")
    status = {"state": "Running"}
    manager.adjust_status(job, framework, status)
    assert status == {"state": "Running", "example": "seen"}
    assert manager.checkpoint_replica(job, framework) == Replica("Worker", 0)
    register_calls = Recorder()
    load_plugins(extra=[(register_calls, info("again"))])

    calls = {**recorder.calls, **register_calls.calls}
    assert sorted(calls) == HOOKS, "every hook must be exercised here"
    assert calls["trainjobs_frameworks"] == [{}]
    assert calls["trainjobs_validate"] == [{"job": job, "framework": framework}]
    assert [c["replica"] for c in calls["trainjobs_replica_env"]] == list(
        rendered.replicas.values())
    assert {c["ctx"].backend for c in calls["trainjobs_replica_env"]} == {"kubernetes"}
    assert [c["pod"]["metadata"]["name"] for c in calls["trainjobs_adjust_pod"]] == list(
        rendered.pods)
    assert [c["service"]["metadata"]["name"] for c in calls["trainjobs_adjust_service"]] == \
        list(rendered.services)
    assert all(s["metadata"]["labels"]["example.com/seen"] == "yes"
               for s in rendered.services.values())
    assert len(calls["trainjobs_extra_objects"]) == 1
    assert calls["trainjobs_job_succeeded"] == [
        {"job": job, "framework": framework, "outcomes": outcomes}]
    assert calls["trainjobs_config_overrides"] == [{"options": {"feature_on": True}}]
    assert calls["trainjobs_check_config"] == [{"controller_config": config}]
    assert calls["trainjobs_owned_resources"] == [{"controller_config": config}]
    assert calls["trainjobs_object_status"] == [{"job": job, "obj": thing}]
    assert calls["trainjobs_adjust_status"] == [
        {"job": job, "framework": framework, "status": {"state": "Running"}}]
    assert calls["trainjobs_checkpoint_replica"] == [{"job": job, "framework": framework}]


def test_adjust_pod_runs_in_registration_order() -> None:
    def marker(tag: str) -> object:
        class Mark:
            @hookspecs.hookimpl
            def trainjobs_adjust_pod(self, job: Job, replica: Replica, pod: dict[str, Any],
                                     ctx: RenderContext) -> None:
                notes = pod["metadata"].setdefault("annotations", {})
                notes["order"] = notes.get("order", "") + tag
        return Mark()

    manager = load_plugins(extra=[(marker("a"), info("a")), (marker("b"), info("b")),
                                  (marker("c"), info("c"))])
    job = parse_job(mxjob(), manager)
    framework = manager.framework_for("MxJob")
    assert framework is not None
    pods = render_job(job, framework, manager).pods
    assert {p["metadata"]["annotations"]["order"] for p in pods.values()} == {"abc"}


def test_two_plugins_setting_the_same_variable_is_refused() -> None:
    class Meddler:
        @hookspecs.hookimpl
        def trainjobs_replica_env(self, job: Job, replica: Replica,
                                  ctx: RenderContext) -> ReplicaEnv | None:
            return ReplicaEnv({"DMLC_ROLE": "meddled"}) if job.kind == "MxJob" else None

    manager = load_plugins(extra=[(Meddler(), info("meddler"))])
    errors = errors_of(mxjob(), manager)
    assert errors["spec.replicaSpecs.Worker"] == (
        "two plugins set the environment variable DMLC_ROLE")


def test_validate_errors_of_every_plugin_are_collected() -> None:
    def complainer(path: str) -> object:
        class Complain:
            @hookspecs.hookimpl
            def trainjobs_validate(self, job: Job,
                                   framework: Framework) -> Sequence[SpecError] | None:
                return [SpecError(path, "not on Tuesdays")]
        return Complain()

    manager = load_plugins(extra=[(complainer("spec.a"), info("one")),
                                  (complainer("spec.b"), info("two"))])
    with pytest.raises(SpecInvalid) as raised:
        parse_job(mxjob(), manager)
    assert [e.path for e in raised.value.errors] == ["spec.a", "spec.b"]


def test_success_rule_missing_is_a_plugin_error() -> None:
    manager = PluginManager()
    job = parse_job(mxjob(), load_plugins())
    with pytest.raises(PluginError, match="no plugin implements the success rule of MxJob"):
        manager.job_succeeded(job, job_framework(job), [])


def job_framework(job: Job) -> Framework:
    framework = load_plugins().framework_for(job.kind)
    assert framework is not None
    return framework


def test_register_refuses_a_bad_plugin_and_leaves_the_manager_usable() -> None:
    class Typo:
        @hookspecs.hookimpl
        def trainjobs_validat(self, job: Job, framework: Framework) -> None:
            return None

    manager = load_plugins()
    before = [p.name for p in manager.plugins]
    with pytest.raises(PluginError, match="'typo' from tests"):
        manager.register(Typo(), info("typo"))
    assert [p.name for p in manager.plugins] == before
    job = parse_job(mxjob(), manager)  # still works: the bad plugin was unregistered
    assert job.kind == "MxJob"
