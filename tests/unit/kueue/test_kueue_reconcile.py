"""One reconcile against Kueue, step by step in the order of reconciler.go (v0.19.2), and the
equivalence of a job and its Workload."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from tests.unit.helpers import Doc, framework_of, mxjob, parse, render
from tests.unit.kueue_fixtures import (
    PENDING_MESSAGE,
    PREEMPTED_MESSAGE,
    admission,
    admitted_cond,
    cond,
    flavors,
    quota_reserved,
    with_status,
)
from trainjobs.kueue import constants as k
from trainjobs.kueue.model import Workload
from trainjobs.kueue.reconcile import (
    ApplyCondition,
    CreateWorkload,
    DeleteWorkloads,
    JobState,
    KueueSettings,
    PatchWorkload,
    Step,
    decide,
)
from trainjobs.kueue.workload import PriorityClasses, build_workload, job_pod_sets, resolve_priority

NOW = datetime(2026, 11, 25, 10, 10, tzinfo=UTC)
UID = "0b5e4d4c-1111-4222-8333-444455556666"
CLASSES = PriorityClasses(workload={"urgent": 5000, "batch": 10})


def job_doc(**labels: str) -> Doc:
    doc = mxjob()
    doc["metadata"].update(uid=UID, namespace="ns",
                           labels={k.LABEL_QUEUE_NAME: "team-a", **labels})
    return doc


def state_of(doc: Doc, active: bool = False, ready: bool = False,
             finished: tuple[bool, str] | None = None) -> JobState:
    job = parse(doc)
    sets = tuple(job_pod_sets(job, framework_of(job.kind), render(job)))
    return JobState(job, sets, active, ready, finished)


def manifest(doc: Doc) -> dict[str, Any]:
    state = state_of(doc)
    return build_workload(state.job, state.pod_sets,
                          resolve_priority(state.job, state.pod_sets, CLASSES))


def pending(doc: Doc, *extra: dict[str, Any], **kw: Any) -> Workload:
    return with_status(manifest(doc), cond("QuotaReserved", "False", "Pending", PENDING_MESSAGE),
                       cond("PodsReady", "False", "WaitForStart"), *extra, **kw)


def admitted(doc: Doc, *extra: dict[str, Any], ready: str = "WaitForStart",
             **kw: Any) -> Workload:
    return with_status(manifest(doc), quota_reserved(), admitted_cond(),
                       cond("PodsReady", "True" if ready in ("Started", "Recovered")
                            else "False", ready), *extra,
                       adm=admission(scheduler="default-flavor", server="default-flavor",
                                     worker="spot"), **kw)


DEFAULTS = KueueSettings()


def run(state: JobState, *owned: Workload, prebuilt: Workload | None = None,
        settings: KueueSettings = DEFAULTS) -> Step:
    return decide(state, owned, flavors(), CLASSES, NOW, prebuilt=prebuilt, settings=settings)


def status_conditions(step: Step) -> dict[str, dict[str, Any]]:
    """The one condition a step applies (PodsReady, Finished), by type."""
    assert isinstance(step.action, ApplyCondition)
    return {step.action.condition["type"]: step.action.condition}


# Not managed ---------------------------------------------------------------------------------


def test_a_job_without_the_queue_label_is_left_alone() -> None:
    doc = mxjob()
    step = run(state_of(doc))
    assert step.admission is None and step.action is None


def test_manage_jobs_without_queue_name_manages_it_too() -> None:
    step = run(state_of(mxjob()), settings=KueueSettings(manage_jobs_without_queue_name=True))
    assert isinstance(step.action, CreateWorkload)


# Creating, waiting, admitting ----------------------------------------------------------------


def test_no_workload_creates_one_and_holds_the_replicas() -> None:
    doc = job_doc()
    step = run(state_of(doc))
    assert isinstance(step.action, CreateWorkload)
    assert step.action.manifest == manifest(doc)
    assert step.admission is not None and not step.admission.admitted
    assert step.admission.eviction is None
    assert step.events == (("CreatedWorkload",
                            f"Created Workload: ns/{manifest(doc)['metadata']['name']}"),)


def test_no_workload_and_pods_running_stops_them_first() -> None:
    step = run(state_of(job_doc(), active=True))
    assert step.action is None
    assert step.admission is not None and step.admission.eviction is not None
    assert step.admission.eviction.reason == "NoMatchingWorkload"


def test_a_pending_workload_says_why_in_kueues_words() -> None:
    doc = job_doc()
    step = run(state_of(doc), pending(doc))
    assert step.action is None
    assert step.admission is not None and not step.admission.admitted
    assert (step.admission.reason, step.admission.message) == ("Pending", PENDING_MESSAGE)


def test_the_first_pass_on_a_new_workload_writes_pods_ready_wait_for_start() -> None:
    doc = job_doc()
    wl = with_status(manifest(doc))
    step = run(state_of(doc), wl)
    conds = status_conditions(step)
    assert (conds["PodsReady"]["status"], conds["PodsReady"]["reason"]) == ("False",
                                                                             "WaitForStart")
    # A server-side apply of that one condition, with no resourceVersion: Kueue's writes of
    # QuotaReserved and Admitted a moment earlier cannot make it fail with 409.
    assert isinstance(step.action, ApplyCondition)
    assert step.action.field_manager == "trainjobs-PodsReady"
    body = step.action.body("ns")
    assert body["status"] == {"conditions": [conds["PodsReady"]]}
    assert "resourceVersion" not in body["metadata"]
    assert not run(state_of(doc), wl, settings=KueueSettings(report_pods_ready=False)).action


def test_an_admitted_workload_starts_the_job_with_the_flavors() -> None:
    doc = job_doc()
    step = run(state_of(doc), admitted(doc))
    assert step.action is None
    adm = step.admission
    assert adm is not None and adm.admitted and adm.cluster_queue == "cluster-queue"
    assert adm.pod_sets["Worker"].node_selector == {"instance-type": "spot"}
    assert adm.pod_sets["Worker"].count == 3
    assert set(adm.pod_sets) == {"Scheduler", "Server", "Worker"}
    assert ("Started", "Admitted by clusterQueue cluster-queue") in step.events


def test_running_and_ready_reports_pods_ready_started() -> None:
    doc = job_doc()
    step = run(state_of(doc, active=True, ready=True), admitted(doc))
    conds = status_conditions(step)
    assert (conds["PodsReady"]["status"], conds["PodsReady"]["reason"]) == ("True", "Started")
    assert step.admission is not None and step.admission.admitted
    # Once written, nothing more to do while it runs.
    step = run(state_of(doc, active=True, ready=True), admitted(doc, ready="Started"))
    assert step.action is None and step.admission is not None and step.admission.admitted


def test_pods_running_without_admission_are_stopped() -> None:
    doc = job_doc()
    step = run(state_of(doc, active=True), pending(doc))
    assert step.admission is not None and step.admission.eviction is not None
    assert (step.admission.eviction.reason, step.admission.eviction.message) == (
        "NotAdmitted", "Not admitted by cluster queue")


# Eviction -------------------------------------------------------------------------------------


def test_an_evicted_job_stops_and_releases_the_quota_once_no_pod_is_active() -> None:
    doc = job_doc()
    wl = admitted(doc, cond("Evicted", "True", "Preempted", PREEMPTED_MESSAGE),
                  ready="WaitForRecovery")
    running = run(state_of(doc, active=True), wl)
    assert running.action is None  # pods still going: quota kept (reconciler.go:587)
    assert running.admission is not None and running.admission.eviction is not None
    assert running.admission.eviction.reason == "Preempted"
    assert running.admission.eviction.message == PREEMPTED_MESSAGE
    stopped = run(state_of(doc), wl)
    # Several conditions and the admission at once: a merge patch with the resourceVersion.
    assert isinstance(stopped.action, PatchWorkload) and stopped.action.subresource == "status"
    assert stopped.action.patch["metadata"] == {"resourceVersion": "7"}
    conds = {c["type"]: c for c in stopped.action.patch["status"]["conditions"]}
    assert stopped.action.patch["status"]["admission"] is None
    assert conds["QuotaReserved"]["status"] == "False"
    assert conds["Requeued"]["status"] == "True"
    assert stopped.admission is not None and stopped.admission.eviction is not None


def test_an_evicted_and_released_job_waits_saying_it_was_evicted() -> None:
    doc = job_doc()
    wl = with_status(manifest(doc), cond("QuotaReserved", "False", "Pending", PREEMPTED_MESSAGE),
                     cond("Evicted", "True", "Preempted", PREEMPTED_MESSAGE),
                     cond("PodsReady", "False", "WaitForStart"))
    step = run(state_of(doc), wl)
    assert step.action is None
    assert step.admission is not None and not step.admission.admitted
    assert step.admission.eviction is not None and step.admission.eviction.reason == "Preempted"


def test_re_admission_after_eviction_starts_again() -> None:
    doc = job_doc()
    wl = admitted(doc, cond("Evicted", "False", "QuotaReserved",
                            "Previously: " + PREEMPTED_MESSAGE))
    step = run(state_of(doc), wl)
    assert step.admission is not None and step.admission.admitted
    assert step.admission.eviction is None


# User suspend, queue change, priority -------------------------------------------------------


def test_user_suspend_deactivates_the_workload_and_resume_reactivates_it() -> None:
    suspended = job_doc()
    suspended["spec"]["runPolicy"] = {"suspend": True}
    step = run(state_of(suspended, active=True), admitted(job_doc()))
    assert isinstance(step.action, PatchWorkload) and step.action.subresource == ""
    assert step.action.patch["spec"] == {"active": False}
    inactive = admitted(suspended)  # built while suspended: spec.active false
    assert not inactive.active
    step = run(state_of(job_doc()), inactive)
    assert isinstance(step.action, PatchWorkload)
    assert step.action.patch["spec"] == {"active": True}


def test_a_queue_change_while_waiting_moves_the_workload() -> None:
    doc = job_doc()
    wl = pending(doc)
    moved = job_doc(**{k.LABEL_QUEUE_NAME: "team-b"})
    step = run(state_of(moved), wl)
    assert isinstance(step.action, PatchWorkload)
    assert step.action.patch["spec"] == {"queueName": "team-b"}


def test_a_queue_change_while_admitted_is_not_applied() -> None:
    doc = job_doc()
    moved = job_doc(**{k.LABEL_QUEUE_NAME: "team-b"})
    step = run(state_of(moved, active=True, ready=True), admitted(doc, ready="Started"))
    assert step.action is None and step.admission is not None and step.admission.admitted


def test_a_changed_priority_class_label_updates_the_workload() -> None:
    doc = job_doc(**{k.LABEL_PRIORITY_CLASS: "batch"})
    wl = pending(doc)
    step = run(state_of(job_doc(**{k.LABEL_PRIORITY_CLASS: "urgent"})), wl)
    assert isinstance(step.action, PatchWorkload)
    assert step.action.patch["spec"] == {
        "priority": 5000, "priorityClassRef": {"group": "kueue.x-k8s.io",
                                               "kind": "WorkloadPriorityClass",
                                               "name": "urgent"}}
    assert step.events[0][0] == "UpdatedWorkload"


# Equivalence ----------------------------------------------------------------------------------


def test_a_rescaled_job_not_yet_reserved_updates_its_workload_in_place() -> None:
    doc = job_doc()
    wl = pending(doc)
    bigger = job_doc()
    bigger["spec"]["replicaSpecs"]["Worker"]["replicas"] = 5
    step = run(state_of(bigger), wl)
    assert isinstance(step.action, PatchWorkload)
    counts = [p["count"] for p in step.action.patch["spec"]["podSets"]]
    assert counts == [1, 2, 5]
    assert step.events[0][0] == "UpdatedWorkload"


def test_a_rescaled_job_with_quota_reserved_gets_a_new_workload() -> None:
    doc = job_doc()
    wl = admitted(doc)
    bigger = job_doc()
    bigger["spec"]["replicaSpecs"]["Worker"]["replicas"] = 5
    step = run(state_of(bigger, active=True), wl)
    assert isinstance(step.action, DeleteWorkloads) and step.action.workloads == (wl,)
    assert step.retry
    assert step.admission is not None and step.admission.eviction is not None
    assert step.admission.eviction.message == ("No matching Workload; restoring pod templates "
                                               "according to existent Workload")
    # Once deleted, a new one is created for the new shape.
    assert isinstance(run(state_of(bigger)).action, CreateWorkload)


def test_extra_workloads_are_deleted() -> None:
    doc = job_doc()
    wl = admitted(doc, ready="Started")
    other = pending(doc, rv="3")
    step = run(state_of(doc, active=True, ready=True), wl, other)
    assert isinstance(step.action, DeleteWorkloads) and step.action.workloads == (other,)
    assert step.admission is not None and step.admission.admitted  # the match keeps running


def test_crd_defaults_and_empty_fields_do_not_break_equivalence() -> None:
    doc = job_doc()
    stored = manifest(doc)
    for pod_set in stored["spec"]["podSets"]:
        for c in pod_set["template"]["spec"]["containers"]:
            for port in c.get("ports", []):
                port["protocol"] = "TCP"  # what the Workload CRD's schema defaults
            c["resources"] = {}
    step = run(state_of(doc), with_status(stored, cond("PodsReady", "False", "WaitForStart")))
    assert step.action is None


def test_a_new_image_is_not_equivalent() -> None:
    doc = job_doc()
    wl = pending(doc)
    changed = copy.deepcopy(doc)
    changed["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "image"] = "example.invalid/mxnet:2"
    assert isinstance(run(state_of(changed), wl).action, PatchWorkload)


def test_tolerations_are_ignored_once_admitted() -> None:
    doc = job_doc()
    wl = admitted(doc, ready="Started")
    tolerant = copy.deepcopy(doc)
    tolerant["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [
        {"key": "x", "operator": "Exists"}]
    step = run(state_of(tolerant, active=True, ready=True), wl)
    assert step.action is None and step.admission is not None and step.admission.admitted
    assert isinstance(run(state_of(tolerant), pending(doc)).action, PatchWorkload)


def test_a_workload_of_an_earlier_job_of_the_same_name_does_not_match() -> None:
    doc = job_doc()
    wl = pending(doc)
    again = job_doc()
    again["metadata"]["uid"] = "another-uid"
    step = run(state_of(again), wl)
    assert isinstance(step.action, PatchWorkload)  # not reserved: updated to match (1080)


# Finishing and deletion ------------------------------------------------------------------------


def test_a_finished_job_finishes_its_workload() -> None:
    doc = job_doc()
    step = run(state_of(doc, finished=(True, "MxJob mx succeeded")), admitted(doc))
    conds = status_conditions(step)
    assert (conds["Finished"]["reason"], conds["Finished"]["message"]) == (
        "Succeeded", "MxJob mx succeeded")
    failed = run(state_of(doc, finished=(False, "backoffLimit exceeded")), admitted(doc))
    assert status_conditions(failed)["Finished"]["reason"] == "Failed"


def test_a_finished_workload_loses_its_finalizer() -> None:
    doc = job_doc()
    wl = admitted(doc, cond("Finished", "True", "Succeeded", "done"))
    step = run(state_of(doc, finished=(True, "done")), wl)
    assert isinstance(step.action, PatchWorkload)
    assert step.action.patch == {"metadata": {"resourceVersion": "7", "finalizers": []}}
    assert step.events[0][0] == "FinishedWorkload"


def test_a_deleted_workload_stops_the_job_and_loses_its_finalizer() -> None:
    doc = job_doc()
    wl = admitted(doc, ready="Started")
    obj = wl.to_api()
    obj["metadata"]["deletionTimestamp"] = "2026-11-25T10:09:00Z"
    step = run(state_of(doc, active=True, ready=True), Workload.model_validate(obj))
    assert step.admission is not None and step.admission.eviction is not None
    assert step.admission.eviction.reason == "WorkloadDeleted"
    assert isinstance(step.action, PatchWorkload)
    assert step.action.patch["metadata"]["finalizers"] == []


# Admission problems -------------------------------------------------------------------------


def test_a_flavor_not_cached_yet_is_retried() -> None:
    doc = job_doc()
    step = decide(state_of(doc), [admitted(doc)], flavors({"metadata": {"name": "other"}}),
                  CLASSES, NOW)
    assert step.retry and step.admission is not None and not step.admission.admitted
    assert step.admission.reason == "FlavorNotFound"


def test_a_conflicting_pod_set_update_fails_to_start() -> None:
    doc = job_doc()
    checks = [{"name": "prov", "state": "Ready", "message": "", "podSetUpdates": [
        {"name": "worker", "nodeSelector": {"instance-type": "on-demand"}}]}]
    step = run(state_of(doc), admitted(doc, admissionChecks=checks))
    conds = status_conditions(step)
    assert conds["Finished"]["reason"] == "FailedToStart"
    assert step.admission is not None and not step.admission.admitted


def test_a_missing_priority_class_waits_with_the_reason() -> None:
    step = run(state_of(job_doc(**{k.LABEL_PRIORITY_CLASS: "gone"})))
    assert step.retry and step.action is None
    assert step.admission is not None and step.admission.reason == "PriorityClassNotFound"


# Prebuilt workloads (MultiKueue worker clusters) ---------------------------------------------


def prebuilt_doc(name: str) -> Doc:
    doc = job_doc()
    doc["metadata"]["annotations"] = {k.ANNOTATION_PREBUILT_WORKLOAD: name}
    return doc


def unowned(wl: Workload) -> Workload:
    obj = wl.to_api()
    obj["metadata"]["ownerReferences"] = []
    return Workload.model_validate(obj)


def test_a_prebuilt_workload_is_taken_over_not_created() -> None:
    doc = prebuilt_doc("from-manager")
    wl = unowned(pending(doc))
    step = run(state_of(doc), prebuilt=wl)
    assert isinstance(step.action, PatchWorkload)
    meta = step.action.patch["metadata"]
    assert meta["labels"][k.LABEL_JOB_UID] == UID
    assert meta["ownerReferences"][-1]["uid"] == UID
    assert meta["ownerReferences"][-1]["controller"] is True


def test_a_missing_prebuilt_workload_is_waited_for() -> None:
    step = run(state_of(prebuilt_doc("from-manager")))
    assert step.action is None and step.retry
    assert step.admission is not None and not step.admission.admitted


def test_an_out_of_sync_prebuilt_workload_is_finished() -> None:
    doc = prebuilt_doc("from-manager")
    other = job_doc()
    other["spec"]["replicaSpecs"]["Worker"]["replicas"] = 7
    step = run(state_of(doc), prebuilt=pending(other))
    conds = status_conditions(step)
    assert (conds["Finished"]["reason"], conds["Finished"]["message"]) == (
        "OutOfSync", "The prebuilt workload is out of sync with its user job")


def test_a_prebuilt_workload_of_another_object_is_ignored() -> None:
    doc = prebuilt_doc("from-manager")
    obj = pending(doc).to_api()
    obj["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    step = run(state_of(doc), prebuilt=Workload.model_validate(obj))
    assert step.action is None and step.admission is not None and not step.admission.admitted



# The job gone ----------------------------------------------------------------------------------


def test_an_orphaned_workload_is_finished_then_released() -> None:
    from trainjobs.kueue.reconcile import finalize_orphan

    doc = job_doc()
    wl = admitted(doc, ready="Started")
    first = finalize_orphan(wl, NOW)
    assert isinstance(first, ApplyCondition)
    finished = first.condition
    assert (finished["reason"], finished["message"]) == (
        "OwnerNotFound", "The workload's owner no longer exists")
    done = admitted(doc, cond("Finished", "True", "OwnerNotFound", "gone"))
    second = finalize_orphan(done, NOW)
    assert isinstance(second, PatchWorkload) and second.patch["metadata"]["finalizers"] == []
    # Being deleted (the garbage collector after the job went): only the finalizer.
    obj = wl.to_api()
    obj["metadata"]["deletionTimestamp"] = "2026-11-25T10:09:00Z"
    deleting = finalize_orphan(Workload.model_validate(obj), NOW)
    assert isinstance(deleting, PatchWorkload) and deleting.subresource == ""
    obj["metadata"]["finalizers"] = []
    assert finalize_orphan(Workload.model_validate(obj), NOW) is None


def test_a_job_being_deleted_finalizes_its_workloads() -> None:
    doc = job_doc()
    doc["metadata"]["deletionTimestamp"] = "2026-11-25T10:09:00Z"
    step = run(state_of(doc), pending(doc))
    assert step.admission is None
    assert isinstance(step.action, ApplyCondition)
    assert step.action.condition["reason"] == "OwnerNotFound"


def test_a_flavor_conflicting_with_the_templates_node_selector_fails_to_start() -> None:
    doc = job_doc()
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
        "instance-type": "on-demand"}
    step = run(state_of(doc), admitted(doc))
    conds = status_conditions(step)
    assert conds["Finished"]["reason"] == "FailedToStart"
    assert "conflict for key=instance-type, value1=on-demand, value2=spot" in (
        conds["Finished"]["message"])
    # A nodeSelector that agrees with the flavor is fine.
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
        "instance-type": "spot"}
    step = run(state_of(doc), admitted(doc))
    assert step.admission is not None and step.admission.admitted


# A third-party kind ------------------------------------------------------------------------------


def test_a_kind_from_a_third_party_plugin_is_admitted_with_no_plugin_change() -> None:
    """The example PyTorchJob plugin (examples/plugins/trainjobs-pytorch), loaded as it is:
    its Workload, waiting, admission and the flavors on its pods come from the core alone."""
    import importlib.util
    from pathlib import Path

    from tests.unit.helpers import REPO, container, plugin_env, replica, template
    from tests.unit.helpers import job_doc as make_doc
    from trainjobs.core.admission import merge_into_pod
    from trainjobs.plugin.manager import DISABLE_AUTOLOAD_ENV, LoadedPlugin, load_plugins

    source = Path(REPO, "examples/plugins/trainjobs-pytorch/src/trainjobs_pytorch/__init__.py")
    spec = importlib.util.spec_from_file_location("trainjobs_pytorch_under_test", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with plugin_env(**{DISABLE_AUTOLOAD_ENV: "1"}):
        plugins = load_plugins(extra=[(module.plugin, LoadedPlugin(
            "pytorch", module.__name__, "trainjobs-pytorch", "0"))])
    doc = make_doc("PyTorchJob", "pt", {
        "Master": replica(1, template(container("pytorch"))),
        "Worker": replica(3, template(container("pytorch", resources={
            "requests": {"cpu": "4"}})))})
    doc["metadata"].update(uid=UID, namespace="ns", labels={k.LABEL_QUEUE_NAME: "team-a"})
    job = parse(doc, plugins)
    rendered = render(job, plugins)
    framework = plugins.framework_for("PyTorchJob")
    assert framework is not None
    sets = tuple(job_pod_sets(job, framework, rendered))
    assert [(p.name, p.count) for p in sets] == [("master", 1), ("worker", 3)]
    state = JobState(job, sets, active=False, pods_ready=False)
    created = decide(state, [], flavors(), CLASSES, NOW)
    assert isinstance(created.action, CreateWorkload)
    manifest_ = created.action.manifest
    assert manifest_["metadata"]["name"].startswith("pytorchjob-pt-")
    assert manifest_["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    wl = with_status(manifest_, quota_reserved(), admitted_cond(),
                     cond("PodsReady", "False", "WaitForStart"),
                     adm=admission(master="default-flavor", worker="spot"))
    step = decide(state, [wl], flavors(), CLASSES, NOW)
    assert step.action is None and step.admission is not None and step.admission.admitted
    pod = merge_into_pod(rendered.pods["pt-worker-2"], step.admission.pod_sets["Worker"])
    assert pod["spec"]["nodeSelector"] == {"instance-type": "spot"}
    assert pod["spec"]["tolerations"] == [{"key": "spot-taint", "operator": "Exists",
                                           "effect": "NoSchedule"}]
    assert pod["metadata"]["labels"][k.LABEL_PODSET] == "worker"
    assert pod["metadata"]["annotations"][k.ANNOTATION_WORKLOAD] == wl.metadata.name
