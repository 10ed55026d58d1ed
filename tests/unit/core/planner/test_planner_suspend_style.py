"""Suspension as training-operator v1.9.4's `ReconcileJobs` has it, for the Kubeflow plugin's
kinds (`Framework.suspend_style = "kubeflow"`), and what both styles share.

Why: Kueue's built-in `kubeflow.org/tfjob` integration admits and evicts a TFJob only through
`runPolicy.suspend`, and reads back what training-operator writes: `replicaStatuses[*].active`
(0 before it releases the quota) and the Running condition. Upstream's suspend branch deletes
the pods and Services whatever cleanPodPolicy says, sets `active` 0, a True Running False and
Suspended True, both with reason `TFJobSuspended` and message "TFJob <name> is suspended.",
and keeps `startTime`; its resume sets Suspended False (`TFJobResumed`, "... is resumed.")
and `startTime` to now.
"""

from __future__ import annotations

from typing import Any

from tests.unit.planner_helpers import (
    World,
    assert_true_only,
    mx_doc,
    names_of,
    parse,
    running_world,
)
from trainjobs.api.models import ConditionType
from trainjobs.core.planner import PlannerSettings
from trainjobs.plugin.manager import load_plugins

RUNNING, SUSPENDED = ConditionType.RUNNING, ConditionType.SUSPENDED
KUBEFLOW = load_plugins(enable=["kubeflow"])


def kubeflow_tfjob(suspend: bool = False, **run_policy: Any) -> dict[str, Any]:
    """An unchanged kubeflow.org/v1 TFJob: a Chief and two Workers."""
    def spec(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "tf:2"}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "tf", "namespace": "team", "uid": "u-1", "generation": 1},
            "spec": {"runPolicy": {"suspend": suspend, **run_policy},
                     "tfReplicaSpecs": {"Chief": spec(1), "Worker": spec(2)}}}


def kubeflow_world(doc: dict[str, Any], running: bool = True,
                   settings: PlannerSettings | None = None) -> World:
    """The TFJob's world; `running`: its pods created and Running, state Running."""
    w = World(parse(doc, KUBEFLOW), plugins=KUBEFLOW, settings=settings or PlannerSettings())
    if running:
        w.step()
        w.run()
        w.step()
        assert w.state == "Running", w.status
    return w


def test_the_kubeflow_kinds_declare_the_kubeflow_style() -> None:
    assert {fw.suspend_style for fw in KUBEFLOW.frameworks.values()
            if fw.group == "kubeflow.org"} == {"kubeflow"}
    assert {fw.suspend_style for fw in load_plugins().frameworks.values()} == {"batch"}


def test_kubeflow_suspend_and_resume_as_training_operator() -> None:
    w = kubeflow_world(kubeflow_tfjob(cleanPodPolicy="None"))
    started = w.status.start_time
    assert started is not None and sorted(w.services) == sorted(w.desired.services)
    w.advance(30)
    w.respec(kubeflow_tfjob(suspend=True, cleanPodPolicy="None"))
    p = w.step()
    # Pods and Services go, cleanPodPolicy None notwithstanding.
    assert sorted(p.delete_pods) == sorted(w.desired.pods)
    assert sorted(p.delete_services) == sorted(w.desired.services)
    assert not w.pods and not w.services and not p.create_pods
    assert_true_only(w, SUSPENDED)
    cond = w.condition(SUSPENDED)
    assert (cond.reason, cond.message) == ("TFJobSuspended", "TFJob tf is suspended.")
    running = w.condition(RUNNING)
    assert (running.status, running.reason, running.message) == (
        "False", "TFJobSuspended", "TFJob tf is suspended.")
    assert all(s.active == 0 for s in w.status.replica_statuses.values())
    assert w.status.start_time == started  # kept while suspended
    assert w.status.completion_time is None
    assert [e.reason for e in p.events] == ["TFJobSuspended"]
    # A fixed point: nothing more to do, the status unchanged.
    before = w.status
    assert w.step().actions == 0 and w.status == before
    # Resume: the pods and Services come back, startTime is now.
    w.advance(60)
    w.respec(kubeflow_tfjob(cleanPodPolicy="None"))
    p = w.step()
    assert names_of(p.create_pods) == sorted(w.desired.pods)
    assert names_of(p.create_services) == sorted(w.desired.services)
    resumed = w.condition(SUSPENDED)
    assert (resumed.status, resumed.reason, resumed.message) == (
        "False", "TFJobResumed", "TFJob tf is resumed.")
    assert w.status.start_time == w.now and w.status.start_time != started
    assert "TFJobResumed" in [e.reason for e in p.events]
    w.run()
    w.step()
    assert_true_only(w, RUNNING)
    assert all(s.restarts == 0 for s in w.status.replica_statuses.values())


def test_a_kubeflow_job_suspended_from_creation_has_no_start_time_until_resumed() -> None:
    """Kueue's webhook creates the TFJob suspended: nothing runs, no Running to set False,
    no startTime; admitted (unsuspended), it starts with startTime now."""
    w = kubeflow_world(kubeflow_tfjob(suspend=True), running=False)
    p = w.step()
    assert p.actions == 0
    assert_true_only(w, SUSPENDED)
    assert w.condition(RUNNING) is None and w.status.start_time is None
    w.advance(5)
    w.respec(kubeflow_tfjob())
    p = w.step()
    assert names_of(p.create_pods) == sorted(w.desired.pods)
    assert w.status.start_time == w.now


def test_a_deadline_counts_from_the_resume() -> None:
    """startTime kept while suspended must not make a resumed job fail its deadline at once
    (training-operator sets startTime to now before it checks activeDeadlineSeconds)."""
    w = kubeflow_world(kubeflow_tfjob(activeDeadlineSeconds=100))
    w.advance(60)
    w.respec(kubeflow_tfjob(suspend=True, activeDeadlineSeconds=100))
    w.settle()
    w.advance(500)
    w.respec(kubeflow_tfjob(activeDeadlineSeconds=100))
    p = w.step()
    assert w.state != "Failed" and p.requeue_after == 100


def test_batch_style_suspend_deletes_services_too_and_keeps_its_words() -> None:
    """trainjobs' own kinds: the Services go with the pods as well (training-operator's rule,
    which Kueue's eviction of our Workloads shares); reasons JobSuspended/JobResumed and
    startTime cleared while suspended, as before."""
    w = running_world(mx_doc(cleanPodPolicy="None"))
    w.respec(mx_doc(suspend=True, cleanPodPolicy="None"))
    p = w.step()
    assert sorted(p.delete_services) == sorted(w.desired.services) and not w.services
    cond = w.condition(SUSPENDED)
    assert (cond.reason, cond.message) == ("JobSuspended", "MxJob mx is suspended")
    assert w.condition(RUNNING).reason != "JobSuspended"
    assert w.status.start_time is None
    w.advance(10)
    w.respec(mx_doc(cleanPodPolicy="None"))
    p = w.step()
    assert names_of(p.create_services) == sorted(w.desired.services)
    assert w.condition(SUSPENDED).reason == "JobResumed"
    assert w.status.start_time == w.now


def test_kubeflow_suspend_deletes_the_pod_group_whatever_clean_pod_policy_says() -> None:
    """With gang scheduling the PodGroup (a with-replicas object) goes with the pods, as
    training-operator's CleanUpResources deletes it, and comes back on resume."""
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "tf"}, "spec": {}}
    w = kubeflow_world(kubeflow_tfjob(cleanPodPolicy="None"), running=False,
                       settings=PlannerSettings(with_replicas_kinds=frozenset({"PodGroup"})))
    w.desired.extras.append(group)
    w.settle()
    assert "PodGroup/tf" in w.extras
    w.respec(kubeflow_tfjob(suspend=True, cleanPodPolicy="None"))
    w.desired.extras.append(group)
    p = w.step()
    assert p.delete_extras == ["PodGroup/tf"] and not w.extras and not w.pods
    w.respec(kubeflow_tfjob(cleanPodPolicy="None"))
    w.desired.extras.append(group)
    assert names_of(w.step().create_extras) == ["tf"]
