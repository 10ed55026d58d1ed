"""The gang-scheduling plugins: what they add to pods and which PodGroup they render, minMember
and minResources, the config's checks, and what a PodGroup's status says on the job."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from trainjobs_features import coscheduling, volcano
from trainjobs_features.gang import (
    format_quantity,
    gang_config,
    min_member,
    min_resources,
    parse_quantity,
)

from tests.unit.helpers import PLUGINS, container, errors_of, mxjob, parse, render, tfjob
from trainjobs.errors import PluginError, SpecInvalid
from trainjobs.plugin import ObjectStatus, OwnedResource

VOLCANO = {"gangScheduling": {"scheduler": "volcano"}}
COSCHEDULING = {"gangScheduling": {"scheduler": "coscheduling", "scheduleTimeoutSeconds": 30}}


def _resources(doc: dict[str, Any], key: str, cpu: str, memory: str) -> None:
    tmpl = doc["spec"]["replicaSpecs"][key]["template"]
    tmpl["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": memory}}


def _sized_mxjob() -> dict[str, Any]:
    doc = mxjob(scheduler=1, server=2, worker=3)
    _resources(doc, "Scheduler", "500m", "1Gi")
    _resources(doc, "Server", "1", "2Gi")
    _resources(doc, "Worker", "2", "4Gi")
    return doc


def test_off_by_default_nothing_changes() -> None:
    plain = render(_sized_mxjob())
    assert plain.extras == []
    for pod in plain.pods.values():
        assert "schedulerName" not in pod["spec"]
        assert coscheduling.POD_GROUP_LABEL not in pod["metadata"]["labels"]
    assert render(_sized_mxjob(), controller_config={"gangScheduling": {}}).extras == []


def test_volcano_pod_group_and_pods() -> None:
    doc = _sized_mxjob()
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "team-a", "priorityClass": "high"}}
    rendered = render(doc, controller_config=VOLCANO)
    (group,) = rendered.extras
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["kind"] == "PodGroup"
    assert group["metadata"]["name"] == "mx"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "MxJob"  # owned by the job
    assert group["metadata"]["labels"]["trainjobs.io/job-name"] == "mx"
    # every replica; 0.5+2*1+3*2 = 8.5 CPU, 1+4+12 = 17 GiB
    assert group["spec"] == {"minMember": 6, "queue": "team-a", "priorityClassName": "high",
                             "minTaskMember": {"scheduler": 1, "server": 2, "worker": 3},
                             "minResources": {"cpu": "8500m", "memory": str(17 * 2**30)}}
    for pod in rendered.pods.values():
        assert pod["metadata"]["annotations"][volcano.GROUP_NAME_ANNOTATION] == "mx"
        assert pod["metadata"]["annotations"][volcano.TASK_ANNOTATION] == \
            pod["metadata"]["labels"]["trainjobs.io/replica-type"]
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["spec"]["priorityClassName"] == "high"


def test_volcano_default_queue_and_no_priority() -> None:
    (group,) = render(_sized_mxjob(), controller_config=VOLCANO).extras
    assert group["spec"]["queue"] == volcano.DEFAULT_QUEUE
    assert "priorityClassName" not in group["spec"]


def test_volcano_elastic_gang_names_the_pods_it_needs() -> None:
    doc = _sized_mxjob()
    doc["spec"]["replicaSpecs"]["Worker"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    (group,) = render(doc, controller_config=VOLCANO).extras
    assert group["spec"]["minMember"] == 4
    assert group["spec"]["minTaskMember"] == {"scheduler": 1, "server": 2, "worker": 1}
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 5}}  # any 5 pods
    (group,) = render(doc, controller_config=VOLCANO).extras
    assert group["spec"]["minMember"] == 5 and "minTaskMember" not in group["spec"]


def test_coscheduling_pod_group_and_pods() -> None:
    rendered = render(_sized_mxjob(), controller_config=COSCHEDULING)
    (group,) = rendered.extras
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"] == {"minMember": 6, "scheduleTimeoutSeconds": 30,
                             "minResources": {"cpu": "8500m", "memory": str(17 * 2**30)}}
    for pod in rendered.pods.values():
        assert pod["metadata"]["labels"][coscheduling.POD_GROUP_LABEL] == "mx"
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert volcano.GROUP_NAME_ANNOTATION not in pod["metadata"].get("annotations", {})


def test_scheduling_policy_min_resources_and_timeout_as_kubeflow() -> None:
    """Kubeflow's schedulingPolicy.minResources is the PodGroup's (both schedulers), and its
    scheduleTimeoutSeconds Coscheduling's, over the operator's config (training-operator's
    ReconcileJobs); Volcano's PodGroup has no timeout."""
    doc = _sized_mxjob()
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {
        "minResources": {"cpu": 3, "memory": "6Gi", "nvidia.com/gpu": "2"},
        "scheduleTimeoutSeconds": 120}}
    (group,) = render(doc, controller_config=COSCHEDULING).extras
    assert group["spec"] == {"minMember": 6, "scheduleTimeoutSeconds": 120, "minResources": {
        "cpu": "3", "memory": "6Gi", "nvidia.com/gpu": "2"}}
    (group,) = render(doc, controller_config=VOLCANO).extras
    assert group["spec"]["minResources"] == {"cpu": "3", "memory": "6Gi", "nvidia.com/gpu": "2"}
    assert "scheduleTimeoutSeconds" not in group["spec"]
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"minResources": {"cpu": "lots"}}}
    with pytest.raises(SpecInvalid, match=r"minResources\.cpu"):
        render(doc, controller_config=VOLCANO)


def test_a_template_that_names_its_scheduler_keeps_it() -> None:
    doc = _sized_mxjob()
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "mine"
    config = {"gangScheduling": {"scheduler": "volcano", "schedulerName": "vc"}}
    pods = render(doc, controller_config=config).pods
    assert pods["mx-worker-0"]["spec"]["schedulerName"] == "mine"
    assert pods["mx-server-0"]["spec"]["schedulerName"] == "vc"


def test_local_backend_is_never_gang_scheduled() -> None:
    job = parse(_sized_mxjob())
    from trainjobs.core.render import kubernetes_layout
    layout = kubernetes_layout(job, PLUGINS.framework_for("MxJob"))  # type: ignore[arg-type]
    rendered = render(job, backend="local", layout=layout, controller_config=VOLCANO)
    assert rendered.extras == []
    assert all("schedulerName" not in p["spec"] for p in rendered.pods.values())


def test_min_member_min_available_and_elastic() -> None:
    doc = _sized_mxjob()
    assert min_member(parse(doc)) == 6
    doc["spec"]["replicaSpecs"]["Worker"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 4}
    job = parse(doc)
    assert min_member(job) == 4  # Scheduler 1 + Server 2 + minReplicas 1
    # the pods the job cannot run without: non-elastic first, then one Worker
    assert min_resources(job, 4) == {"cpu": "4500m", "memory": str(9 * 2**30)}
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2}}
    assert min_member(parse(doc)) == 2


def test_min_resources_counts_init_containers_and_limits() -> None:
    doc = tfjob(Worker=2)
    spec = doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}
    spec["containers"].append(container("side", resources={"requests": {"cpu": "250m"}}))
    spec["initContainers"] = [container("init", resources={"requests": {"cpu": "2"}})]
    # each pod: max(1 + 0.25, 2) = 2 CPU, 1 GPU (the request defaults to the limit)
    assert min_resources(parse(doc), 2) == {"cpu": "4", "nvidia.com/gpu": "2"}


def test_min_available_above_the_job_is_refused() -> None:
    doc = mxjob()
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 7}}
    assert errors_of(doc) == {"spec.runPolicy.schedulingPolicy.minAvailable":
                              "7 is more than the job's 6 replicas: a gang that large would "
                              "never be scheduled"}
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 6}}
    assert min_member(parse(doc)) == 6  # accepted


@pytest.mark.parametrize(("value", "number"), [
    ("500m", Decimal("0.5")), ("2", Decimal(2)), ("2Gi", Decimal(2 * 2**30)),
    ("1k", Decimal(1000)), ("1e3", Decimal(1000)), (3, Decimal(3)), ("1.5", Decimal("1.5"))])
def test_parse_quantity(value: object, number: Decimal) -> None:
    assert parse_quantity(value) == number


def test_format_quantity_rounds_up_to_millis() -> None:
    assert format_quantity(Decimal("8.5")) == "8500m"
    assert format_quantity(Decimal("0.0001")) == "1m"
    assert format_quantity(Decimal(17 * 2**30)) == str(17 * 2**30)


@pytest.mark.parametrize(("config", "message"), [
    ({"gangScheduling": {"scheduler": "kueue"}}, "gangScheduling.scheduler: 'kueue' is not one"),
    ({"gangScheduling": "volcano"}, "gangScheduling: expected a mapping"),
    ({"gangScheduling": {"sheduler": "volcano"}}, "unknown field(s) ['sheduler']"),
    ({"gangScheduling": {"scheduler": "coscheduling", "scheduleTimeoutSeconds": 0}},
     "scheduleTimeoutSeconds: expected a positive integer"),
])
def test_a_bad_config_stops_the_operator_with_the_field(config: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(PluginError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        PLUGINS.owned_resources(config)
    assert gang_config({}).scheduler == "none"


def test_owned_resources_only_for_the_chosen_scheduler() -> None:
    def pod_groups(config: dict[str, Any]) -> list[OwnedResource]:
        return [r for r in PLUGINS.owned_resources(config) if r.kind == "PodGroup"]

    assert pod_groups({}) == []
    assert pod_groups(VOLCANO) == [
        OwnedResource("scheduling.volcano.sh/v1beta1", "PodGroup", "podgroups", True)]
    assert pod_groups(COSCHEDULING) == [
        OwnedResource("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups", True)]


def test_the_tensorboard_deployment_is_watched_whatever_the_scheduler() -> None:
    """Unwatched, a TfJob's TensorBoard Deployment was POSTed again on every pass (a 409 and
    a GET each); it stays when the pods go (suspend, cleanup): with_replicas is False."""
    board = OwnedResource("apps/v1", "Deployment", "deployments", with_replicas=False)
    for config in ({}, VOLCANO, COSCHEDULING):
        assert board in PLUGINS.owned_resources(config)


def test_volcano_status_shows_the_phase_and_the_schedulers_reason() -> None:
    job = parse(mxjob())
    waiting = {"apiVersion": volcano.API_VERSION, "kind": "PodGroup",
               "metadata": {"name": "mx"}, "spec": {"minMember": 6},
               "status": {"phase": "Inqueue", "conditions": [
                   {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                    "message": "6/6 tasks in gang unschedulable: pod group is not ready"}]}}
    assert PLUGINS.object_status(job, waiting) == ObjectStatus(
        "PodGroup", "mx", "Inqueue",
        "NotEnoughResources: 6/6 tasks in gang unschedulable: pod group is not ready")
    running = {**waiting, "status": {"phase": "Running", "running": 6}}
    assert PLUGINS.object_status(job, running) == ObjectStatus(
        "PodGroup", "mx", "Running", "minMember 6: 6 running, 0 succeeded, 0 failed")
    assert PLUGINS.object_status(job, {**waiting, "status": {}}).phase == "Pending"  # type: ignore[union-attr]


def test_coscheduling_status() -> None:
    job = parse(mxjob())
    group = {"apiVersion": coscheduling.API_VERSION, "kind": "PodGroup",
             "metadata": {"name": "mx"}, "spec": {"minMember": 6},
             "status": {"phase": "Scheduling", "scheduled": 2}}
    assert PLUGINS.object_status(job, group) == ObjectStatus(
        "PodGroup", "mx", "Scheduling",
        "minMember 6: 2 scheduled, 0 running, 0 succeeded, 0 failed")
    assert PLUGINS.object_status(job, {**group, "apiVersion": "example.com/v1"}) is None
