"""trainjobs.kueue against the real Kueue v0.19.2 (the ``kueue`` fixture), no operator: a small
driver performs the one write `decide` asks for (as the controller will), and the job's pods
are stood for by the flags `JobState` takes (active, ready, finished). What is proven: Kueue
admits and queues the Workloads trainjobs builds (with its own message for the queued one),
the flavor's node labels and tolerations reach the `Admission`, Kueue's webhook accepts every
status write (PodsReady, Finished, the quota release after an eviction), a preemption and a
waitForPodsReady timeout come back as evictions and the evicted job is admitted again, and a
job deleted while queued leaves no Workload behind.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.operator_helpers import Namespace, wait_for
from trainjobs.core.render import render_job
from trainjobs.core.validation import parse_job
from trainjobs.kueue import constants as k
from trainjobs.kueue.model import Workload, parse_resource_flavor, parse_workload
from trainjobs.kueue.reconcile import (
    Action,
    ApplyCondition,
    CreateWorkload,
    DeleteWorkloads,
    JobState,
    PatchWorkload,
    Step,
    decide,
    finalize_orphan,
)
from trainjobs.kueue.workload import PriorityClasses, job_pod_sets
from trainjobs.plugin.manager import load_plugins
from trainjobs.testing import (
    ControlPlane,
    Kueue,
    WaitForPodsReady,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
    create_workload_priority_class,
)

pytestmark = pytest.mark.integration

PLUGINS = load_plugins()
WORKLOADS = "workloads.v1beta2.kueue.x-k8s.io"
TOLERATION = {"key": "pool-taint", "operator": "Exists", "effect": "NoSchedule"}


class Driver:
    """The controller's part, minus pods: read the job and its Workloads, `decide`, perform
    the action it returns (one API call), return the step."""

    def __init__(self, ns: Namespace, flavor: str, low: str, high: str) -> None:
        self.ns, self.flavor, self.low, self.high = ns, flavor, low, high
        self.classes = PriorityClasses(workload={low: 100, high: 1000})

    def create(self, name: str, priority: str, cpu: str = "1") -> None:
        spec = {t: {"replicas": 1, "template": {"spec": {"containers": [{
            "name": "mxnet", "image": "example.invalid/mxnet:1",
            "resources": {"requests": {"cpu": cpu}}}]}}}
            for t in ("Scheduler", "Server", "Worker")}
        doc = {"apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob",
               "metadata": {"name": name, "labels": {k.LABEL_QUEUE_NAME: "queue",
                                                     k.LABEL_PRIORITY_CLASS: priority}},
               "spec": {"replicaSpecs": spec}}
        self.ns.kubectl("create", "-f", "-", input=json.dumps(doc))

    def owned(self, name: str) -> list[Workload]:
        listing = self.ns.get_path(
            f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{self.ns.name}/workloads") or {}
        return [parse_workload(w) for w in listing.get("items", [])
                if any(o.get("controller") and o.get("kind") == "MxJob" and o.get("name") == name
                       for o in w["metadata"].get("ownerReferences") or [])]

    def state(self, name: str, active: bool, ready: bool,
              finished: tuple[bool, str] | None) -> JobState:
        obj = self.ns.get_path(f"/apis/trainjobs.io/v1alpha1/namespaces/{self.ns.name}"
                               f"/mxjobs/{name}")
        job = parse_job({key: obj[key] for key in ("apiVersion", "kind", "metadata", "spec")},
                        PLUGINS)
        framework = PLUGINS.framework_for("MxJob")
        assert framework is not None
        sets = tuple(job_pod_sets(job, framework, render_job(job, framework, PLUGINS)))
        return JobState(job, sets, active, ready, finished)

    def step(self, name: str, active: bool = False, ready: bool = False,
             finished: tuple[bool, str] | None = None) -> Step:
        flavors = {f["metadata"]["name"]: parse_resource_flavor(f) for f in self.ns.get_path(
            "/apis/kueue.x-k8s.io/v1beta2/resourceflavors")["items"]}
        step = decide(self.state(name, active, ready, finished), self.owned(name), flavors,
                      self.classes, datetime.now(UTC))
        self.perform(step.action)
        return step

    def perform(self, action: Action | None) -> None:
        if isinstance(action, CreateWorkload):
            self.ns.kubectl("create", "-f", "-", input=json.dumps(action.manifest))
        elif isinstance(action, ApplyCondition):
            # No resourceVersion: never refused with 409 (what the operator relies on).
            self.ns.kubectl("apply", "--server-side", "--force-conflicts",
                            f"--field-manager={action.field_manager}", "--subresource=status",
                            "-f", "-", input=json.dumps(action.body(self.ns.name)))
        elif isinstance(action, PatchWorkload):
            extra = [f"--subresource={action.subresource}"] if action.subresource else []
            # A 409 (the Workload changed since it was read) is retried by the next step.
            done = self.ns.kubectl("patch", WORKLOADS, action.name, "--type=merge", "-p",
                                   json.dumps(action.patch), *extra, check=False)
            assert done.returncode == 0 or "the object has been modified" in done.stderr, (
                done.stderr)
        elif isinstance(action, DeleteWorkloads):
            for wl in action.workloads:
                self.ns.kubectl("patch", WORKLOADS, wl.metadata.name, "--type=merge", "-p",
                                json.dumps({"metadata": {"finalizers": []}}))
                self.ns.kubectl("delete", WORKLOADS, wl.metadata.name, "--wait=false")

    def until(self, name: str, done: Callable[[Step], bool], what: str, timeout: float = 60.0,
              **flags: Any) -> Step:
        last: list[Step] = []

        def once() -> Step | None:
            step = self.step(name, **flags)
            last[:] = [step]
            return step if done(step) and step.action is None else None

        return wait_for(once, lambda: f"{what}; last step: {last}", timeout=timeout,
                        interval=0.5)


def admitted(step: Step) -> bool:
    return step.admission is not None and step.admission.admitted


def evicted_by(reason: str) -> Callable[[Step], bool]:
    return lambda s: (s.admission is not None and s.admission.eviction is not None
                      and s.admission.eviction.reason == reason)


@pytest.fixture
def queue(kube_cluster: ControlPlane, kueue: Kueue, bare_ns: Namespace) -> Iterator[Driver]:
    """A ClusterQueue of 4 CPU in one flavor (node labels and a toleration), preempting lower
    priorities, a LocalQueue `queue` in the test's namespace, priority classes low and high."""
    suffix = uuid.uuid4().hex[:8]
    name = f"kd-{suffix}"
    low, high = f"low-{suffix}", f"high-{suffix}"
    classes = {low: 100, high: 1000}
    create_resource_flavor(kube_cluster, name, node_labels={"pool": name},
                           tolerations=[TOLERATION])
    for cls, value in classes.items():
        create_workload_priority_class(kube_cluster, cls, value)
    try:
        create_cluster_queue(kube_cluster, name, quotas={name: {"cpu": "4"}},
                             preemption={"withinClusterQueue": "LowerPriority"})
        create_local_queue(kube_cluster, bare_ns.name, "queue", name)
        yield Driver(bare_ns, name, low, high)
    finally:
        bare_ns.kubectl("delete", "mxjobs", "--all", "--wait=false", check=False)
        listing = bare_ns.get_path(
            f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{bare_ns.name}/workloads") or {}
        for wl in listing.get("items", []):
            bare_ns.kubectl("patch", WORKLOADS, wl["metadata"]["name"], "--type=merge", "-p",
                            '{"metadata":{"finalizers":[]}}', check=False)
            bare_ns.kubectl("delete", WORKLOADS, wl["metadata"]["name"], "--wait=false",
                            check=False)
        bare_ns.kubectl("delete", "localqueue", "queue", "--ignore-not-found", check=False)
        for kind, obj in (("clusterqueue", name), ("resourceflavor", name),
                          *(("workloadpriorityclass", c) for c in classes)):
            kube_cluster.kubectl("delete", kind, obj, "--ignore-not-found", "--wait=true",
                                 check=False, timeout=60)


def test_queued_admitted_finished_and_deleted_while_queued(queue: Driver) -> None:
    low = queue.low
    queue.create("first", low)
    first = queue.until("first", admitted, "the first job to be admitted")
    assert first.admission is not None
    worker = first.admission.pod_sets["Worker"]
    assert worker.node_selector == {"pool": queue.flavor}
    assert [t.manifest() for t in worker.tolerations] == [TOLERATION]
    assert worker.labels[k.LABEL_PODSET] == "worker"
    # What the API server stored (with the CRD's defaults) still matches the job: the same
    # Workload after further passes, never deleted and created again.
    (created,) = queue.owned("first")

    # 3 of the 4 CPU are taken: the second waits, in Kueue's words.
    queue.create("second", low)
    second = queue.until("second", lambda s: s.admission is not None
                         and "insufficient unused quota" in s.admission.message,
                         "the second job to wait for quota")
    assert second.admission is not None and not second.admission.admitted
    assert second.admission.eviction is None

    # The first runs, then succeeds: Finished releases its quota, the second is admitted.
    queue.until("first", admitted, "PodsReady reported", active=True, ready=True)
    (wl,) = queue.owned("first")
    assert wl.is_true(k.COND_PODS_READY)
    assert wl.metadata.uid == created.metadata.uid
    queue.until("first", lambda s: True, "the first to finish",
                finished=(True, "MxJob first succeeded"))
    (wl,) = queue.owned("first")
    assert wl.is_true(k.COND_FINISHED) and k.FINALIZER_RESOURCE_IN_USE not in (
        wl.metadata.finalizers)
    queue.until("second", admitted, "the second job to be admitted once the first finished")

    # A job deleted while queued leaves no Workload behind (its finalizer is removed).
    queue.create("third", low)
    queue.until("third", lambda s: s.admission is not None and not s.admission.admitted
                and "insufficient unused quota" in s.admission.message, "the third to wait")
    queue.ns.kubectl("delete", "mxjob", "third", "--wait=false")

    def gone() -> bool:
        for orphan in queue.owned("third"):
            queue.perform(finalize_orphan(orphan, datetime.now(UTC)))
        return not queue.owned("third")

    wait_for(gone, "the deleted job's Workload to go", timeout=60)


def test_preempted_job_is_evicted_releases_its_quota_and_is_admitted_again(
        queue: Driver) -> None:
    low, high = queue.low, queue.high
    queue.create("low", low)
    queue.until("low", admitted, "the low-priority job to be admitted")
    queue.until("low", admitted, "the low job running", active=True, ready=True)
    queue.create("high", high)
    queue.step("high")
    # While the low job's pods are still there, it must stop but keeps its quota.
    evicted = queue.until("low", evicted_by("Preempted"), "the low job to be preempted",
                          active=True, ready=True)
    assert evicted.admission is not None and not evicted.admission.admitted
    assert evicted.admission.eviction is not None
    assert "Preempted to accommodate a workload" in evicted.admission.eviction.message
    (wl,) = queue.owned("low")
    assert wl.is_true(k.COND_QUOTA_RESERVED)
    # Its pods gone, the quota is released as Kueue's job reconciler releases it.
    queue.until("low", evicted_by("Preempted"), "the quota release")
    (wl,) = queue.owned("low")
    assert not wl.is_true(k.COND_QUOTA_RESERVED) and wl.status.admission is None
    assert wl.is_true(k.COND_REQUEUED)
    queue.until("high", admitted, "the high-priority job to be admitted")
    # The high one finishes; the low one is admitted again.
    queue.until("high", lambda s: True, "the high job to finish",
                finished=(True, "done"))
    again = queue.until("low", admitted, "the low job to be admitted again")
    assert again.admission is not None and again.admission.eviction is None


def test_pods_that_never_get_ready_are_evicted_by_wait_for_pods_ready(
        kueue: Kueue, queue: Driver) -> None:
    options = kueue.with_options(wait_for_pods_ready=WaitForPodsReady(timeout="10s"))
    with kueue.configured(options):
        queue.create("slow", queue.low)
        queue.until("slow", admitted, "the job to be admitted")
        queue.until("slow", evicted_by("PodsReadyTimeout"), "the PodsReady timeout",
                    timeout=90, active=True, ready=False)
        queue.until("slow", evicted_by("PodsReadyTimeout"), "the quota release")
        (wl,) = queue.owned("slow")
        assert wl.status.admission is None
        assert not wl.is_true(k.COND_QUOTA_RESERVED)
