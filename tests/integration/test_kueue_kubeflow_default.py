"""Kubeflow's TFJob and MXJob behind Kueue v0.19.2 in its default configuration (issue 35):
``kubeflow.org/tfjob`` is not among its ``integrations.frameworks``, so Kueue's webhook does not
suspend a labelled TFJob and its controller makes no Workload for it. The operator, started
with ``--enable-plugins kubeflow`` and its default ``--kueue-kubeflow-integration=auto``, reads
Kueue's Configuration from the ConfigMap ``kueue-system/kueue-manager-config`` (the harness
writes the file Kueue runs with there, as a real install mounts it) and admits the TFJob
through a Workload of its own, as it does the MXJob, whose integration Kueue removed in v0.11.

The other configuration, ``kubeflow.org/tfjob`` enabled (Kueue's path, no Workload of the
operator's), is tests/integration/test_kueue_kubeflow.py with the same operator flags.
"""

from __future__ import annotations

import contextlib
import json
import time
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

TFJOBS, MXJOBS = "tfjobs.kubeflow.org", "mxjobs.kubeflow.org"
#: Kueue's built-in default (apis/config/v1beta2/defaults.go); its shipped configuration adds
#: other integrations, none of them Kubeflow's TFJob.
DEFAULT_FRAMEWORKS = ("batch/job",)


@pytest.fixture(scope="module")
def default_kueue(kueue: Kueue, kubeflow_crds: list[str]) -> Iterator[Kueue]:
    """The session's Kueue without its tfjob integration (a restart only if another module
    left it otherwise), the Kubeflow CRDs installed."""
    assert TFJOBS in kubeflow_crds and MXJOBS in kubeflow_crds
    with kueue.configured(kueue.with_options(frameworks=DEFAULT_FRAMEWORKS)):
        yield kueue


@dataclass
class Queue:
    ns: Namespace
    flavor: str
    nodes: list[str]
    operator: Operator

    @property
    def plane(self) -> ControlPlane:
        return self.ns.plane

    def create(self, kind: str, name: str, replicas: dict[str, int], cpu: str = "500m",
               exit_code: int | None = None) -> dict[str, Any]:
        """An unchanged kubeflow.org/v1 job labelled for the LocalQueue ``queue``, whose pods
        end with `exit_code` (never, when None)."""
        field = "tfReplicaSpecs" if kind == "TFJob" else "mxReplicaSpecs"
        specs = {rtype: replica("TfJob" if kind == "TFJob" else "MxJob", n,
                                exit_code=exit_code, resources={"requests": {"cpu": cpu}})
                 for rtype, n in replicas.items()}
        created: dict[str, Any] = json.loads(self.ns.kubectl(
            "create", "-o", "json", "-f", "-", input=json.dumps({
                "apiVersion": "kubeflow.org/v1", "kind": kind,
                "metadata": {"name": name, "labels": {QUEUE_LABEL: "queue"}},
                # cleanPodPolicy None: the test counts every pod when the job has Succeeded;
                # with the default (Running) a replica still running then, such as an MXJob's
                # Scheduler (ps-lite's never exits), is deleted, or not, as the race goes.
                "spec": {field: specs, "runPolicy": {"cleanPodPolicy": "None"}}})).stdout)
        return created

    def status(self, kind: str, name: str) -> dict[str, Any]:
        found = self.ns.get_path(
            f"/apis/kubeflow.org/v1/namespaces/{self.ns.name}/{kind.lower()}s/{name}")
        assert found is not None, f"{kind} {name} is gone"
        status: dict[str, Any] = found.get("status") or {}
        return status

    def wait_true(self, kind: str, name: str, ctype: str, timeout: float = 60
                  ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            status = self.status(kind, name)
            cond = condition(status, ctype)
            return status if cond and cond["status"] == "True" else None

        found: dict[str, Any] = wait_for(check, lambda: f"{kind} {name} {ctype}: "
                                         f"{json.dumps(self.status(kind, name))}; pods "
                                         f"{self.ns.pod_summary(name)}", timeout)
        return found

    def operators_workload(self, created: dict[str, Any], until: Any, what: str
                           ) -> dict[str, Any]:
        """The job's one Workload, the operator's (its job-name label; none of Kueue's)."""
        uid = created["metadata"]["uid"]
        wl = wait_for_workload(self.plane, self.ns.name, uid, until, what, timeout=60)
        owned = workloads_owned_by(self.plane, self.ns.name, uid)
        assert [w["metadata"]["name"] for w in owned] == [wl["metadata"]["name"]], owned
        assert wl["metadata"]["labels"][LABEL_JOB] == created["metadata"]["name"], wl["metadata"]
        (owner,) = wl["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["apiVersion"], owner["uid"]) == (
            created["kind"], "kubeflow.org/v1", uid), owner
        return wl


@pytest.fixture
def make_queue(kube_cluster: ControlPlane, default_kueue: Kueue, bare_ns: Namespace,
               operators: Operators) -> Iterator[Any]:
    """A function giving `tainted_queue` of `cpu` and an operator with the Kubeflow plugin
    (and `flags`); the jobs are deleted after the test."""
    with contextlib.ExitStack() as stack:
        def make(cpu: str, *flags: str) -> Queue:
            q = stack.enter_context(tainted_queue(kube_cluster, bare_ns.name, "kfd", cpu=cpu))
            operator = operators.start("--enable-plugins", "kubeflow", *flags)
            return Queue(bare_ns, q.flavor, q.nodes, operator)

        try:
            yield make
        finally:
            for plural in (TFJOBS, MXJOBS):
                bare_ns.kubectl("delete", plural, "--all", "--wait=true", check=False,
                                timeout=60)


def test_default_kueue_tfjob_and_mxjob_are_admitted_through_the_operators_workloads(
        make_queue: Any) -> None:
    """A labelled TFJob (1 Worker) and MXJob (Scheduler, Server, Worker), 500m each, in a
    ClusterQueue of 4 CPU: Kueue's webhook leaves the TFJob unsuspended (its integration is
    off), the operator makes one Workload for each (labelled, owned by the job; Kueue none),
    Kueue admits both, the pods run on the flavor's tainted nodes, the jobs Succeed and the
    Workloads are Finished."""
    queue: Queue = make_queue("4")
    ns = queue.ns
    tf = queue.create("TFJob", "tf", {"Worker": 1}, exit_code=0)
    assert "suspend" not in (tf["spec"].get("runPolicy") or {}), tf["spec"]  # no Kueue webhook
    mx = queue.create("MXJob", "mx", {"Scheduler": 1, "Server": 1, "Worker": 1}, exit_code=0)
    for created in (tf, mx):
        wl = queue.operators_workload(created, lambda w: condition_true(w, "Admitted"),
                                      f"the operator's Workload of {created['kind']} admitted")
        assert wl["spec"]["queueName"] == "queue"
    assert [(p["name"], p["count"]) for p in queue.operators_workload(
        tf, lambda w: True, "")["spec"]["podSets"]] == [("worker", 1)]
    for kind, name, count in (("TFJob", "tf", 1), ("MXJob", "mx", 3)):
        done = queue.wait_true(kind, name, "Succeeded", timeout=90)
        assert condition(done, "Failed") is None, done
        pods = ns.pods(name)
        assert len(pods) == count, ns.pod_summary(name)
        for pod in pods:
            spec = pod["spec"]
            assert spec.get("nodeSelector", {}).get("pool") == queue.flavor, spec
            assert spec.get("nodeName") in queue.nodes, spec.get("nodeName")
    for created in (tf, mx):
        queue.operators_workload(created, lambda w: condition_true(w, "Finished"),
                                 f"the operator to finish the Workload of {created['kind']}")
    assert not queue.operator.problems()


def test_default_kueue_a_tfjob_whose_queue_has_no_quota_is_held_and_never_starts(
        make_queue: Any) -> None:
    """A ClusterQueue of 0 CPU: the labelled TFJob's Workload (the operator's) stays pending,
    QuotaReserved False with Kueue's reason; the TFJob shows Queued with it and never has a
    pod, Service or Running condition, watched for 15 s after Kueue said it does not fit."""
    queue: Queue = make_queue("0")
    ns = queue.ns
    tf = queue.create("TFJob", "held", {"Worker": 1}, cpu="1")
    wl = queue.operators_workload(
        tf, lambda w: (c := workload_condition(w, "QuotaReserved")) is not None and not c.true
        and c.reason == "Pending", "the operator's Workload refused quota (Pending)")
    assert not condition_true(wl, "Admitted"), wl["status"]
    # The TFJob's Queued condition carries Kueue's reason and words once the Workload has them.
    cond = wait_for(lambda: (c := condition(queue.status("TFJob", "held"), "Queued")) is not None
                    and c["status"] == "True" and "couldn't assign flavors" in c["message"]
                    and c, lambda: f"the TFJob Queued with Kueue's words: "
                    f"{queue.status('TFJob', 'held')}", timeout=30)
    assert cond["reason"] == "Pending", cond
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert not ns.pods("held") and not ns.services("held"), ns.pod_summary("held")
        status = queue.status("TFJob", "held")
        assert condition(status, "Running") is None, status
        time.sleep(1)
    assert condition(queue.status("TFJob", "held"), "Queued")["status"] == "True"  # type: ignore[index]
    # Not even a pod made and deleted between two looks: no event names one.
    assert not [e for e in ns.events() if e["involvedObject"].get("kind") == "Pod"
                and e["involvedObject"].get("name", "").startswith("held-")]
    assert not queue.operator.problems()


def test_an_operator_that_cannot_read_kueues_configuration_holds_the_tfjob(
        make_queue: Any) -> None:
    """`auto` pointed at a ConfigMap that does not exist: the labelled TFJob gets no Workload
    (neither the operator's nor Kueue's) and no pod, shows Queued with reason
    KueueIntegrationUnknown naming the ConfigMap and what to set, and a Warning event; the
    MXJob, which only the operator can admit, runs."""
    queue: Queue = make_queue("4", "--kueue-config-map", "kueue-system/absent")
    ns = queue.ns
    tf = queue.create("TFJob", "unsure", {"Worker": 1})
    queued = queue.wait_true("TFJob", "unsure", "Queued")
    cond = condition(queued, "Queued")
    assert cond is not None and cond["reason"] == "KueueIntegrationUnknown", cond
    for part in ("ConfigMap kueue-system/absent not found", "--kueue-kubeflow-integration",
                 "kueue.kubeflowIntegration"):
        assert part in cond["message"], cond["message"]
    ns.wait_event("unsure", "KueueIntegrationUnknown")
    mx = queue.create("MXJob", "mx", {"Scheduler": 1, "Server": 1, "Worker": 1}, exit_code=0)
    queue.wait_true("MXJob", "mx", "Succeeded", timeout=90)
    assert queue.operators_workload(mx, lambda w: condition_true(w, "Finished"), "")
    assert not workloads_owned_by(queue.plane, ns.name, tf["metadata"]["uid"])
    assert not ns.pods("unsure")
    assert not queue.operator.problems()
