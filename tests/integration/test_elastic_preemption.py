"""The ElasticDL demo on the real kube-scheduler (issue 14.2, 14.4), step by step.

Two KWOK nodes of 8 CPU of their own (tainted, so no other test's pod lands there);
PriorityClasses high and low; a TfJob whose Chief and 2 PS run at high priority and whose
4 Workers run at low priority, 2 CPU each (14 of 16 CPU). A Deployment of 4 high-priority
pods of 2 CPU then makes the scheduler preempt 3 Workers. The job goes on: Running with an
elasticPolicy (Restarting without one), the Replicas column and ReplicaLost events say so,
nothing counts as a failure. Each loss names its cause as the API gives it (issue 27.9), in the
ReplicaLost event and the status's lastLostReason: PreemptionByScheduler (the scheduler's
DisruptionTarget condition), Deleted for `kubectl delete pod` of a Worker (a replacement at
once), EvictionByEvictionAPI for an eviction (kubectl drain's way). kube-scheduler deletes a
victim by name and may do so twice (two preemptors chose it): the second DELETE can take the
victim's replacement, which carries no DisruptionTarget then; still Pending, it never ran and is
no loss; one that ran is lost, named Deleted (what the API says of that pod).
Scaling the Deployment down lets the Workers run again; the job returns to full strength and
succeeds. docs/scheduling.md has the same steps for a terminal.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.operator_helpers import (
    IMAGE,
    Namespace,
    condition,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import ClusterOptions, ControlPlane

pytestmark = pytest.mark.integration
CPU = "2"
TIMEOUT = 90


@dataclass(frozen=True)
class Pool:
    """Two small nodes for one test; pods get there with `placement`."""

    key: str
    high: str
    low: str

    @property
    def placement(self) -> dict[str, Any]:
        return {"nodeSelector": {self.key: "yes"},
                "tolerations": [{"key": self.key, "operator": "Exists",
                                 "effect": "NoSchedule"}]}


@pytest.fixture
def pool(kube_cluster: ControlPlane) -> Iterator[Pool]:
    tag = uuid.uuid4().hex[:6]
    key = f"trainjobs.io/pool-{tag}"
    nodes = kube_cluster.add_nodes(ClusterOptions(
        nodes=2, node_cpu="8", node_memory="32Gi", node_prefix=f"small-{tag}",
        node_labels={key: "yes"},
        node_taints=({"key": key, "value": "yes", "effect": "NoSchedule"},)))
    classes = {"high": (f"high-{tag}", 1000), "low": (f"low-{tag}", 100)}
    for name, value in classes.values():
        kube_cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}))
    try:
        yield Pool(key, classes["high"][0], classes["low"][0])
    finally:
        kube_cluster.kubectl("delete", "priorityclass", *(n for n, _ in classes.values()),
                             "--wait=false", check=False)
        kube_cluster.kubectl("delete", "node", *nodes, "--wait=false", check=False)


def _replica(pool: Pool, count: int, priority: str | None = None) -> dict[str, Any]:
    spec = replica("TfJob", count)
    pod = spec["template"]["spec"]
    pod.update(pool.placement, terminationGracePeriodSeconds=0)
    pod["containers"][0]["resources"] = {"requests": {"cpu": CPU}, "limits": {"cpu": CPU}}
    if priority is not None:
        pod["priorityClassName"] = priority
    return spec


def _tfjob(pool: Pool, name: str, elastic: bool) -> dict[str, Any]:
    workers = _replica(pool, 4, None if not elastic else pool.low)
    if elastic:
        workers["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 4}
    manifest = job("TfJob", name, {
        # Per role: the template's priorityClassName...
        "Chief": _replica(pool, 1, pool.high),
        "PS": _replica(pool, 2, pool.high),
        "Worker": workers,
    })
    if not elastic:
        # ...or schedulingPolicy.priorityClass for every replica whose template sets none.
        manifest["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": pool.low}}
    return manifest


def _deployment(ns: Namespace, pool: Pool, replicas: int) -> None:
    ns.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {
                     **pool.placement, "priorityClassName": pool.high,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "nginx", "image": IMAGE, "resources": {
                         "requests": {"cpu": CPU}, "limits": {"cpu": CPU}}}]}}}}))


def _running(ns: Namespace, name: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("priorityClassName", "")
            for p in ns.pods(name) if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")}


def _lost_events(ns: Namespace, name: str) -> list[str]:
    """The job's ReplicaLost messages in the order the operator recorded them (its events
    are created one after another; an etcd revision orders them, a timestamp in seconds not)."""
    events = [e for e in ns.events(name=name) if e["reason"] == "ReplicaLost"]
    events.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [e["message"] for e in events]


_LOST = re.compile(r"replica Worker \d+ \(pod (?P<pod>[^)]+)\) was lost: (?P<cause>.*)")


def _lost_upto(ns: Namespace, name: str, status: dict[str, Any]) -> list[str]:
    """The ReplicaLost messages, at least as many as `status` counts lost Workers; checks
    that its lastLostReason is the reason of the loss it counted last. The operator records
    one event per loss, in order, after the status write that counts it: the status's N-th
    loss is the N-th event. (A status naming one reason is not waited for: a later loss may
    replace it before a poll sees it, or before a coalesced write carries it.)"""
    worker = status["replicaStatuses"]["Worker"]
    count = worker["lost"]
    lost: list[str] = wait_for(
        lambda: m if len(m := _lost_events(ns, name)) >= count else None,
        lambda: f"{count} ReplicaLost events: {_lost_events(ns, name)}", 20)
    last = _LOST.match(lost[count - 1])
    assert last is not None, lost
    cause = last["cause"]
    reason = "Deleted" if "deleted by someone other than the operator" in cause \
        else cause.split(":", 1)[0]
    assert worker["lastLostReason"] == reason, (worker, lost)
    return lost


def _evict(ns: Namespace, pod: str) -> None:
    """POST the pod's eviction subresource, as `kubectl drain` does."""
    resp = ns.plane.api().request(
        "POST", f"/api/v1/namespaces/{ns.name}/pods/{pod}/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction",
         "metadata": {"name": pod, "namespace": ns.name}}, timeout=30)
    assert resp.status == 201, (resp.status, resp.body[:300])


def _status_where(ns: Namespace, name: str, what: str, test: Any) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = ns.status("TfJob", name)
        return status if test(status) else None
    return wait_for(check, lambda: f"{what}: {ns.status('TfJob', name)} pods "
                    f"{ns.pod_summary(name)}", TIMEOUT)


def _full_strength_and_succeed(ns: Namespace, name: str, seen: set[str]) -> dict[str, Any]:
    """Scale the Deployment down: the Workers run again, then everything ends well."""
    ns.kubectl("scale", "deployment", "nginx", "--replicas=0")
    status = _status_where(ns, name, "full strength", lambda s: s.get("replicaSummary") ==
                           "Chief 1/1, PS 2/2, Worker 4/4" and s.get("state") == "Running")
    for pod in sorted(_running(ns, name)):
        if "-worker-" in pod:
            ns.end_pod(pod, 0)
    ns.end_pod(f"{name}-chief-0", 0)
    status = ns.wait_state("TfJob", name, "Succeeded", timeout=TIMEOUT)
    assert "Failed" not in seen, seen
    return status


@pytest.mark.parametrize("elastic", [True, False], ids=["elastic", "not-elastic"])
def test_elasticdl_demo(ns: Namespace, pool: Pool, elastic: bool) -> None:
    name = "elastic" if elastic else "rigid"
    ns.apply(_tfjob(pool, name, elastic))
    status = ns.wait_state("TfJob", name, "Running", timeout=TIMEOUT)
    running = _running(ns, name)
    assert len(running) == 7, running  # 14 of 16 CPU: the job fits
    # Per-role priority: template priorityClassName, else schedulingPolicy.priorityClass.
    for pod, priority in running.items():
        assert priority == (pool.low if "-worker-" in pod else pool.high), running
    seen = {status["state"]}

    # A high-priority Deployment needs 8 CPU: the scheduler preempts 3 low-priority Workers.
    _deployment(ns, pool, 4)
    # (Not waiting for all 4 to run: kube-scheduler may leave one Pending a while, nominated
    # to a node with room, until some later cluster event requeues it. The job is the point.)
    status = _status_where(ns, name, "3 Workers lost, their replacements unschedulable",
                           lambda s: s["replicaStatuses"]["Worker"].get("lost", 0) >= 3
                           and s["replicaStatuses"]["Worker"]["running"] == 1
                           and s["replicaStatuses"]["Worker"]["pendingReason"]
                           .startswith("Unschedulable: "))
    seen.add(status["state"])
    worker = status["replicaStatuses"]["Worker"]
    # 3 preempted; a replacement that ran a moment before the Deployment's pod was bound may
    # be preempted again: each one counted once, never as a failure.
    lost_before = worker["lost"]
    assert lost_before >= 3 and worker["recreations"] == lost_before, worker
    assert (worker["restarts"], worker["failed"]) == (0, 0), worker
    assert worker["pending"] == 3 and worker["active"] == 4, worker
    assert worker["pendingReason"].startswith("Unschedulable: "), worker
    assert status["replicaSummary"] == "Chief 1/1, PS 2/2, Worker 1/4", status
    lost = _lost_upto(ns, name, status)  # (a later loss may be in too)
    # The scheduler marks each victim it chose (DisruptionTarget, PreemptionByScheduler)
    # before it deletes it: the first loss of every pod names the preemption. A later loss of
    # the same name is a replacement that ran: preempted in turn, or taken by the scheduler's
    # second DELETE of its victim's name (no condition on it then: Deleted). Nothing else.
    # (A replacement that DELETE takes while Pending never ran: no loss at all; counting it,
    # as Deleted, was the bug of issue 27.9.)
    first: set[str] = set()
    for message in lost:
        found = _LOST.match(message)
        assert found is not None, lost
        pod, cause = found["pod"], found["cause"]
        if pod not in first:
            first.add(pod)
            assert cause.startswith("PreemptionByScheduler: "), lost
        else:
            assert cause.startswith(("PreemptionByScheduler: ", "deleted by someone other "
                                     "than the operator;")), lost
    assert len(first) >= 3, lost
    if elastic:
        assert status["state"] == "Running", status
        assert "running with 1 of 4 Workers" in condition(status, "Running")["message"]
    else:
        assert status["state"] == "Restarting", status
        restarting = condition(status, "Restarting")
        assert restarting is not None and restarting["reason"] == "ReplicasLost", restarting
        assert "Worker 1/4 running" in restarting["message"], restarting

    # kubectl delete pod of the Worker that runs: a replacement at once.
    (survivor,) = [p for p in _running(ns, name) if "-worker-" in p]
    old_uid = ns.pod(survivor)["metadata"]["uid"]  # type: ignore[index]
    ns.kubectl("delete", "pod", survivor, "--wait=false")
    wait_for(lambda: (p := ns.pod(survivor)) is not None and p["metadata"]["uid"] != old_uid
             and not p["metadata"].get("deletionTimestamp"),
             lambda: f"a replacement for {survivor}: {ns.pod_summary(name)}", 20)
    # No DisruptionTarget on a plain delete: the operator says it saw the pod deleted, in the
    # event and (while no later loss replaces it) in lastLostReason: Deleted.
    wait_for(lambda: any(f"(pod {survivor}) was lost: " in m and "deleted by someone other "
                         "than the operator" in m for m in _lost_events(ns, name)),
             lambda: f"the ReplicaLost event of {survivor}: {_lost_events(ns, name)}", 20)
    status = _status_where(ns, name, "the deletion counted",
                           lambda s: s["replicaStatuses"]["Worker"]["lost"] > lost_before)
    _lost_upto(ns, name, status)
    seen.add(status["state"])
    assert status["state"] != "Failed", status

    # The Eviction API (kubectl drain's way) marks the pod EvictionByEvictionAPI first.
    status = _status_where(ns, name, "a Worker running again",
                           lambda s: s["replicaStatuses"]["Worker"]["running"] == 1)
    evicted = sorted(p for p in _running(ns, name) if "-worker-" in p)[0]
    lost_now = status["replicaStatuses"]["Worker"]["lost"]
    _evict(ns, evicted)
    wait_for(lambda: any(f"(pod {evicted}) was lost: EvictionByEvictionAPI: " in m
                         for m in _lost_events(ns, name)),
             lambda: f"the ReplicaLost event of {evicted}: {_lost_events(ns, name)}", 20)
    status = _status_where(ns, name, "the eviction counted",
                           lambda s: s["replicaStatuses"]["Worker"]["lost"] > lost_now)
    _lost_upto(ns, name, status)
    seen.add(status["state"])

    status = _full_strength_and_succeed(ns, name, seen)
    worker = status["replicaStatuses"]["Worker"]
    assert (worker["restarts"], worker["failed"]) == (0, 0), worker
    assert worker["lost"] == worker["recreations"] == len(_lost_events(ns, name)), worker
    assert status["replicaSummary"].startswith("Chief 1 succeeded"), status
    assert condition(status, "Failed") is None
