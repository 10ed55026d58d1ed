"""Kueue's integration or the operator's Workload for a kind Kueue can integrate itself (issue
35): never both, never neither. The pure decision (Kueue's Configuration read as v0.19.2 reads
it), the reading of its ConfigMap, and the controller on the fake API with the Kubeflow plugin:
a labelled TFJob gets no Workload where Kueue's tfjob integration is on, the operator's where
it is off, and is held with no pod and no Workload where the operator cannot tell."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.controller_harness import NS, FakeClock, synced
from tests.unit.fake_kube import FakeKube, status_error
from tests.unit.helpers import plugin_env
from trainjobs.errors import TrainjobsError
from trainjobs.kube import PODS, ApiError, Resource, job_resource
from trainjobs.kueue.integrations import (
    DEFAULT_FRAMEWORKS,
    REASON_UNDECIDED,
    IntegrationMode,
    KueueConfigError,
    KueueIntegrations,
    Route,
    enabled_frameworks,
    parse_config_map,
    undecided_message,
    undecided_route,
)
from trainjobs.kueue.reconcile import KueueSettings
from trainjobs.operator.controller import Controller, ControllerSettings
from trainjobs.operator.gates import Gates
from trainjobs.operator.gates.kueue import WORKLOADS, Queueing
from trainjobs.operator.kueue_integrations import CONFIG_MAPS, KueueIntegrationReader
from trainjobs.operator.result import Result
from trainjobs.plugin.manager import DISABLE_PLUGINS_ENV, load_plugins

# Without trainjobs' own TfJob and MxJob: the fake API keys objects by plural, not group.
with plugin_env(**{DISABLE_PLUGINS_ENV: "tensorflow,mxnet"}):
    KUBEFLOW = load_plugins(enable=["kubeflow"])
QUEUE = "kueue.x-k8s.io/queue-name"
CM = ("kueue-system", "kueue-manager-config")
# Kueue v0.19.2's config/components/manager/controller_manager_config.yaml, its frameworks.
SHIPPED = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
integrations:
  frameworks:
  - "batch/job"
  - "kubeflow.org/mpijob"
  - "ray.io/rayjob"
  - "jobset.x-k8s.io/jobset"
  # - "kubeflow.org/pytorchjob"
  # - "kubeflow.org/tfjob"
  - "trainer.kubeflow.org/trainjob"
  - "pod"
"""
WITH_TFJOB = SHIPPED.replace('  # - "kubeflow.org/tfjob"', '  - "kubeflow.org/tfjob"')


# The pure decision -------------------------------------------------------------------------

def test_kueues_shipped_configuration_leaves_tfjob_out_and_a_named_one_is_on() -> None:
    assert "kubeflow.org/tfjob" not in enabled_frameworks(SHIPPED)
    assert "kubeflow.org/mpijob" in enabled_frameworks(SHIPPED)
    assert "kubeflow.org/tfjob" in enabled_frameworks(WITH_TFJOB)


@pytest.mark.parametrize("text", [
    "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n",
    "integrations: {}\n",
    "integrations:\n  frameworks: []\n",
    "integrations:\n  externalFrameworks: [Foo.v1.example.com]\n",
])
def test_no_frameworks_named_is_kueues_default_batch_job_alone(text: str) -> None:
    assert enabled_frameworks(text) == DEFAULT_FRAMEWORKS == {"batch/job"}


@pytest.mark.parametrize(("text", "why"), [
    ("[a, b]", "not a mapping"),
    ("a: [", "not YAML"),
    ("integrations: [batch/job]", "integrations is not a mapping"),
    ("integrations:\n  frameworks: kubeflow.org/tfjob\n", "not a list of names"),
    ("integrations:\n  frameworks: [{a: 1}]\n", "not a list of names"),
])
def test_a_malformed_configuration_is_an_error_not_a_guess(text: str, why: str) -> None:
    with pytest.raises(KueueConfigError, match=why):
        enabled_frameworks(text)


def test_route_by_mode_and_kind() -> None:
    on = KueueIntegrations(frozenset({"batch/job", "kubeflow.org/tfjob"}), "cm")
    off = KueueIntegrations(frozenset({"batch/job"}), "cm")
    unknown = KueueIntegrations(None, "not found")
    auto, kueue, operator = IntegrationMode.AUTO, IntegrationMode.KUEUE, IntegrationMode.OPERATOR
    assert on.route(auto, "kubeflow.org", "TFJob") is Route.KUEUE
    assert off.route(auto, "kubeflow.org", "TFJob") is Route.OPERATOR
    assert unknown.route(auto, "kubeflow.org", "TFJob") is Route.UNDECIDED
    assert unknown.route(kueue, "kubeflow.org", "TFJob") is Route.KUEUE
    assert on.route(operator, "kubeflow.org", "TFJob") is Route.OPERATOR
    # MXJob: no Kueue integration since v0.11, whatever the mode; trainjobs' own kinds neither.
    for known, mode in ((on, kueue), (unknown, auto), (on, auto)):
        assert known.route(mode, "kubeflow.org", "MXJob") is Route.OPERATOR
        assert known.route(mode, "trainjobs.io", "TfJob") is Route.OPERATOR


def test_an_undecided_job_keeps_the_path_it_is_visibly_on() -> None:
    assert undecided_route(has_own_workload=True, active=True, finished=False) is Route.OPERATOR
    assert undecided_route(has_own_workload=False, active=True, finished=False) is Route.KUEUE
    assert undecided_route(has_own_workload=False, active=False, finished=True) is Route.KUEUE
    assert undecided_route(has_own_workload=False, active=False, finished=False) \
        is Route.UNDECIDED


def test_the_held_message_says_what_to_set() -> None:
    message = undecided_message("kubeflow.org", "TFJob", "ConfigMap a/b not found", ("a", "b"))
    for part in ("kubeflow.org/tfjob", "ConfigMap a/b not found",
                 "--kueue-kubeflow-integration=kueue", "=operator", "kueue.kubeflowIntegration"):
        assert part in message, message


@pytest.mark.parametrize("text", ["kueue-manager-config", "/x", "x/", "a/b/c", ""])
def test_config_map_flag_needs_namespace_and_name(text: str) -> None:
    with pytest.raises(TrainjobsError, match="expected NAMESPACE/NAME"):
        parse_config_map(text)
    assert parse_config_map("kueue-system/kueue-manager-config") == CM


# Reading the ConfigMap ---------------------------------------------------------------------

def _config_map(text: str | None, name: str = CM[1]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": CM[0]},
            "data": {} if text is None else {"controller_manager_config.yaml": text}}


async def test_a_read_answer_is_kept_and_a_failed_one_asked_again_after_a_while() -> None:
    kube, clock = FakeKube(), FakeClock()
    reader = KueueIntegrationReader(kube, IntegrationMode.AUTO, CM,  # type: ignore[arg-type]
                                    clock.monotonic, recheck_seconds=10)
    route, known = await reader.route("kubeflow.org", "TFJob")
    assert route is Route.UNDECIDED and known is not None and "not found" in known.source
    kube.put(CONFIG_MAPS, _config_map(WITH_TFJOB))
    clock.advance(5)
    assert (await reader.route("kubeflow.org", "TFJob"))[0] is Route.UNDECIDED  # not yet
    assert len(kube.made("GET", "ConfigMap")) == 1
    clock.advance(5)
    assert (await reader.route("kubeflow.org", "TFJob"))[0] is Route.KUEUE
    kube.put(CONFIG_MAPS, _config_map(SHIPPED))
    clock.advance(3600)
    assert (await reader.route("kubeflow.org", "TFJob"))[0] is Route.KUEUE  # kept
    assert len(kube.made("GET", "ConfigMap")) == 2
    # A kind Kueue does not integrate, or an explicit mode, reads nothing.
    fresh = KueueIntegrationReader(kube, IntegrationMode.KUEUE, CM)  # type: ignore[arg-type]
    assert await fresh.route("kubeflow.org", "TFJob") == (Route.KUEUE, None)
    assert (await reader.route("kubeflow.org", "MXJob"))[0] is Route.OPERATOR
    assert len(kube.made("GET", "ConfigMap")) == 2


@pytest.mark.parametrize(("obj", "error", "why"), [
    (_config_map(None), None, "has no key controller_manager_config.yaml"),
    (_config_map("[1]"), None, "not a mapping"),
    (None, status_error(403, "Forbidden", 'configmaps "kueue-manager-config" is forbidden'),
     "may not read ConfigMap kueue-system/kueue-manager-config"),
    (None, status_error(500, "InternalError", "etcd timeout"), "etcd timeout"),
])
async def test_what_cannot_be_read_says_why(obj: dict[str, Any] | None,
                                            error: ApiError | None, why: str) -> None:
    kube = FakeKube()
    if obj is not None:
        kube.put(CONFIG_MAPS, obj)
    if error is not None:
        kube.refuse = lambda verb, kind, body: error if kind == "ConfigMap" else None
    known = await KueueIntegrationReader(kube, IntegrationMode.AUTO,  # type: ignore[arg-type]
                                         CM).integrations()
    assert known.frameworks is None and why in known.source, known


# The controller, Kubeflow plugin on ----------------------------------------------------------

def _resource(kind: str) -> Resource:
    fw = KUBEFLOW.framework_for(kind)
    assert fw is not None and fw.group == "kubeflow.org"
    return job_resource(fw.kind, fw.plural, fw.group, fw.version)


TFJOBS, MXJOBS = _resource("TFJob"), _resource("MXJob")


@dataclass
class Kf:
    kube: FakeKube
    clock: FakeClock
    controller: Controller
    queueing: Queueing

    async def sync(self) -> None:
        await self.controller.events.flush()
        self.kube.deliver()
        for _ in range(100):
            await asyncio.sleep(0)
            if not self.kube.pending_events():
                break
        await asyncio.sleep(0)

    async def reconcile(self, kind: str = "TFJob", name: str = "tf") -> Result:
        await self.sync()
        result = await self.controller.reconcile(f"{kind}/{NS}/{name}")
        await self.sync()
        return result

    def submit(self, kind: str = "TFJob", name: str = "tf", labelled: bool = True) -> None:
        field = "tfReplicaSpecs" if kind == "TFJob" else "mxReplicaSpecs"
        container = "tensorflow" if kind == "TFJob" else "mxnet"
        replicas = {"Worker": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": container, "image": "img:1",
             "resources": {"requests": {"cpu": "1"}}}]}}}}
        if kind == "MXJob":
            replicas["Scheduler"] = copy.deepcopy(replicas["Worker"])
            replicas["Server"] = copy.deepcopy(replicas["Worker"])
        self.kube.put(TFJOBS if kind == "TFJob" else MXJOBS, {
            "apiVersion": "kubeflow.org/v1", "kind": kind,
            "metadata": {"name": name, "namespace": NS, "generation": 1,
                         "labels": {QUEUE: "queue"} if labelled else {}},
            "spec": {field: replicas}})

    def status(self, kind: str = "TFJob", name: str = "tf") -> dict[str, Any]:
        res = TFJOBS if kind == "TFJob" else MXJOBS
        return dict(self.kube.objects[(res.plural, NS, name)].get("status") or {})

    def workloads(self) -> list[dict[str, Any]]:
        return self.kube.of(WORKLOADS, NS)

    def pods(self) -> list[dict[str, Any]]:
        return self.kube.of(PODS, NS)

    def warnings(self) -> list[str]:
        return [e["reason"] for e in self.kube.of_events() if e["type"] == "Warning"]


@asynccontextmanager
async def kubeflow_controller(mode: IntegrationMode, config: str | None
                              ) -> AsyncIterator[Kf]:
    """A controller with the Kubeflow plugin and Kueue admission on (the fake API); Kueue's
    ConfigMap holds `config` (None: there is none)."""
    kube, clock = FakeKube(), FakeClock()
    if config is not None:
        kube.put(CONFIG_MAPS, _config_map(config))
    controller = Controller(kube, KUBEFLOW,  # type: ignore[arg-type]
                            ControllerSettings(namespaces=(NS,)), clock)
    settings = KueueSettings(kubeflow_integration=mode, config_map=CM)
    poster = asyncio.create_task(controller.events.run())
    try:
        async with synced(controller.informers):
            queueing = Queueing(kube, [NS], controller.events,  # type: ignore[arg-type]
                                controller.queue.add, settings, clock=clock)
            controller.gates = Gates([queueing])
            async with synced(queueing.informers):
                yield Kf(kube, clock, controller, queueing)
    finally:
        await controller.queue.close()
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)


def _queued(status: dict[str, Any]) -> dict[str, Any]:
    cond = next(c for c in status["conditions"] if c["type"] == "Queued")
    assert cond["status"] == "True", status
    return dict(cond)


async def test_tfjob_integration_on_in_kueue_the_operator_makes_no_workload() -> None:
    async with kubeflow_controller(IntegrationMode.AUTO, WITH_TFJOB) as h:
        h.submit()
        result = await h.reconcile()
        assert not h.workloads()
        assert not result.backoff


async def test_kueues_default_configuration_gives_the_tfjob_the_operators_workload() -> None:
    async with kubeflow_controller(IntegrationMode.AUTO, SHIPPED) as h:
        h.submit()
        await h.reconcile()
        [wl] = h.workloads()
        assert wl["spec"]["queueName"] == "queue"
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "TFJob"
        assert not h.pods()
        assert _queued(h.status())["reason"] != REASON_UNDECIDED


@pytest.mark.parametrize("mode", [IntegrationMode.AUTO, IntegrationMode.KUEUE])
async def test_an_mxjob_always_gets_the_operators_workload(mode: IntegrationMode) -> None:
    async with kubeflow_controller(mode, WITH_TFJOB) as h:
        h.submit("MXJob", "mx")
        await h.reconcile("MXJob", "mx")
        [wl] = h.workloads()
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "MXJob"
        assert not h.pods()


async def test_operator_mode_reads_nothing_and_makes_the_workload() -> None:
    async with kubeflow_controller(IntegrationMode.OPERATOR, None) as h:
        h.submit()
        await h.reconcile()
        assert len(h.workloads()) == 1 and not h.pods()
        assert not h.kube.made("GET", "ConfigMap")


async def test_undecided_holds_the_tfjob_without_workload_or_pod_then_follows_the_config(
        ) -> None:
    async with kubeflow_controller(IntegrationMode.AUTO, None) as h:
        h.submit()
        result = await h.reconcile()
        assert not h.workloads() and not h.pods()
        queued = _queued(h.status())
        assert queued["reason"] == REASON_UNDECIDED
        assert "ConfigMap kueue-system/kueue-manager-config not found" in queued["message"]
        assert h.warnings() == [REASON_UNDECIDED]
        assert result.backoff  # asked again, with back-off
        await h.reconcile()
        assert h.warnings() == [REASON_UNDECIDED]  # said once
        assert not h.workloads() and not h.pods()
        # An unlabelled TFJob is not Kueue's: it runs.
        h.submit(name="free", labelled=False)
        await h.reconcile(name="free")
        assert [p["metadata"]["name"] for p in h.pods()] == ["free-worker-0"]
        # Kueue's ConfigMap appears (without tfjob): the held job gets the operator's Workload.
        h.kube.put(CONFIG_MAPS, _config_map(SHIPPED))
        h.clock.advance(10)
        await h.reconcile()
        [wl] = h.workloads()
        assert wl["metadata"]["ownerReferences"][0]["name"] == "tf"
        h.clock.advance(2)  # (a reason's change alone is written --status-coalesce later)
        await h.reconcile()
        assert _queued(h.status())["reason"] != REASON_UNDECIDED, h.status()


async def test_undecided_leaves_a_job_that_already_runs_alone() -> None:
    """Pods and no Workload of the operator's: Kueue admitted it (or it ran before); a failed
    read must not stop it."""
    async with kubeflow_controller(IntegrationMode.OPERATOR, None) as h:
        h.submit(labelled=False)
        await h.reconcile()
        assert len(h.pods()) == 1
        h.queueing.integrations.mode = IntegrationMode.AUTO
        doc = h.kube.objects[(TFJOBS.plural, NS, "tf")]
        doc["metadata"]["labels"] = {QUEUE: "queue"}
        h.kube.put(TFJOBS, doc)
        await h.reconcile()
        assert len(h.pods()) == 1 and not h.workloads()
        assert REASON_UNDECIDED not in h.warnings()
