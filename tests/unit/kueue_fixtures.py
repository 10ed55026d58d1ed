"""Kueue v0.19.2 object shapes for the trainjobs.kueue unit tests.

Where each shape comes from (paths at tag v0.19.2 of kubernetes-sigs/kueue):
- the QuotaReserved/Admitted conditions of an admitted Workload: SetQuotaReservation
  (pkg/workload/workload.go:893, reason QuotaReserved, "Quota reserved in ClusterQueue <cq>")
  and SyncAdmittedCondition (pkg/workload/admissionchecks.go:39, reason Admitted, "The
  workload is admitted"); the test wrappers' ReserveQuotaAt/AdmittedAt
  (pkg/util/testing/v1beta2/wrappers.go:170,189) build the same shape;
- a pending Workload's message: pkg/scheduler/scheduler_afs_test.go:125 ("couldn't assign
  flavors to pod set one: insufficient unused quota for cpu in flavor default, 8 more
  needed");
- a preemption: pkg/scheduler/preemption/preemption_hierarchical_test.go:123 (reason
  Preempted, "Preempted to accommodate a workload (UID: wl-in, JobUID: job-in) due to
  reclamation within the cohort; ...");
- the spot ResourceFlavor: site/static/examples/admin/resource-flavor-tolerations.yaml;
- a PodsReady timeout: pkg/controller/core/workload_controller.go:1257 ("Exceeded the
  PodsReady timeout <ns>/<name>").
"""

from __future__ import annotations

import copy
from typing import Any

from trainjobs.kueue.model import ResourceFlavor, Workload, parse_resource_flavor, parse_workload

T0 = "2026-11-25T10:00:00Z"
T1 = "2026-11-25T10:05:00Z"

PENDING_MESSAGE = ("couldn't assign flavors to pod set one: insufficient unused quota for cpu "
                   "in flavor default, 8 more needed")
PREEMPTED_MESSAGE = ("Preempted to accommodate a workload (UID: wl-in, JobUID: job-in) due to "
                     "reclamation within the cohort; preemptor path: /r/c/q; preemptee path: "
                     "/r/q_borrowing")

SPOT_FLAVOR: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "spot"},
    "spec": {"nodeLabels": {"instance-type": "spot"},
             "tolerations": [{"key": "spot-taint", "operator": "Exists",
                              "effect": "NoSchedule"}]},
}
DEFAULT_FLAVOR: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
    "metadata": {"name": "default-flavor"}, "spec": {},
}


def flavors(*objs: dict[str, Any]) -> dict[str, ResourceFlavor]:
    parsed = [parse_resource_flavor(o) for o in objs or (SPOT_FLAVOR, DEFAULT_FLAVOR)]
    return {f.metadata.name: f for f in parsed}


def cond(ctype: str, status: str, reason: str, message: str = "",
         at: str = T0) -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at, "observedGeneration": 1}


def quota_reserved(cq: str = "cluster-queue") -> dict[str, Any]:
    return cond("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}")


def admitted_cond() -> dict[str, Any]:
    return cond("Admitted", "True", "Admitted", "The workload is admitted")


def admission(cq: str = "cluster-queue", **flavor_by_podset: str) -> dict[str, Any]:
    return {"clusterQueue": cq, "podSetAssignments": [
        {"name": ps, "flavors": {"cpu": fl, "memory": fl}, "resourceUsage": {"cpu": "1"}}
        for ps, fl in flavor_by_podset.items()]}


def with_status(manifest: dict[str, Any], *conditions: dict[str, Any],
                adm: dict[str, Any] | None = None, rv: str = "7", uid: str = "wl-uid",
                **status: Any) -> Workload:
    """The Workload `manifest` (as the operator built it) as the API server returns it."""
    obj = copy.deepcopy(manifest)
    obj["metadata"].update({"resourceVersion": rv, "uid": uid, "generation": 1})
    obj["status"] = {"conditions": list(conditions), **status}
    if adm is not None:
        obj["status"]["admission"] = adm
    return parse_workload(obj)
