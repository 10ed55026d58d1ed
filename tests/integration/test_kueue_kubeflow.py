"""Kubeflow's TFJob admitted, started and evicted by Kueue's own ``kubeflow.org/tfjob``
integration (issue 25, points 3 and 4(e)), proven with Kueue's code, not ours.

Kueue v0.19.2 (the session's ``kueue`` fixture, restarted for this module with
``kubeflow.org/tfjob`` among its ``integrations.frameworks``, the Kubeflow CRDs installed
first) and an operator started with ``--enable-plugins kubeflow`` (and its default
``--kueue-kubeflow-integration=auto``, which reads that Configuration from Kueue's
ConfigMap). An unchanged ``kubeflow.org/v1`` TFJob carrying ``kueue.x-k8s.io/queue-name`` is
suspended by Kueue's webhook at creation; Kueue's tfjob controller makes the Workload (the
operator makes none: Kueue's integration of the kind is on) and admits it by writing the
flavor into the templates and ``runPolicy.suspend: false``; preempted by a higher-priority
TFJob, Kueue suspends it again. The operator must then do what training-operator v1.9.4's
``ReconcileJobs`` does on suspend (pods and Services deleted whatever ``cleanPodPolicy`` says,
``active`` 0, the Suspended condition with its reason and message) and on resume
(``startTime`` reset, pods from the templates Kueue edited), or Kueue could neither release
the quota nor start the job again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.kueue_queue import tainted_queue
from tests.integration.operator_helpers import (
    LABEL_JOB,
    Namespace,
    Operator,
    Operators,
    condition,
    replica,
    wait_for,
)
from trainjobs.testing import (
    QUEUE_LABEL,
    ControlPlane,
    Kueue,
    condition_true,
    wait_for_workload,
    workload_condition,
    workloads_owned_by,
)

pytestmark = pytest.mark.integration

PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TFJOBS = "tfjobs.kubeflow.org"
FRAMEWORKS = ("batch/job", "kubeflow.org/tfjob")


@pytest.fixture(scope="module")
def tfjob_kueue(kueue: Kueue, kubeflow_crds: list[str]) -> Iterator[Kueue]:
    """The session's Kueue with its tfjob integration, for this module (the CRDs first:
    Kueue sets up an integration whose CRD is missing only after a back-off)."""
    assert "tfjobs.kubeflow.org" in kubeflow_crds
    with kueue.configured(kueue.with_options(frameworks=FRAMEWORKS)):
        yield kueue


@dataclass
class Queue:
    """One test's Kueue objects and the operator (Kubeflow plugin on) watching its
    namespace."""

    ns: Namespace
    flavor: str
    low: str
    high: str
    nodes: list[str]
    operator: Operator

    @property
    def plane(self) -> ControlPlane:
        return self.ns.plane

    def create(self, name: str, cpu: str, priority: str,
               run_policy: dict[str, Any] | None = None) -> dict[str, Any]:
        """An unchanged kubeflow.org/v1 TFJob of one Worker asking `cpu`, whose pod runs
        until the test ends it (KWOK reads the annotations)."""
        worker = replica("TfJob", 1, exit_code=None, resources={"requests": {"cpu": cpu}})
        spec: dict[str, Any] = {"tfReplicaSpecs": {"Worker": worker}}
        if run_policy:
            spec["runPolicy"] = run_policy
        created: dict[str, Any] = json.loads(self.ns.kubectl(
            "create", "-o", "json", "-f", "-", input=json.dumps({
                "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                "metadata": {"name": name, "labels": {QUEUE_LABEL: "queue",
                                                      PRIORITY_LABEL: priority}},
                "spec": spec})).stdout)
        return created

    def get(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] | None = self.ns.get_path(
            f"/apis/kubeflow.org/v1/namespaces/{self.ns.name}/tfjobs/{name}")
        assert found is not None, f"TFJob {name} is gone"
        return found

    def status(self, name: str) -> dict[str, Any]:
        status: dict[str, Any] = self.get(name).get("status") or {}
        return status

    def wait_true(self, name: str, ctype: str, timeout: float = 60) -> dict[str, Any]:
        """Wait until the TFJob's condition `ctype` is True (a Failed one ends the wait)."""
        def check() -> dict[str, Any] | None:
            status = self.status(name)
            failed = condition(status, "Failed")
            if ctype != "Failed" and failed and failed["status"] == "True":
                raise AssertionError(f"TFJob {name} Failed: {json.dumps(status)}")
            cond = condition(status, ctype)
            return status if cond and cond["status"] == "True" else None

        found: dict[str, Any] = wait_for(check, lambda: f"TFJob {name} {ctype}: "
                                         f"{json.dumps(self.status(name))}; pods "
                                         f"{self.ns.pod_summary(name)}", timeout)
        return found

    def workload(self, uid: str, until: Any, what: str) -> dict[str, Any]:
        return wait_for_workload(self.plane, self.ns.name, uid, until, what, timeout=60)


@pytest.fixture
def queue(kube_cluster: ControlPlane, tfjob_kueue: Kueue, bare_ns: Namespace,
          operators: Operators) -> Iterator[Queue]:
    """`tainted_queue` (4 CPU, LocalQueue ``queue``, priorities low and high) and an operator
    with the Kubeflow plugin."""
    with tainted_queue(kube_cluster, bare_ns.name, "kf") as q:
        try:
            operator = operators.start("--enable-plugins", "kubeflow")
            yield Queue(bare_ns, q.flavor, q.low, q.high, q.nodes, operator)
        finally:
            bare_ns.kubectl("delete", TFJOBS, "--all", "--wait=true", check=False, timeout=60)


def _placed(queue: Queue, pod: dict[str, Any]) -> None:
    """The pod has the flavor's node label and toleration and is bound to its nodes."""
    spec = pod["spec"]
    assert spec.get("nodeSelector", {}).get("pool") == queue.flavor, spec.get("nodeSelector")
    assert {"key": "pool", "operator": "Equal", "value": queue.flavor,
            "effect": "NoSchedule"} in spec.get("tolerations", []), spec.get("tolerations")
    assert spec.get("nodeName") in queue.nodes, spec.get("nodeName")


def _from_template(pod: dict[str, Any], template: dict[str, Any]) -> None:
    """Everything the (Kueue-edited) template holds of labels, annotations, nodeSelector and
    tolerations is on the pod."""
    meta, spec = template.get("metadata") or {}, template.get("spec") or {}
    for key, have in (("labels", pod["metadata"].get("labels") or {}),
                      ("annotations", pod["metadata"].get("annotations") or {}),
                      ("nodeSelector", pod["spec"].get("nodeSelector") or {})):
        want = (meta if key != "nodeSelector" else spec).get(key) or {}
        assert want.items() <= have.items(), (key, want, have)
    for toleration in spec.get("tolerations") or []:
        assert toleration in pod["spec"].get("tolerations", []), (toleration, pod["spec"])


def _running_pod(queue: Queue, name: str) -> dict[str, Any]:
    pods: list[dict[str, Any]] = wait_for(
        lambda: [p for p in queue.ns.pods(name) if p["status"].get("phase") == "Running"
                 and not p["metadata"].get("deletionTimestamp")] or None,
        lambda: f"a running pod of {name}: {queue.ns.pod_summary(name)}", timeout=60)
    (pod,) = pods
    return pod


def test_kueue_admits_evicts_and_readmits_an_unchanged_kubeflow_tfjob(queue: Queue) -> None:
    """(e) The low TFJob (3 of the 4 CPU, cleanPodPolicy None) is suspended by Kueue's webhook,
    admitted by Kueue's tfjob controller on a Workload of Kueue's (none of the operator's),
    and runs on the flavor's nodes. A high one preempts it: Kueue suspends it, and the
    operator deletes its pod and Service (cleanPodPolicy None notwithstanding), reports
    active 0 and Suspended as training-operator does (reason TFJobSuspended, Running False),
    not Failed, no restart; Kueue then releases its quota and the high one runs. Re-admitted
    once the high one has finished, it runs again on the flavor's nodes with a new
    startTime (TFJobResumed), and Succeeds; Kueue finishes its Workload."""
    ns = queue.ns
    created = queue.create("low", cpu="3", priority=queue.low,
                           run_policy={"cleanPodPolicy": "None"})
    uid = created["metadata"]["uid"]
    assert created["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook
    wl = queue.workload(uid, lambda w: condition_true(w, "Admitted"),
                        "Kueue's Workload of the low TFJob to be admitted")
    assert LABEL_JOB not in (wl["metadata"].get("labels") or {}), wl["metadata"]
    (owner,) = wl["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["apiVersion"]) == ("TFJob", "kubeflow.org/v1"), owner
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("worker", 1)]

    first = queue.wait_true("low", "Running")
    pod = _running_pod(queue, "low")
    _placed(queue, pod)
    assert [s["metadata"]["name"] for s in ns.services("low")] == ["low-worker-0"]
    job = queue.get("low")
    assert job["spec"]["runPolicy"]["suspend"] is False
    template = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert template["spec"]["nodeSelector"] == {"pool": queue.flavor}  # Kueue's edit
    _from_template(pod, template)
    assert first["replicaStatuses"]["Worker"]["active"] == 1

    high = queue.create("high", cpu="3", priority=queue.high)
    suspended = queue.wait_true("low", "Suspended")
    evicted_job = queue.get("low")
    assert evicted_job["spec"]["runPolicy"]["suspend"] is True  # by Kueue
    # ... which restored the template as written (RestorePodSetsInfo) in the same patch: the
    # flavor comes back on re-admission only if the operator reads the template again.
    assert "pool" not in (evicted_job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
                          .get("nodeSelector") or {}), evicted_job["spec"]
    wait_for(lambda: not ns.pods("low") and not ns.services("low"),
             lambda: f"the preempted TFJob's pods and Services to go: "
             f"{ns.pod_summary('low')}", timeout=30)
    suspended = queue.status("low")
    cond = condition(suspended, "Suspended")
    assert cond is not None and (cond["reason"], cond["message"]) == (
        "TFJobSuspended", "TFJob low is suspended."), cond
    running = condition(suspended, "Running")
    assert running is not None and (running["status"], running["reason"], running["message"]) \
        == ("False", "TFJobSuspended", "TFJob low is suspended."), running
    assert condition(suspended, "Failed") is None, suspended
    worker = suspended["replicaStatuses"]["Worker"]
    assert (worker["active"], worker.get("failed", 0), worker["restarts"], worker["lost"]) == (
        0, 0, 0, 0), worker
    assert suspended["startTime"] == first["startTime"], suspended  # kept while suspended
    assert suspended.get("completionTime") is None, suspended
    evicted = workload_condition(queue.workload(
        uid, lambda w: (c := workload_condition(w, "Evicted")) is not None and c.true
        and c.reason == "Preempted", "the low Workload Evicted (Preempted)"), "Evicted")
    assert evicted is not None and "Preempted to accommodate a workload" in evicted.message
    # Kueue's job reconciler stopped the TFJob (its event), saying why.
    # (Waited for: Kueue's recorder sends events in the background, after the suspend that
    # the status above follows.)
    wait_for(lambda: any("Preempted to accommodate a workload" in e["message"]
                         for e in ns.events("low") if e["reason"] == "Stopped"),
             lambda: "Kueue's Stopped event: "
             f"{[(e['reason'], e['message']) for e in ns.events('low')]}", timeout=20)

    queue.wait_true("high", "Running")
    (high_pod,) = ns.pods("high")
    _placed(queue, high_pod)
    assert condition(queue.status("low"), "Suspended")["status"] == "True"  # type: ignore[index]
    ns.end_pod(high_pod["metadata"]["name"])
    queue.wait_true("high", "Succeeded")

    again = queue.wait_true("low", "Running", timeout=90)
    pod2 = _running_pod(queue, "low")
    assert pod2["metadata"]["uid"] != pod["metadata"]["uid"]
    _placed(queue, pod2)
    _from_template(pod2, queue.get("low")["spec"]["tfReplicaSpecs"]["Worker"]["template"])
    resumed = condition(again, "Suspended")
    assert resumed is not None and (resumed["status"], resumed["reason"], resumed["message"]) \
        == ("False", "TFJobResumed", "TFJob low is resumed."), resumed
    assert again["startTime"] > first["startTime"], (again["startTime"], first["startTime"])
    ns.end_pod(pod2["metadata"]["name"])
    done = queue.wait_true("low", "Succeeded")
    worker = done["replicaStatuses"]["Worker"]
    assert (worker["succeeded"], worker.get("failed", 0), worker["restarts"]) == (1, 0, 0), worker
    assert done.get("completionTime"), done
    queue.workload(uid, lambda w: condition_true(w, "Finished"),
                   "Kueue to finish the low TFJob's Workload")
    # Only Kueue's Workloads: the operator made none for either TFJob.
    for obj in (created, high):
        (owned,) = workloads_owned_by(queue.plane, ns.name, obj["metadata"]["uid"])
        assert LABEL_JOB not in (owned["metadata"].get("labels") or {}), owned["metadata"]
    reasons = ns.event_reasons("low")
    assert "TFJobSuspended" in reasons and "TFJobResumed" in reasons, reasons
    # The operator (--kueue-kubeflow-integration=auto, its default) read why: Kueue's
    # Configuration names kubeflow.org/tfjob (issue 35).
    (read,) = queue.operator.logged("^Kueue's integrations, from ConfigMap "
                                    "kueue-system/kueue-manager-config")
    assert "kubeflow.org/tfjob" in read["msg"].split(": ")[-1].split(", "), read
    assert not queue.operator.problems()
