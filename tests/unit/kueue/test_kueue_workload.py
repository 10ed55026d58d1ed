"""The Workload a job owns: Kueue's name, podSets from the rendered pods, priority, metadata."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.helpers import (
    Doc,
    container,
    framework_of,
    job_doc,
    mxjob,
    parse,
    render,
    replica,
    template,
    tfjob,
)
from trainjobs.kueue import constants as k
from trainjobs.kueue.workload import (
    PriorityClasses,
    PriorityClassNotFound,
    WorkloadBuildError,
    build_workload,
    handled_by_kueue,
    job_pod_sets,
    ordered_replica_types,
    pod_set_name,
    resolve_priority,
    workload_name,
)

UID = "8d5a3f3e-5f8e-4c1e-9d1e-3f0c2b7a9e10"


def labelled(doc: Doc, **labels: str) -> Doc:
    doc["metadata"].update(uid=UID, labels={k.LABEL_QUEUE_NAME: "team-a", **labels})
    return doc


NO_CLASSES = PriorityClasses()


def workload_of(doc: Doc, classes: PriorityClasses = NO_CLASSES) -> dict[str, Any]:
    job = parse(doc)
    sets = job_pod_sets(job, framework_of(job.kind), render(job))
    return build_workload(job, sets, resolve_priority(job, sets, classes))


@pytest.mark.parametrize(("name", "uid", "kind", "group", "want"), [
    # pkg/controller/jobframework/workload_names_test.go at v0.19.2
    ("name", "uid", "Job", "batch", "job-name-ef3a1"),
    ("marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-"
     "department-social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-"
     "engineering-team-lead-senior-architect-validation-checked-approved-by-legal-and-ops-dept",
     "uid", "Job", "batch",
     "job-marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-"
     "department-social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-"
     "engineering-team-lead-senior-architect-validation-checked-approved-by-l-218b8"),
])
def test_workload_name_is_kueues(name: str, uid: str, kind: str, group: str, want: str) -> None:
    assert workload_name(name, uid, kind, group) == want


def test_the_name_depends_on_kind_group_and_uid() -> None:
    base = workload_name("mx", UID, "MxJob", "trainjobs.io")
    assert base.startswith("mxjob-mx-")
    assert base != workload_name("mx", UID, "TfJob", "trainjobs.io")
    assert base != workload_name("mx", UID, "MxJob", "kubeflow.org")
    assert base != workload_name("mx", "other", "MxJob", "trainjobs.io")


def test_pod_sets_are_the_replica_types_in_the_kinds_order_with_counts() -> None:
    # The API server returns replicaSpecs sorted by key; podSets follow the kind's order.
    doc = tfjob(Worker=3, PS=2, Chief=1)
    wl = workload_of(labelled(doc))
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("chief", 1), ("worker", 3), ("ps", 2)]
    assert "minCount" not in wl["spec"]["podSets"][1]


def test_the_template_is_a_rendered_pod_without_what_differs_between_pods() -> None:
    wl = workload_of(labelled(tfjob(Chief=1, Worker=2)))
    chief, worker = wl["spec"]["podSets"]
    assert set(chief["template"]) == {"metadata", "spec"}
    assert set(chief["template"]["metadata"]) <= {"labels", "annotations"}
    labels = worker["template"]["metadata"]["labels"]
    assert labels["trainjobs.io/replica-type"] == "worker"
    assert "trainjobs.io/replica-index" not in labels and "trainjobs.io/job-role" not in (
        chief["template"]["metadata"]["labels"])
    tf = worker["template"]["spec"]["containers"][0]
    assert "env" not in tf  # TF_CONFIG differs per index and grows with the job
    assert tf["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert worker["template"]["spec"]["restartPolicy"] == "Never"


def test_what_plugins_inject_is_in_the_template() -> None:
    # A PS with no template gets the default PS server container from a feature plugin.
    doc = job_doc("TfJob", "tf", {"Chief": replica(1, template(container("tensorflow"))),
                                  "PS": {"replicas": 2}})
    ps = workload_of(labelled(doc))["spec"]["podSets"][1]
    assert ps["name"] == "ps" and ps["count"] == 2
    assert [c["name"] for c in ps["template"]["spec"]["containers"]] == ["tensorflow"]
    assert ps["template"]["spec"]["containers"][0]["command"][:2] == ["python", "-u"]


def test_resources_are_kept_as_the_pods_have_them() -> None:
    res = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": 1}}
    doc = job_doc("Caffe2Job", "c2", {"Worker": replica(
        3, template(container("caffe2", resources=res)))})
    (worker,) = workload_of(labelled(doc))["spec"]["podSets"]
    assert worker["template"]["spec"]["containers"][0]["resources"] == res


def test_a_type_with_zero_replicas_has_no_pod_set() -> None:
    wl = workload_of(labelled(tfjob(Chief=1, Worker=0)))
    assert [p["name"] for p in wl["spec"]["podSets"]] == ["chief"]


def test_metadata_owner_finalizer_labels_and_queue() -> None:
    doc = labelled(mxjob(), **{k.LABEL_MAX_EXEC_TIME_SECONDS: "600"})
    doc["metadata"]["annotations"] = {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60",
                                      "unrelated": "x"}
    wl = workload_of(doc)
    meta = wl["metadata"]
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2" and wl["kind"] == "Workload"
    assert meta["name"] == workload_name("mx", UID, "MxJob", "trainjobs.io")
    assert meta["labels"] == {k.LABEL_JOB_UID: UID, "trainjobs.io/job-name": "mx"}
    assert meta["finalizers"] == [k.FINALIZER_RESOURCE_IN_USE]
    assert meta["annotations"] == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60"}
    assert meta["ownerReferences"] == [{
        "apiVersion": "trainjobs.io/v1alpha1", "kind": "MxJob", "name": "mx", "uid": UID,
        "controller": True, "blockOwnerDeletion": True}]
    assert wl["spec"]["queueName"] == "team-a"
    assert wl["spec"]["maximumExecutionTimeSeconds"] == 600
    assert "active" not in wl["spec"]


def test_a_suspended_job_gets_an_inactive_workload() -> None:
    doc = labelled(mxjob())
    doc["spec"]["runPolicy"] = {"suspend": True}
    assert workload_of(doc)["spec"]["active"] is False


@pytest.mark.parametrize("value", ["0", "-5", "x", "99999999999"])
def test_an_invalid_max_exec_time_label_is_ignored(value: str) -> None:
    doc = labelled(mxjob(), **{k.LABEL_MAX_EXEC_TIME_SECONDS: value})
    assert "maximumExecutionTimeSeconds" not in workload_of(doc)["spec"]


CLASSES = PriorityClasses(workload={"wl-high": 10000}, pod={"high": 1000, "low": 100},
                          pod_default=("low", 100))


def test_priority_from_the_workload_priority_class_label() -> None:
    doc = labelled(mxjob(), **{k.LABEL_PRIORITY_CLASS: "wl-high"})
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high"}}
    spec = workload_of(doc, CLASSES)["spec"]
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io",
                                        "kind": "WorkloadPriorityClass", "name": "wl-high"}
    assert spec["priority"] == 10000


def test_priority_from_the_scheduling_policy_then_the_first_pod_set() -> None:
    doc = labelled(tfjob(Chief=1, Worker=2))
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "low"
    doc["spec"]["replicaSpecs"]["Chief"]["template"]["spec"]["priorityClassName"] = "high"
    spec = workload_of(doc, CLASSES)["spec"]
    assert (spec["priorityClassRef"]["name"], spec["priority"]) == ("high", 1000)
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "low"}}
    spec = workload_of(doc, CLASSES)["spec"]
    assert spec["priorityClassRef"] == {"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                        "name": "low"}
    assert spec["priority"] == 100


def test_priority_defaults_to_the_global_default_class_else_zero() -> None:
    spec = workload_of(labelled(mxjob()), CLASSES)["spec"]
    assert (spec["priorityClassRef"]["name"], spec["priority"]) == ("low", 100)
    spec = workload_of(labelled(mxjob()))["spec"]
    assert spec["priority"] == 0 and "priorityClassRef" not in spec


def test_a_missing_priority_class_is_a_typed_error() -> None:
    with pytest.raises(PriorityClassNotFound, match='"nope" not found'):
        workload_of(labelled(mxjob(), **{k.LABEL_PRIORITY_CLASS: "nope"}), CLASSES)
    doc = labelled(mxjob())
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "gone"}}
    with pytest.raises(PriorityClassNotFound, match=r'priorityclasses\.scheduling\.k8s\.io "gone"'):
        workload_of(doc, CLASSES)


def test_pod_set_names_must_be_dns_labels() -> None:
    assert pod_set_name("Worker") == "worker"
    with pytest.raises(WorkloadBuildError, match="not a DNS label"):
        pod_set_name("Param_Server")


def test_aliases_keep_their_place_in_the_order() -> None:
    job = parse(tfjob(Worker=1, Master=1))
    assert ordered_replica_types(job, framework_of("TfJob")) == ["Master", "Worker"]


def test_kinds_kueue_integrates_itself() -> None:
    assert handled_by_kueue("kubeflow.org", "TFJob")
    assert not handled_by_kueue("kubeflow.org", "MXJob")  # removed from Kueue in v0.11
    assert not handled_by_kueue("trainjobs.io", "TfJob")
