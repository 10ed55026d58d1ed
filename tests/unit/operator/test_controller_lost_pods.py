"""Which pods the controller reports lost, and named how (issue 27.9), on the fake API: a pod
that had started and went without the operator deleting it is lost, named by the
DisruptionTarget reason it last showed, else Deleted; a pod that went while still Pending never
ran and is recreated silently (docs/api.md).

The case seen on the real kube-scheduler: it deletes a preemption victim by name with no uid
precondition, and a second preemptor that chose the same victim deletes it again (its cached
copy already carries the DisruptionTarget condition, so no status patch first). When the
operator has recreated the victim by then, that DELETE takes the replacement, Pending and with
no condition. Counting it made a loss named Deleted in the middle of a preemption."""

from __future__ import annotations

import copy

from tests.unit.controller_harness import NS, Harness, running_controller
from trainjobs.kube import PODS

PREEMPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "default-scheduler: preempting to accommodate a higher priority pod"}


async def _running(h: Harness) -> None:
    h.submit()
    await h.reconcile("tf")
    for name in h.pod_names():
        h.set_pod(name, "Running")
    await h.reconcile("tf")
    assert h.status()["state"] == "Running"


def _mark(h: Harness, name: str) -> str:
    """The scheduler's status patch: the DisruptionTarget condition; returns the pod's uid."""
    pod = copy.deepcopy(h.kube.objects[(PODS.plural, NS, name)])
    pod.setdefault("status", {"phase": "Pending"}).setdefault("conditions", []).append(
        dict(PREEMPTED))
    h.kube.put(PODS, pod)
    return str(pod["metadata"]["uid"])


def _uid(h: Harness, name: str) -> str:
    return str(h.kube.objects[(PODS.plural, NS, name)]["metadata"]["uid"])


def _lost_events(h: Harness) -> list[str]:
    return [e["message"] for e in h.kube.of_events() if e["reason"] == "ReplicaLost"]


def _worker(h: Harness) -> dict[str, object]:
    return dict(h.status()["replicaStatuses"]["Worker"])


async def test_a_replacement_deleted_before_it_ran_is_no_loss() -> None:
    async with running_controller(status_coalesce_seconds=0.0) as h:
        await _running(h)
        victim = _mark(h, "tf-worker-1")
        h.kube.remove(PODS, NS, "tf-worker-1")
        await h.reconcile("tf")
        worker = _worker(h)
        assert (worker["lost"], worker["lastLostReason"]) == (1, "PreemptionByScheduler")
        assert len(_lost_events(h)) == 1 and ": PreemptionByScheduler: " in _lost_events(h)[0]
        replacement = _uid(h, "tf-worker-1")
        assert replacement != victim  # recreated at once; Pending

        # The scheduler's second DELETE by name takes the replacement: no condition on it.
        h.kube.remove(PODS, NS, "tf-worker-1")
        await h.reconcile("tf")
        worker = _worker(h)
        assert (worker["lost"], worker["lastLostReason"]) == (1, "PreemptionByScheduler")
        assert len(_lost_events(h)) == 1, _lost_events(h)
        assert _uid(h, "tf-worker-1") not in (victim, replacement)  # recreated again

        # Its by-name status patch may reach the replacement first: still never ran.
        _mark(h, "tf-worker-1")
        h.kube.remove(PODS, NS, "tf-worker-1")
        await h.reconcile("tf")
        assert _worker(h)["lost"] == 1 and len(_lost_events(h)) == 1, _lost_events(h)
        assert (_worker(h)["restarts"], _worker(h)["failed"]) == (0, 0)


async def test_a_replacement_that_ran_is_lost_named_as_its_pod_said() -> None:
    """The same DELETE reaching a replacement that already runs: a loss, and the pod carries
    no DisruptionTarget then, so it is Deleted: what the API says of that pod."""
    async with running_controller(status_coalesce_seconds=0.0) as h:
        await _running(h)
        _mark(h, "tf-worker-0")
        h.kube.remove(PODS, NS, "tf-worker-0")
        await h.reconcile("tf")
        h.set_pod("tf-worker-0", "Running")
        await h.reconcile("tf")
        h.kube.remove(PODS, NS, "tf-worker-0")
        await h.reconcile("tf")
        worker = _worker(h)
        assert (worker["lost"], worker["lastLostReason"]) == (2, "Deleted"), worker
        lost = _lost_events(h)
        assert len(lost) == 2 and "deleted by someone other than the operator" in lost[-1], lost
