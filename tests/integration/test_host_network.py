"""hostNetwork on the real control plane: the kube-scheduler's NodePorts filter refuses two
pods with the same host port on one node, and a containerPort of a host-network pod becomes a
host port. The caffe2-operator's README runs its shards that way; trainjobs used to add
containerPort 2222 to every shard, so one Caffe2 shard fit per node across all jobs (three
jobs sat in Created, "didn't have free ports for the requested pod ports"). Gloo does not
listen there: now nothing is added, and two jobs' shards share one node."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.operator_helpers import Namespace, job, replica, wait_for

pytestmark = pytest.mark.integration

HOSTNAME = "kubernetes.io/hostname"


def _on_node(spec: dict[str, Any], node: str, **template_spec: Any) -> dict[str, Any]:
    spec["template"]["spec"].update(hostNetwork=True, nodeSelector={HOSTNAME: node},
                                    **template_spec)
    return spec


def _placement(ns: Namespace, job_name: str) -> dict[str, tuple[str, str]]:
    return {p["metadata"]["name"]: (p["status"].get("phase", "?"), p["spec"].get("nodeName", ""))
            for p in ns.pods(job_name)}


def test_two_host_network_caffe2_jobs_share_one_node(ns: Namespace) -> None:
    node = ns.plane.node_names[-1]
    for name in ("shards-a", "shards-b"):
        ns.apply(job("Caffe2Job", name, {"Worker": _on_node(replica("Caffe2Job", 2), node)},
                     backend={"type": "redis", "redisHost": "redis-service"}))
    for name in ("shards-a", "shards-b"):
        ns.wait_state("Caffe2Job", name, "Running", timeout=60)
        placement = _placement(ns, name)
        assert placement == {f"{name}-worker-{i}": ("Running", node) for i in (0, 1)}, placement
        for pod in ns.pods(name):
            assert pod["spec"]["hostNetwork"] is True
            assert all("ports" not in c for c in pod["spec"]["containers"]), pod["spec"]
    refused = [e["message"] for e in ns.events() if e["reason"] == "FailedScheduling"]
    assert refused == [], refused


def test_the_nodeports_filter_is_real_a_named_port_keeps_pods_apart(ns: Namespace) -> None:
    """The control for the test above: ports the user names do become host ports, and the
    scheduler does refuse a second pod with the same one on the node."""
    node = ns.plane.node_names[-1]
    port = [{"name": "tfjob-port", "containerPort": 12222}]
    for name in ("tf-a", "tf-b"):
        ns.apply(job("TfJob", name, {"Worker": _on_node(replica("TfJob", 1, ports=port), node)}))
    ns.wait_state("TfJob", "tf-a", "Running", timeout=60)

    def refused() -> list[str]:
        return [e["message"] for e in ns.events("tf-b-worker-0")
                if e["reason"] == "FailedScheduling"]

    messages = wait_for(refused, "tf-b-worker-0 to be refused by the scheduler", timeout=60)
    assert "free ports" in messages[0], messages
    assert _placement(ns, "tf-b") == {"tf-b-worker-0": ("Pending", "")}
    (pod,) = ns.pods("tf-a")
    assert pod["spec"]["containers"][0]["ports"][0]["hostPort"] == 12222
