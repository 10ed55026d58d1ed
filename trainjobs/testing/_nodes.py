"""The control plane's fake nodes: KWOK manages every node created with its annotation.

Why apart: the control plane module starts and supervises processes; what a node looks like
and when one counts as Ready are small rules of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainjobs.kube.errors import ApiConflict, ApiError
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kubeapi import KubeAPI, failure

if TYPE_CHECKING:
    from trainjobs.testing._controlplane import ClusterOptions

__all__ = ["NODE_ANNOTATION", "NODE_LABEL", "create_node", "node_leases", "ready_nodes"]

NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_LABEL = ("type", "kwok")
#: Taints a node carries until its kubelet (here KWOK) reports it: not Ready for pods yet.
_STARTUP_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def create_node(api: KubeAPI, name: str, options: ClusterOptions) -> bool:
    """Create one fake node; False when the apiserver cannot take it yet."""
    resources_ = {
        "cpu": options.node_cpu,
        "memory": options.node_memory,
        "pods": options.node_pods,
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                NODE_LABEL[0]: NODE_LABEL[1],
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **options.node_labels,
            },
        },
        "spec": {"taints": [dict(t) for t in options.node_taints]} if options.node_taints
        else {},
        "status": {"capacity": resources_, "allocatable": dict(resources_)},
    }
    try:
        api.call("POST", "/api/v1/nodes", node, timeout=5.0)
    except ApiConflict:
        return True  # (created by an earlier try whose answer was lost)
    except ApiError as exc:
        if exc.retryable:
            return False
        raise ControlPlaneError(f"creating node {name} failed: "
                                f"{failure('POST', '/api/v1/nodes', exc)}") from exc
    return True


def ready_nodes(api: KubeAPI) -> set[str] | None:
    """The names of the KWOK nodes that are Ready and no longer carry a start-up taint (None:
    the API server did not answer)."""
    try:
        nodes = api.call("GET", f"/api/v1/nodes?labelSelector={NODE_LABEL[0]}%3D"
                         f"{NODE_LABEL[1]}", timeout=5.0)
    except ApiError:
        return None
    ready = set()
    for node in nodes.get("items", []):
        conditions = node.get("status", {}).get("conditions") or []
        taints = node.get("spec", {}).get("taints") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(
            t["key"] in _STARTUP_TAINTS for t in taints
        ):
            ready.add(node["metadata"]["name"])
    return ready


def node_leases(api: KubeAPI) -> set[str] | None:
    """The nodes whose kubelet (KWOK) holds its lease in kube-node-lease (None: no answer)."""
    try:
        leases = api.call("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/"
                          "leases", timeout=5.0)
    except ApiError:
        return None
    return {lease["metadata"]["name"] for lease in leases.get("items", [])}
