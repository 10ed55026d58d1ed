"""Hooks are called through pluggy: `tryfirst`, `trylast` and wrappers work as pluggy documents,
beside the built-in plugins; what the core cannot honour, and a `FrameworkPlugin` without a
part it needs, is refused when the plugin loads, with one line naming it.

The last tests run the real command with a broken plugin installed (a distribution written to
a temporary directory on PYTHONPATH, found through its entry point): exit 2, one line on
stderr, no traceback — for `trainjobs render` and for `trainjobs operator`, which refuses to
start before it connects.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pluggy
import pytest

from tests.unit.helpers import builtin_plugins, mxjob
from trainjobs.api.models import Job
from trainjobs.core.render import render_job
from trainjobs.core.validation import parse_job
from trainjobs.errors import PluginRefused, SpecError
from trainjobs.plugin import FrameworkPlugin
from trainjobs.plugin.hookspecs import hookimpl
from trainjobs.plugin.manager import (
    DISABLE_AUTOLOAD_ENV,
    ENTRY_POINT_GROUP,
    LoadedPlugin,
    PluginManager,
)
from trainjobs.plugin.types import (
    ClusterLayout,
    Framework,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
)

ORDER = "example.com/order"


def info(name: str) -> LoadedPlugin:
    return LoadedPlugin(name=name, module=__name__, package="tests", version="0")


def with_plugins(*plugins: tuple[str, object]) -> PluginManager:
    """The built-in plugins, then `plugins` in this order."""
    manager = builtin_plugins()
    for name, plugin in plugins:
        manager.register(plugin, info(name))
    return manager


def _note(doc: dict[str, Any], tag: str) -> None:
    notes = doc["metadata"].setdefault("annotations", {})
    notes[ORDER] = notes.get(ORDER, "") + tag


def pod_marker(tag: str, tryfirst: bool = False, trylast: bool = False) -> object:
    class Mark:
        @hookimpl(tryfirst=tryfirst, trylast=trylast)
        def trainjobs_adjust_pod(self, pod: dict[str, Any]) -> None:
            _note(pod, tag)
    return Mark()


def pod_orders(manager: PluginManager) -> set[str]:
    job = parse_job(mxjob(), manager)
    framework = manager.framework_for("MxJob")
    assert framework is not None
    pods = render_job(job, framework, manager).pods.values()
    return {p["metadata"].get("annotations", {}).get(ORDER, "") for p in pods}


# Ordering --------------------------------------------------------------------------------------


def test_tryfirst_and_trylast_edits_run_first_and_last_the_others_in_load_order() -> None:
    manager = with_plugins(("a", pod_marker("a")), ("last", pod_marker("z", trylast=True)),
                           ("b", pod_marker("b")), ("first", pod_marker("0", tryfirst=True)),
                           ("c", pod_marker("c")))
    assert pod_orders(manager) == {"0abcz"}


def test_without_options_edits_still_run_in_load_order() -> None:
    manager = with_plugins(("a", pod_marker("a")), ("b", pod_marker("b")),
                           ("c", pod_marker("c")))
    assert pod_orders(manager) == {"abc"}


def framework_of(manager: PluginManager, kind: str = "MxJob") -> Framework:
    framework = manager.framework_for(kind)
    assert framework is not None
    return framework


def context(manager: PluginManager) -> RenderContext:
    return RenderContext("kubernetes", framework_of(manager), ClusterLayout({}, job_name="j"))


def extra(name: str, tryfirst: bool = False, trylast: bool = False) -> object:
    class Extra:
        @hookimpl(tryfirst=tryfirst, trylast=trylast)
        def trainjobs_extra_objects(self) -> Sequence[dict[str, Any]]:
            return [{"kind": "ConfigMap", "metadata": {"name": name}}]
    return Extra()


def extra_names(manager: PluginManager) -> list[str]:
    job = parse_job(mxjob(), manager)
    return [o["metadata"]["name"] for o in manager.extra_objects(job, context(manager))]


def test_collecting_hooks_hear_the_last_loaded_first_unless_told_otherwise() -> None:
    # pluggy's order, as before: the most recently registered answers first.
    assert extra_names(with_plugins(("a", extra("a")), ("b", extra("b")))) == ["b", "a"]
    assert extra_names(with_plugins(("a", extra("a", tryfirst=True)),
                                    ("b", extra("b")))) == ["a", "b"]
    assert extra_names(with_plugins(("a", extra("a")), ("b", extra("b", trylast=True)),
                                    ("c", extra("c")))) == ["c", "a", "b"]


# Wrappers ----------------------------------------------------------------------------------


class PodWrapper:
    """A new-style wrapper: sees the pod before every other edit and after all of them."""

    @hookimpl(wrapper=True)
    def trainjobs_adjust_pod(self, pod: dict[str, Any]) -> Generator[None, None, None]:
        _note(pod, "<")
        yield
        _note(pod, ">")


class ServiceWrapper:
    """An old-style hookwrapper, reading the outcome."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl(hookwrapper=True)
    def trainjobs_adjust_service(self, service: dict[str, Any]) -> Generator[None, Any, None]:
        before = dict(service["metadata"]["labels"])
        outcome = yield
        outcome.get_result()  # raises if an edit failed
        added = set(service["metadata"]["labels"]) - set(before)
        self.seen.append(",".join(sorted(added)))


class ServiceLabel:
    @hookimpl
    def trainjobs_adjust_service(self, service: dict[str, Any]) -> None:
        service["metadata"]["labels"]["example.com/seen"] = "yes"


def test_a_wrapper_wraps_every_edit_wherever_it_loads() -> None:
    manager = with_plugins(("a", pod_marker("a")), ("wrap", PodWrapper()),
                           ("b", pod_marker("b")))
    assert pod_orders(manager) == {"<ab>"}


def test_an_old_style_hookwrapper_sees_the_result_of_the_edits() -> None:
    wrapper = ServiceWrapper()
    manager = with_plugins(("wrap", wrapper), ("label", ServiceLabel()))
    job = parse_job(mxjob(), manager)
    wrapper.seen.clear()  # validation rendered the job once already
    rendered = render_job(job, framework_of(manager), manager)
    assert wrapper.seen == ["example.com/seen"] * len(rendered.services)


def test_a_wrapper_of_the_status_edit_runs_around_it() -> None:
    class Stamp:
        @hookimpl
        def trainjobs_adjust_status(self, status: dict[str, Any]) -> None:
            status["order"] = status.get("order", "") + "s"

    class Around:
        @hookimpl(wrapper=True)
        def trainjobs_adjust_status(self, status: dict[str, Any]) -> Generator[None, None, None]:
            status["order"] = status.get("order", "") + "<"
            yield
            status["order"] += ">"

    manager = with_plugins(("around", Around()), ("stamp", Stamp()))
    job = parse_job(mxjob(), manager)
    status: dict[str, Any] = {"state": "Running"}
    manager.adjust_status(job, framework_of(manager), status)
    assert status == {"state": "Running", "order": "<s>"}


def test_a_wrapper_of_a_collecting_hook_may_change_the_answer() -> None:
    class Extend:
        @hookimpl(wrapper=True)
        def trainjobs_extra_objects(
                self) -> Generator[None, list[Sequence[dict[str, Any]]],
                                   list[Sequence[dict[str, Any]]]]:
            found = yield
            return [*found, [{"kind": "ConfigMap", "metadata": {"name": "wrapped"}}]]

    manager = with_plugins(("a", extra("a")), ("extend", Extend()))
    assert extra_names(manager) == ["a", "wrapped"]


def test_a_wrapper_of_a_firstresult_hook_may_overrule_the_kind() -> None:
    class Overrule:
        @hookimpl(wrapper=True)
        def trainjobs_job_succeeded(self) -> Generator[None, bool | None, bool | None]:
            yield
            return True

    plain = builtin_plugins()
    manager = with_plugins(("overrule", Overrule()))
    job = parse_job(mxjob(), manager)
    outcomes = [ReplicaOutcome(Replica("Worker", 0), ReplicaPhase.RUNNING)]
    assert plain.job_succeeded(job, framework_of(plain), outcomes) is False
    assert manager.job_succeeded(job, framework_of(manager), outcomes) is True


# Refusals ----------------------------------------------------------------------------------


def refusal(manager: PluginManager, plugin: object, name: str) -> str:
    """The one-line message `manager` refuses `plugin` with; the manager is left as it was."""
    before = ([p.name for p in manager.plugins], dict(manager.frameworks), pod_orders(manager))
    with pytest.raises(PluginRefused) as raised:
        manager.register(plugin, info(name))
    after = ([p.name for p in manager.plugins], dict(manager.frameworks), pod_orders(manager))
    assert after == before
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"plugin {name!r} from tests: "), message
    return message


def test_a_wrapper_of_trainjobs_frameworks_is_refused_naming_plugin_and_hook() -> None:
    class Kinds:
        @hookimpl(wrapper=True)
        def trainjobs_frameworks(self) -> Generator[None, list[Sequence[Framework]],
                                                    list[Sequence[Framework]]]:
            return (yield)

    class OldKinds:
        @hookimpl(hookwrapper=True)
        def trainjobs_frameworks(self) -> Generator[None, Any, None]:
            yield

    manager = with_plugins(("a", pod_marker("a")))
    for plugin in (Kinds(), OldKinds()):
        message = refusal(manager, plugin, "kinds")
        assert "trainjobs_frameworks cannot be a wrapper" in message


def test_a_wrapper_that_is_not_a_generator_is_refused_on_one_line() -> None:
    class NotAGenerator:
        @hookimpl(wrapper=True)
        def trainjobs_adjust_pod(self, pod: dict[str, Any]) -> None:
            _note(pod, "x")

    message = refusal(builtin_plugins(), NotAGenerator(), "flat")
    assert "trainjobs_adjust_pod" in message and "generator" in message


def test_ordering_options_on_trainjobs_frameworks_are_harmless() -> None:
    class Early(FrameworkPlugin):
        framework = Framework("EarlyJob", "earlyjobs", (), "early", (), "early", 1234)

        def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> None:
            return None

        def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
            return True

        @hookimpl(tryfirst=True)
        def trainjobs_frameworks(self) -> Sequence[Framework]:
            return [self.framework]

    manager = with_plugins(("early", Early()))
    assert manager.framework_for("EarlyJob") is not None
    assert manager.plugins[-1].kinds == ("EarlyJob",)


MISSING = Framework("HalfJob", "halfjobs", (), "half", (), "half", 1234)


class NoSuccessRule(FrameworkPlugin):
    framework = MISSING

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> None:
        return None


class NoEnvironment(FrameworkPlugin):
    framework = MISSING

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        return True


class NoFramework(FrameworkPlugin):
    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> None:
        return None

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        return True


class Nothing(FrameworkPlugin):
    pass


@pytest.mark.parametrize(("plugin", "missing"), [
    (NoSuccessRule(), "succeeded()"),
    (NoEnvironment(), "replica_env()"),
    (NoFramework(), "framework (a Framework)"),
    (Nothing(), "framework (a Framework), replica_env(), succeeded()"),
])
def test_a_framework_plugin_missing_a_part_is_refused_when_it_loads(
        plugin: FrameworkPlugin, missing: str) -> None:
    message = refusal(builtin_plugins(), plugin, "half")
    assert message == (f"plugin 'half' from tests: {type(plugin).__name__} (a FrameworkPlugin) "
                       f"does not define {missing}")


def test_a_framework_plugin_may_implement_the_hooks_instead_of_the_methods() -> None:
    class RawHooks(FrameworkPlugin):
        framework = MISSING

        @hookimpl
        def trainjobs_replica_env(self, job: Job, replica: Replica,
                                  ctx: RenderContext) -> ReplicaEnv | None:
            return ReplicaEnv({"HALF": "1"}) if job.kind == "HalfJob" else None

        @hookimpl
        def trainjobs_job_succeeded(self, job: Job, framework: Framework,
                                    outcomes: Sequence[ReplicaOutcome]) -> bool | None:
            return True if job.kind == "HalfJob" else None

    manager = with_plugins(("raw", RawHooks()))
    assert manager.framework_for("HalfJob") is not None


def test_a_framework_that_is_not_a_framework_is_refused() -> None:
    class Wrong:
        @hookimpl
        def trainjobs_frameworks(self) -> Sequence[object]:
            return ["MyJob"]

    message = refusal(builtin_plugins(), Wrong(), "wrong")
    assert message.endswith("trainjobs_frameworks returned 'MyJob', not a Framework")


def test_trainjobs_frameworks_raising_is_refused_on_one_line() -> None:
    class Raises:
        @hookimpl
        def trainjobs_frameworks(self) -> Sequence[Framework]:
            raise KeyError("no config\nat all")

    message = refusal(builtin_plugins(), Raises(), "raises")
    assert "trainjobs_frameworks raised KeyError" in message


def test_a_kind_clash_leaves_the_manager_as_it_was() -> None:
    class Twice:
        @hookimpl
        def trainjobs_frameworks(self) -> Sequence[Framework]:
            return [MISSING, MISSING]

    message = refusal(builtin_plugins(), Twice(), "twice")
    assert "declares HalfJob, but ['HalfJob', 'halfjobs'] already belong to HalfJob" in message


def test_a_validation_error_of_a_refused_plugin_is_not_left_behind() -> None:
    class Complains(NoSuccessRule):
        def validate(self, job: Job) -> list[SpecError]:
            return [SpecError("spec", "never")]

    manager = builtin_plugins()
    refusal(manager, Complains(), "complains")
    assert parse_job(mxjob(), manager).kind == "MxJob"


# The command -------------------------------------------------------------------------------

HALF_PLUGIN = """
from trainjobs.plugin import Framework, FrameworkPlugin, ReplicaType


class HalfPlugin(FrameworkPlugin):
    framework = Framework("HalfJob", "halfjobs", (), "half", (ReplicaType("Worker", 1),),
                          "half", 1234)

    def replica_env(self, job, replica, ctx):
        return None


plugin = HalfPlugin()
"""


def installed(tmp_path: Path, dist: str, source: str, target: str) -> dict[str, str]:
    """The environment of a command that finds `source` installed as distribution `dist`,
    its entry point `target` (`{module}` standing for the package)."""
    module = "tj_refused_plugin"
    site = tmp_path / "site"
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(textwrap.dedent(source))
    meta = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (meta / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nhalf = {target.format(module=module)}\n")
    return {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}


def trainjobs(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainjobs.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


EXPECTED = ("error: plugin 'half' from trainjobs-half: HalfPlugin (a FrameworkPlugin) does "
            "not define succeeded()")


def test_the_cli_refuses_a_framework_plugin_missing_a_part_exit_2_one_line(
        tmp_path: Path) -> None:
    env = installed(tmp_path, "trainjobs-half", HALF_PLUGIN, "{module}:plugin")
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: trainjobs.io/v1alpha1\nkind: MxJob\nmetadata: {name: j}\n")
    for args in (("render", str(job)), ("plugins",)):
        done = trainjobs(env, *args)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", EXPECTED + "\n"), args
    # The same plugin, blocked, is not loaded at all: the command works.
    blocked = trainjobs({**env, DISABLE_AUTOLOAD_ENV: "1"}, "plugins")
    assert blocked.returncode == 0, blocked.stderr


def test_the_operator_refuses_to_start_with_a_plugin_missing_a_part(tmp_path: Path) -> None:
    env = installed(tmp_path, "trainjobs-half", HALF_PLUGIN, "{module}:plugin")
    done = trainjobs(env, "operator", "--kubeconfig", str(tmp_path / "no-such-kubeconfig"),
                     "--http-address", "127.0.0.1:0")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", EXPECTED + "\n")


def test_the_cli_refuses_a_misspelt_hook_argument_on_one_line(tmp_path: Path) -> None:
    env = installed(tmp_path, "trainjobs-half", """
        from trainjobs.plugin import hookimpl

        @hookimpl
        def trainjobs_replica_env(job, replica, context):
            return None
    """, "{module}")
    done = trainjobs(env, "plugins")
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: plugin 'half' from trainjobs-half: ")
    assert "trainjobs_replica_env" in line and "context" in line


def test_pluggy_is_what_calls_the_edit_hooks() -> None:
    """Guards the design: the manager's edit hooks go through a pluggy HookCaller (monitoring
    sees the call), not through functions it picked out itself."""
    manager = with_plugins(("a", pod_marker("a")))
    seen: list[str] = []
    for pm in (manager._pm, manager._edits):  # the design under test
        assert isinstance(pm, pluggy.PluginManager)
        pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append(name),
                                   lambda outcome, name, impls, kwargs: None)
    pod_orders(manager)
    assert "trainjobs_adjust_pod" in seen and "trainjobs_adjust_service" in seen

