"""From a Workload to what the pods get (podset.FromAssignment/FromUpdate/Merge) and why a job
waits; the core's merge into a rendered pod; validation of what is read from the cluster."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.kueue_fixtures import (
    PENDING_MESSAGE,
    admission,
    admitted_cond,
    cond,
    flavors,
    quota_reserved,
    with_status,
)
from trainjobs.core.admission import PodSetChanges, PodSetConflict, Toleration, merge_into_pod
from trainjobs.kueue import constants as k
from trainjobs.kueue.assignment import FlavorNotFound, pod_set_changes, waiting_reason
from trainjobs.kueue.model import MalformedObject, parse_workload

MANIFEST: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {"name": "mxjob-mx-932aa", "namespace": "ns"},
    "spec": {"queueName": "team-a", "podSets": [
        {"name": "scheduler", "count": 1, "template": {"spec": {"containers": []}}},
        {"name": "worker", "count": 3, "template": {"spec": {"containers": []}}},
    ]},
}
TYPES = {"scheduler": "Scheduler", "worker": "Worker"}
SPOT_TOLERATION = Toleration("spot-taint", "Exists", "", "NoSchedule")


def admitted(**status: Any) -> Any:
    return with_status(MANIFEST, quota_reserved(), admitted_cond(),
                       adm=admission(scheduler="default-flavor", worker="spot"), **status)


def test_flavors_give_node_labels_and_tolerations_per_pod_set() -> None:
    changes = pod_set_changes(admitted(), flavors(), TYPES)
    assert changes["Worker"] == PodSetChanges(
        count=3,
        node_selector={"instance-type": "spot"},
        tolerations=(SPOT_TOLERATION,),
        labels={k.LABEL_PODSET: "worker", k.LABEL_LOCAL_QUEUE: "team-a",
                k.LABEL_CLUSTER_QUEUE: "cluster-queue"},
        annotations={k.ANNOTATION_WORKLOAD: "mxjob-mx-932aa"},
    )
    assert changes["Scheduler"].node_selector == {} and changes["Scheduler"].tolerations == ()
    assert changes["Scheduler"].labels[k.LABEL_PODSET] == "scheduler"


def test_assigned_count_wins_and_a_cluster_queue_that_is_no_label_is_left_out() -> None:
    adm = admission("Cluster_Queue", worker="spot")
    adm["podSetAssignments"][0]["count"] = 2
    wl = with_status({**MANIFEST, "spec": {**MANIFEST["spec"],
                                           "podSets": [MANIFEST["spec"]["podSets"][1]]}},
                     quota_reserved(), admitted_cond(), adm=adm)
    changes = pod_set_changes(wl, flavors(), TYPES)["Worker"]
    assert changes.count == 2
    assert k.LABEL_CLUSTER_QUEUE not in changes.labels


def test_admission_check_pod_set_updates_are_merged() -> None:
    checks = [{"name": "prov", "state": "Ready", "message": "", "podSetUpdates": [
        {"name": "worker", "labels": {"team": "a"}, "annotations": {"note": "x"},
         "nodeSelector": {"zone": "z1"},
         "tolerations": [{"key": "spot-taint", "operator": "Exists", "effect": "NoSchedule"},
                         {"key": "gpu", "operator": "Exists"}]}]}]
    changes = pod_set_changes(admitted(admissionChecks=checks), flavors(), TYPES)["Worker"]
    assert changes.node_selector == {"instance-type": "spot", "zone": "z1"}
    assert changes.labels["team"] == "a" and changes.annotations["note"] == "x"
    # The flavor's toleration is not duplicated.
    assert changes.tolerations == (SPOT_TOLERATION, Toleration("gpu", "Exists"))


def test_a_conflicting_update_is_a_permanent_error_in_kueues_words() -> None:
    checks = [{"name": "prov", "state": "Ready", "message": "", "podSetUpdates": [
        {"name": "worker", "nodeSelector": {"instance-type": "on-demand"}}]}]
    with pytest.raises(PodSetConflict) as err:
        pod_set_changes(admitted(admissionChecks=checks), flavors(), TYPES)
    assert str(err.value) == (
        'in admission check "prov": invalid admission check PodSetUpdate: conflict for '
        "nodeSelector: conflict for key=instance-type, value1=spot, value2=on-demand")


def test_a_flavor_not_in_the_cache_is_retried() -> None:
    with pytest.raises(FlavorNotFound, match='"spot" not found'):
        pod_set_changes(admitted(), flavors({"metadata": {"name": "default-flavor"}}), TYPES)


def test_a_topology_assignment_gates_the_pods() -> None:
    adm = admission(worker="spot")
    adm["podSetAssignments"][0]["topologyAssignment"] = {"levels": ["kubernetes.io/hostname"]}
    wl = with_status(MANIFEST, quota_reserved(), admitted_cond(), adm=adm)
    changes = pod_set_changes(wl, flavors(), TYPES)
    # Paired by position with spec.podSets, as Kueue pairs them: the first is "scheduler"'s.
    assert changes["Worker"].scheduling_gates == (k.TOPOLOGY_SCHEDULING_GATE,)
    assert changes["Worker"].annotations[k.ANNOTATION_PODSET_UNCONSTRAINED_TOPOLOGY] == "true"


def test_no_admission_no_changes() -> None:
    assert pod_set_changes(with_status(MANIFEST), flavors(), TYPES) == {}


@pytest.mark.parametrize(("conditions", "checks", "want"), [
    ((), (), ("Pending", "Workload mxjob-mx-932aa is waiting for Kueue to evaluate it")),
    ((cond("QuotaReserved", "False", "Pending", PENDING_MESSAGE),), (),
     ("Pending", PENDING_MESSAGE)),
    ((cond("QuotaReserved", "False", "Inadmissible", "LocalQueue team-a doesn't exist"),), (),
     ("Inadmissible", "LocalQueue team-a doesn't exist")),
    ((quota_reserved(), cond("Admitted", "False", "UnsatisfiedChecks",
                             "The workload has not all checks ready")),
     ({"name": "prov", "state": "Pending", "message": "Waiting for capacity"},),
     ("AdmissionChecksPending", "prov: Waiting for capacity")),
    ((quota_reserved(), cond("Admitted", "False", "UnsatisfiedChecks",
                             "The workload has not all checks ready")), (),
     ("UnsatisfiedChecks", "The workload has not all checks ready")),
])
def test_why_a_workload_waits(conditions: tuple[dict[str, Any], ...],
                              checks: tuple[dict[str, Any], ...], want: tuple[str, str]) -> None:
    wl = with_status(MANIFEST, *conditions, admissionChecks=list(checks))
    assert waiting_reason(wl) == want


def test_merge_into_pod_is_kueues_merge() -> None:
    pod: dict[str, Any] = {"metadata": {"name": "mx-worker-0", "labels": {"a": "1"}},
           "spec": {"nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "spot-taint", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "schedulingGates": [{"name": k.TOPOLOGY_SCHEDULING_GATE}]}}
    changes = PodSetChanges(count=1, node_selector={"instance-type": "spot"},
                            tolerations=(SPOT_TOLERATION, Toleration("gpu", "", "yes")),
                            labels={"a": "1", "b": "2"}, annotations={"n": "v"},
                            scheduling_gates=(k.TOPOLOGY_SCHEDULING_GATE,))
    out = merge_into_pod(pod, changes)
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert out["metadata"]["annotations"] == {"n": "v"}
    assert out["spec"]["nodeSelector"] == {"disk": "ssd", "instance-type": "spot"}
    assert out["spec"]["tolerations"] == [
        {"key": "spot-taint", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpu", "value": "yes"}]
    assert out["spec"]["schedulingGates"] == [{"name": k.TOPOLOGY_SCHEDULING_GATE}]
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}  # the input is not changed
    with pytest.raises(PodSetConflict, match="conflict for key=disk, value1=ssd, value2=hdd"):
        merge_into_pod(pod, PodSetChanges(count=1, node_selector={"disk": "hdd"}))


def test_an_empty_operator_is_equal() -> None:
    assert Toleration("k", "", "v").matches(Toleration("k", "Equal", "v"))
    assert not Toleration("k", "Exists").matches(Toleration("k", "Equal"))


@pytest.mark.parametrize(("patch", "field"), [
    ({"spec": {"podSets": [{"name": "w", "count": "three"}]}}, "spec.podSets.0.count"),
    ({"spec": {"podSets": [{"name": "w", "count": -1}]}}, "spec.podSets.0.count"),
    ({"status": {"conditions": [{"type": "Admitted", "status": "Maybe"}]}},
     "status.conditions.0.status"),
    ({"status": {"admission": {"podSetAssignments": []}}}, "status.admission.clusterQueue"),
    ({"status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "w", "flavors": {"cpu": 3}}]}}},
     "status.admission.podSetAssignments.0.flavors.cpu"),
])
def test_a_malformed_workload_is_a_typed_error(patch: dict[str, Any], field: str) -> None:
    obj: dict[str, Any] = {"metadata": {"name": "wl"}, **patch}
    with pytest.raises(MalformedObject) as err:
        parse_workload(obj)
    assert err.value.kind == "Workload" and err.value.name == "wl"
    assert any(p.startswith(field) for p in err.value.problems), err.value.problems


def test_unknown_fields_are_ignored_and_crd_defaults_apply() -> None:
    wl = parse_workload({"metadata": {"name": "wl", "futureField": 1},
                         "spec": {"podSets": [{}], "somethingNew": True}})
    assert (wl.spec.pod_sets[0].name, wl.spec.pod_sets[0].count) == ("main", 1)
    assert wl.active


def test_workload_phase_for_the_jobs_status() -> None:
    from tests.unit.kueue_fixtures import PREEMPTED_MESSAGE
    from trainjobs.kueue.assignment import workload_phase

    assert workload_phase(with_status(MANIFEST, cond("QuotaReserved", "False", "Pending",
                                                     PENDING_MESSAGE))) == (
        "Pending", PENDING_MESSAGE)
    assert workload_phase(with_status(MANIFEST, quota_reserved(), cond(
        "Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready"))) == (
        "QuotaReserved", "The workload has not all checks ready")
    assert workload_phase(admitted()) == ("Admitted", "Admitted by ClusterQueue cluster-queue")
    evicted = cond("Evicted", "True", "Preempted", PREEMPTED_MESSAGE)
    assert workload_phase(with_status(
        MANIFEST, cond("QuotaReserved", "False", "Pending", PREEMPTED_MESSAGE), evicted)) == (
        "Evicted", f"Preempted: {PREEMPTED_MESSAGE}")
    assert workload_phase(with_status(MANIFEST, quota_reserved(), admitted_cond(), evicted,
                                      adm=admission(worker="spot")))[0] == "Admitted"
    assert workload_phase(with_status(MANIFEST, cond("Finished", "True", "Succeeded",
                                                     "done"))) == ("Finished", "Succeeded: done")
