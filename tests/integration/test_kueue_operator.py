"""The operator admits jobs through the real Kueue v0.19.2 (issue 25, points 2 and 4).

The control plane's KWOK nodes run the pods (they end through the annotations of
``kwok_stages.yaml``); Kueue (the session's ``kueue`` fixture) admits the Workloads the
operator creates. Each test has its own ResourceFlavor, ClusterQueue (a small CPU quota),
LocalQueue ``queue`` and priority classes, deleted after it; the operator is started after
Kueue, so it finds Kueue's Workload API at start.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.operator_helpers import (
    Namespace,
    Operator,
    Operators,
    condition,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import (
    ControlPlane,
    Kueue,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
    create_workload_priority_class,
)
from trainjobs.testing._kueue_objects import workloads_owned_by

pytestmark = pytest.mark.integration

WORKLOADS = "workloads.v1beta2.kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass
class Queue:
    """One test's Kueue objects, and the operator watching its namespace."""

    ns: Namespace
    flavor: str
    low: str
    high: str
    operator: Operator

    def tfjob(self, name: str, cpu: str, run: str = "3s", workers: int = 1,
              priority: str | None = None, **extra: Any) -> dict[str, Any]:
        labels = {QUEUE_LABEL: "queue"}
        if priority:
            labels[PRIORITY_LABEL] = priority
        manifest = job("TfJob", name, {"Worker": replica(
            "TfJob", workers, exit_code=0, run=run,
            resources={"requests": {"cpu": cpu}}, **extra)})
        manifest["metadata"]["labels"] = labels
        return self.ns.create(manifest)

    def workloads(self, uid: str) -> list[dict[str, Any]]:
        return workloads_owned_by(self.ns.plane, self.ns.name, uid)

    def queued(self, name: str, contains: str, timeout: float = 60) -> dict[str, Any]:
        """Wait until the TfJob is Queued with `contains` in its Queued condition."""
        def check() -> dict[str, Any] | None:
            status = self.ns.status("TfJob", name)
            cond = condition(status, "Queued")
            if status.get("state") == "Queued" and cond and contains in cond["message"]:
                return status
            return None

        found: dict[str, Any] = wait_for(
            check, lambda: f"TfJob {name} Queued with {contains!r}: "
            f"{json.dumps(self.ns.status('TfJob', name))}", timeout)
        return found


@pytest.fixture
def queue(kube_cluster: ControlPlane, kueue: Kueue, bare_ns: Namespace,
          operators: Operators) -> Iterator[Queue]:
    """A ClusterQueue of 4 CPU in one flavor, preempting lower priorities within it, the
    LocalQueue ``queue`` in the test's namespace, priority classes low and high, and an
    operator started after them."""
    suffix = uuid.uuid4().hex[:8]
    name = f"ko-{suffix}"
    classes = {f"low-{suffix}": 100, f"high-{suffix}": 1000}
    create_resource_flavor(kube_cluster, name)
    for cls, value in classes.items():
        create_workload_priority_class(kube_cluster, cls, value)
    try:
        create_cluster_queue(kube_cluster, name, quotas={name: {"cpu": "4"}},
                             preemption={"withinClusterQueue": "LowerPriority"})
        create_local_queue(kube_cluster, bare_ns.name, "queue", name)
        operator = operators.start()
        yield Queue(bare_ns, name, *classes, operator=operator)
    finally:
        bare_ns.kubectl("delete", "tfjobs,mxjobs", "--all", "--wait=false", check=False)
        wait_for(lambda: not (bare_ns.get_path(
            f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{bare_ns.name}/workloads") or {}
        ).get("items"), "the test's Workloads to go with their jobs", timeout=60)
        bare_ns.kubectl("delete", "localqueue", "queue", "--ignore-not-found", check=False)
        for kind, obj in (("clusterqueue", name), ("resourceflavor", name),
                          *(("workloadpriorityclass", c) for c in classes)):
            kube_cluster.kubectl("delete", kind, obj, "--ignore-not-found", "--wait=true",
                                 check=False, timeout=60)


def test_second_job_waits_for_quota_with_kueues_words_then_runs(queue: Queue) -> None:
    """(a) Two jobs that each need 3 of the 4 CPU: one runs, the other is Queued with no pod
    and Kueue's reason, visible in `kubectl get`, then runs when the first has finished."""
    ns = queue.ns
    first = queue.tfjob("first", cpu="3", run="6s")
    ns.wait_state("TfJob", "first", "Running", timeout=60)
    second = queue.tfjob("second", cpu="3")
    status = queue.queued("second", "insufficient unused quota")
    assert not ns.pods("second") and not ns.services("second")
    assert status.get("startTime") is None
    table = ns.kubectl("get", "tfjob", "second", "--no-headers").stdout.split()
    assert table[1] == "Queued", table
    # The first's pods carry Kueue's labels; its Workload shows in its status.
    (pod,) = ns.pods("first")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"] == queue.flavor
    (wl,) = queue.workloads(first["metadata"]["uid"])
    owned = ns.status("TfJob", "first").get("ownedObjects") or []
    assert {"kind": "Workload", "name": wl["metadata"]["name"]}.items() <= next(
        o for o in owned if o["kind"] == "Workload").items(), owned

    ns.wait_finished("TfJob", "first", timeout=60)
    (wl,) = queue.workloads(first["metadata"]["uid"])
    finished = next(c for c in wl["status"]["conditions"] if c["type"] == "Finished")
    assert finished["status"] == "True" and finished["reason"] == "Succeeded"
    assert "kueue.x-k8s.io/resource-in-use" not in wl["metadata"].get("finalizers", [])
    status = ns.wait_finished("TfJob", "second", timeout=60)
    assert status["state"] == "Succeeded", status
    queued = condition(status, "Queued")
    assert queued is not None and queued["status"] == "False" and queued["reason"] == "Admitted"
    assert status["replicaStatuses"]["Worker"]["restarts"] == 0
    (wl,) = queue.workloads(second["metadata"]["uid"])
    assert wl["metadata"]["uid"]  # one Workload, never recreated
    assert not queue.operator.problems()


def test_job_deleted_while_queued_leaves_no_workload(queue: Queue) -> None:
    """(h) A job that can never be admitted (5 CPU, the quota is 4) waits; deleted, its
    Workload goes too (the operator removes Kueue's finalizer, as Kueue does for its jobs)."""
    ns = queue.ns
    created = queue.tfjob("big", cpu="5")
    queue.queued("big", "insufficient quota")
    uid = created["metadata"]["uid"]
    assert len(queue.workloads(uid)) == 1 and not ns.pods("big")
    ns.kubectl("delete", "tfjob", "big", "--wait=true")
    wait_for(lambda: not queue.workloads(uid), "the deleted job's Workload to go", timeout=60)
    assert not queue.operator.problems()
