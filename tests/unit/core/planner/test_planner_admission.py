"""The planner under a Kueue `Admission` (issue 25 point 2): queued, no replica exists and the
job says why in Kueue's words; evicted, its pods go with no restart or loss counted and the
job says by what; admitted, the pods get the flavors' changes and run as a resumed job.
"""

from __future__ import annotations

from tests.unit.planner_helpers import World, assert_true_only, mx_doc, names_of, running_world
from trainjobs.api.models import ConditionType
from trainjobs.core.admission import Admission, Eviction, PodSetChanges, Toleration

QUEUED, RUNNING = ConditionType.QUEUED, ConditionType.RUNNING
WAITING = Admission.waiting("Pending", "couldn't assign flavors to pod set worker: "
                            "insufficient unused quota for cpu in flavor default, 2 more needed")
TOLERATION = Toleration(key="pool", operator="Exists", effect="NoSchedule")


def admitted() -> Admission:
    changes = PodSetChanges(count=1, node_selector={"pool": "a"}, tolerations=(TOLERATION,),
                            labels={"kueue.x-k8s.io/podset": "x"})
    return Admission(admitted=True, cluster_queue="cq",
                     pod_sets={t: changes for t in ("Scheduler", "Server", "Worker")})


def test_queued_job_creates_nothing_and_says_why_in_kueues_words() -> None:
    w = World.of(mx_doc(), admission=WAITING)
    p = w.step()
    assert p.create_pods == [] and p.create_services == [] and p.create_extras == []
    assert_true_only(w, QUEUED)
    cond = w.condition(QUEUED)
    assert (cond.reason, cond.message) == (WAITING.reason, WAITING.message)
    assert w.state == "Queued" and w.status.start_time is None
    assert w.step().actions == 0  # a fixed point
    # Admitted: every pod is created with the flavor's node labels and toleration.
    w.admission = admitted()
    p = w.step()
    assert names_of(p.create_pods) == sorted(w.desired.pods)
    for pod in p.create_pods:
        assert pod["spec"]["nodeSelector"]["pool"] == "a"
        assert {"key": "pool", "operator": "Exists", "effect": "NoSchedule"} in (
            pod["spec"]["tolerations"])
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "x"
    assert w.condition(QUEUED).status == "False" and w.state == "Created"
    assert w.status.start_time == w.now
    assert any(e.reason == "Admitted" for e in p.events)


def test_evicted_job_stops_without_counting_then_runs_again_when_readmitted() -> None:
    w = running_world(mx_doc(), admission=admitted())
    w.admission = Admission(admitted=False, reason="Preempted", message="m",
                            eviction=Eviction("Preempted", "Preempted to accommodate a "
                                              "workload (UID: u) due to prioritization"))
    p = w.step()
    assert sorted(p.delete_pods) == sorted(w.desired.pods) and p.create_pods == []
    assert_true_only(w, QUEUED)
    cond = w.condition(QUEUED)
    assert cond.reason == "Evicted" and cond.message.startswith("Preempted: Preempted to")
    assert [e.reason for e in p.events if e.type == "Warning"] == ["Evicted"]
    assert w.status.start_time is None
    w.settle()
    assert not w.pods
    for rstatus in w.status.replica_statuses.values():
        assert (rstatus.restarts, rstatus.lost, rstatus.active) == (0, 0, 0)
    assert w.step().events == []  # said once
    w.admission = admitted()
    p = w.step()
    assert names_of(p.create_pods) == sorted(w.desired.pods)
    w.run()
    w.step()
    assert_true_only(w, RUNNING)
    assert all(s.restarts == 0 and s.lost == 0 for s in w.status.replica_statuses.values())


def test_no_admission_is_todays_behaviour() -> None:
    with_none = World.of(mx_doc()).plan()
    assert names_of(with_none.create_pods) == sorted(World.of(mx_doc()).desired.pods)
    assert all("nodeSelector" not in p["spec"] for p in with_none.create_pods)
