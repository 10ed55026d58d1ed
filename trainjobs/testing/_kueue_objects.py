"""Kueue's objects for tests: ResourceFlavors, ClusterQueues, LocalQueues,
WorkloadPriorityClasses (typed create functions), and reading a Workload's conditions.

Why: every Kueue scenario builds the same queue objects and asks the same questions of a
Workload ("admitted?", "why not?"); spelling them once keeps the tests about behaviour. They
talk to the API server directly (``ControlPlane.api()``, v1beta2, Kueue's storage version), so
Kueue's own webhooks default and validate them as for any user.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from trainjobs.kube.errors import ApiError, ApiNotFound
from trainjobs.testing._errors import ControlPlaneError
from trainjobs.testing._kubeapi import failure

if TYPE_CHECKING:
    from trainjobs.testing._controlplane import ControlPlane

__all__ = ["QUEUE_LABEL", "WORKLOAD_PRIORITY_CLASS_LABEL", "KueueObjectError",
           "WorkloadCondition", "condition_true", "create_cluster_queue", "create_local_queue",
           "create_resource_flavor", "create_workload_priority_class", "get_workload",
           "wait_for_workload", "workload_condition", "workload_conditions",
           "workloads_owned_by"]

GROUP_VERSION = "kueue.x-k8s.io/v1beta2"
_BASE = f"/apis/{GROUP_VERSION}"
#: The label that puts a job in a LocalQueue.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The label naming a job's WorkloadPriorityClass.
WORKLOAD_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


class KueueObjectError(ControlPlaneError):
    """Creating or reading a Kueue object failed; the message has the API server's answer."""


@dataclass(frozen=True)
class WorkloadCondition:
    """One of a Workload's status conditions (QuotaReserved, Admitted, PodsReady, Evicted,
    Preempted, Requeued, Finished, ...)."""

    type: str
    status: str
    reason: str
    message: str

    @property
    def true(self) -> bool:
        return self.status == "True"


def _call(plane: ControlPlane, method: str, path: str, body: Any = None
          ) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = plane.api().call(method, path, body)
    except ApiError as exc:
        if method == "GET" and isinstance(exc, ApiNotFound):
            return None
        raise KueueObjectError(failure(method, path, exc)) from exc
    return data


def _create(plane: ControlPlane, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    created = _call(plane, "POST", path, obj)
    if created is None:  # pragma: no cover - POST never answers 404 as None
        raise KueueObjectError(f"POST {path} returned nothing")
    return created


def create_resource_flavor(
    plane: ControlPlane,
    name: str,
    *,
    node_labels: Mapping[str, str] | None = None,
    node_taints: Sequence[Mapping[str, str]] = (),
    tolerations: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A ResourceFlavor: Kueue adds ``node_labels`` to an admitted pod's nodeSelector and
    ``tolerations`` to its tolerations; ``node_taints`` are taints its nodes carry, which
    a workload must tolerate to be assigned the flavor."""
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = dict(node_labels)
    if node_taints:
        spec["nodeTaints"] = [dict(t) for t in node_taints]
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return _create(plane, f"{_BASE}/resourceflavors", {
        "apiVersion": GROUP_VERSION, "kind": "ResourceFlavor",
        "metadata": {"name": name}, "spec": spec})


def create_cluster_queue(
    plane: ControlPlane,
    name: str,
    *,
    quotas: Mapping[str, Mapping[str, str]],
    cohort: str | None = None,
    preemption: Mapping[str, Any] | None = None,
    queueing_strategy: str | None = None,
    namespace_selector: Mapping[str, Any] | None = None,
    extra_spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with one resource group: ``quotas`` maps each flavor (in order of
    preference) to its nominal quota per resource, e.g. ``{"small": {"cpu": "4"}}``; every
    flavor must cover the same resources. ``namespace_selector`` None means every namespace
    (``{}``; Kueue's own default, null, admits none). ``preemption``, e.g.
    ``{"withinClusterQueue": "LowerPriority"}``; ``queueing_strategy`` "BestEffortFIFO"
    (Kueue's default) or "StrictFIFO"."""
    if not quotas:
        raise KueueObjectError(f"ClusterQueue {name}: quotas name no flavor")
    covered = list(next(iter(quotas.values())))
    spec: dict[str, Any] = {
        "namespaceSelector": dict(namespace_selector or {}),
        "resourceGroups": [{
            "coveredResources": covered,
            "flavors": [{"name": flavor,
                         "resources": [{"name": r, "nominalQuota": str(q)}
                                       for r, q in resources.items()]}
                        for flavor, resources in quotas.items()],
        }],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    if preemption is not None:
        spec["preemption"] = dict(preemption)
    if queueing_strategy is not None:
        spec["queueingStrategy"] = queueing_strategy
    spec.update(extra_spec or {})
    return _create(plane, f"{_BASE}/clusterqueues", {
        "apiVersion": GROUP_VERSION, "kind": "ClusterQueue",
        "metadata": {"name": name}, "spec": spec})


def create_local_queue(plane: ControlPlane, namespace: str, name: str, cluster_queue: str
                       ) -> dict[str, Any]:
    """A LocalQueue in ``namespace`` feeding ``cluster_queue``."""
    return _create(plane, f"{_BASE}/namespaces/{namespace}/localqueues", {
        "apiVersion": GROUP_VERSION, "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue}})


def create_workload_priority_class(plane: ControlPlane, name: str, value: int,
                                   description: str = "") -> dict[str, Any]:
    """A WorkloadPriorityClass (a job names it with ``WORKLOAD_PRIORITY_CLASS_LABEL``)."""
    return _create(plane, f"{_BASE}/workloadpriorityclasses", {
        "apiVersion": GROUP_VERSION, "kind": "WorkloadPriorityClass",
        "metadata": {"name": name}, "value": value, "description": description})


def get_workload(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    """The Workload, or None when there is none."""
    return _call(plane, "GET", f"{_BASE}/namespaces/{namespace}/workloads/{quote(name)}")


def workloads_owned_by(plane: ControlPlane, namespace: str, owner_uid: str
                       ) -> list[dict[str, Any]]:
    """The Workloads in ``namespace`` with an owner reference to ``owner_uid`` (a batch Job,
    a TFJob, one of the operator's jobs)."""
    listing = _call(plane, "GET", f"{_BASE}/namespaces/{namespace}/workloads") or {}
    return [wl for wl in listing.get("items", [])
            if any(ref.get("uid") == owner_uid
                   for ref in wl["metadata"].get("ownerReferences") or [])]


def workload_conditions(workload: Mapping[str, Any]) -> dict[str, WorkloadCondition]:
    """A Workload's conditions by type."""
    return {c["type"]: WorkloadCondition(c["type"], c.get("status", ""), c.get("reason", ""),
                                         c.get("message", ""))
            for c in (workload.get("status") or {}).get("conditions") or []}


def workload_condition(workload: Mapping[str, Any], type_: str) -> WorkloadCondition | None:
    """One condition of a Workload, or None when it has none of that type."""
    return workload_conditions(workload).get(type_)


def condition_true(workload: Mapping[str, Any], type_: str) -> bool:
    """The Workload has condition ``type_`` with status True (e.g. "Admitted")."""
    cond = workload_condition(workload, type_)
    return cond is not None and cond.true


def wait_for_workload(
    plane: ControlPlane,
    namespace: str,
    owner_uid: str,
    until: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Poll the one Workload owned by ``owner_uid`` until ``until(workload)``; return it.
    Raises :class:`KueueObjectError` naming ``what`` and the Workload's last conditions on
    timeout, and fails at once when a control-plane component (Kueue included) died."""
    deadline = time.monotonic() + timeout
    last: list[dict[str, Any]] = []
    while True:
        plane.check_alive()
        last = workloads_owned_by(plane, namespace, owner_uid)
        if len(last) > 1:
            raise KueueObjectError(
                f"{len(last)} Workloads own {owner_uid}: "
                f"{[wl['metadata']['name'] for wl in last]}")
        if last and until(last[0]):
            return last[0]
        if time.monotonic() > deadline:
            seen = (list(workload_conditions(last[0]).values()) if last
                    else "no Workload")
            raise KueueObjectError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                   f"Workload of {owner_uid} in {namespace}: {seen}")
        time.sleep(0.2)
