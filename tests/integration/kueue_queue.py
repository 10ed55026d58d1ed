"""One test's Kueue queue on nodes of its own, shared by the Kueue integration modules.

A ResourceFlavor whose two KWOK nodes (8 CPU each) are labelled ``pool=<flavor>`` and tainted
for it, so only pods with the flavor's toleration run there; a ClusterQueue of `cpu` in that
flavor, preempting lower priorities within it; the LocalQueue ``queue`` in the test's
namespace; WorkloadPriorityClasses low (100) and high (1000). Everything is deleted after, the
nodes last. The caller deletes its jobs before leaving the block (the Workloads go with them).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from trainjobs.testing import (
    ClusterOptions,
    ControlPlane,
    create_cluster_queue,
    create_local_queue,
    create_resource_flavor,
    create_workload_priority_class,
)


@dataclass(frozen=True)
class TaintedQueue:
    flavor: str
    low: str
    high: str
    nodes: list[str]


@contextlib.contextmanager
def tainted_queue(plane: ControlPlane, namespace: str, prefix: str,
                  cpu: str = "4") -> Iterator[TaintedQueue]:
    suffix = uuid.uuid4().hex[:8]
    name = f"{prefix}-{suffix}"
    low, high = f"low-{suffix}", f"high-{suffix}"
    taint = {"key": "pool", "value": name, "effect": "NoSchedule"}
    nodes = plane.add_nodes(ClusterOptions(
        nodes=2, node_cpu="8", node_prefix=name, node_labels={"pool": name},
        node_taints=(taint,)))
    try:
        create_resource_flavor(plane, name, node_labels={"pool": name},
                               tolerations=[{**taint, "operator": "Equal"}])
        create_workload_priority_class(plane, low, 100)
        create_workload_priority_class(plane, high, 1000)
        create_cluster_queue(plane, name, quotas={name: {"cpu": cpu}},
                             preemption={"withinClusterQueue": "LowerPriority"})
        create_local_queue(plane, namespace, "queue", name)
        yield TaintedQueue(name, low, high, nodes)
    finally:
        plane.kubectl("delete", "localqueue", "queue", "-n", namespace, "--ignore-not-found",
                      check=False)
        for kind, obj in (("clusterqueue", name), ("resourceflavor", name),
                          ("workloadpriorityclass", low), ("workloadpriorityclass", high)):
            plane.kubectl("delete", kind, obj, "--ignore-not-found", "--wait=true",
                          check=False, timeout=60)
        plane.kubectl("delete", "node", *nodes, "--wait=false", check=False)
