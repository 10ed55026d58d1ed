"""An attempt of replicas that restart together begins only for a cause, across operator
restarts (issue 36), on the fake API and clock.

The storm's case: operator A saw a shard fail, wrote the next attempt and was killed while
deleting the attempt's pods (their DELETEs cut off half-way: marked, not removed). Operator B,
started after it, deleted them again once they were overdue; while its status write (sent
before the deletes) awaited the API server, two of them went (KWOK finishing A's deletes) and
B's caches showed it. B's DELETEs of those two answered 404 and their deletions, expected by
name, were never seen: when B created the next attempt's pods under the same names, those two
looked as being deleted, the attempt broken, and B started yet another attempt 0.2 s later,
deleting the fresh pods that were not "being deleted".
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from tests.unit.controller_harness import NS, FakeClock, Harness, controller_on
from tests.unit.fake_kube import FakeKube, status_error
from tests.unit.helpers import PLUGINS
from tests.unit.planner_helpers import c2_doc
from trainjobs.errors import TemporaryError
from trainjobs.kube import PODS, Resource, job_resource
from trainjobs.operator import metrics
from trainjobs.operator.memory import Expectations

SHARDS = ["c2-worker-0", "c2-worker-1", "c2-worker-2"]


def _c2_resource() -> Resource:
    fw = PLUGINS.framework_for("Caffe2Job")
    assert fw is not None, "the Caffe2 plugin is not installed"
    return job_resource(fw.kind, fw.plural, fw.group, fw.version)


CAFFE2JOBS = _c2_resource()
KEY = f"Caffe2Job/{NS}/c2"


async def _reconcile(h: Harness) -> None:
    await h.sync()
    await h.controller.reconcile(KEY)
    await h.sync()


def _status(kube: FakeKube) -> dict[str, Any]:
    return dict(kube.objects[(CAFFE2JOBS.plural, NS, "c2")].get("status") or {})


def _pods(kube: FakeKube) -> dict[str, tuple[str, str]]:
    """name -> (uid, attempt) of the pods that exist."""
    return {p["metadata"]["name"]: (p["metadata"]["uid"],
                                    p["metadata"]["annotations"]["trainjobs.io/attempt"])
            for p in kube.of(PODS, NS)}


def _half_deleted(kube: FakeKube, clock: FakeClock, name: str) -> None:
    """A zero-grace DELETE cut off between marking the pod and removing it."""
    pod = copy.deepcopy(kube.objects[(PODS.plural, NS, name)])
    pod["metadata"].update(deletionTimestamp=clock.wall.strftime("%Y-%m-%dT%H:%M:%SZ"),
                           deletionGracePeriodSeconds=0)
    kube.put(PODS, pod)


def _submit(kube: FakeKube) -> None:
    doc = c2_doc(workers=3, restart="OnFailure", backoffLimit=3)
    doc["metadata"].update(namespace=NS, generation=1)
    kube.put(CAFFE2JOBS, doc)


async def _running(h: Harness) -> None:
    await _reconcile(h)
    for name in SHARDS:
        h.set_pod(name, "Running")
    h.clock.advance(2)
    await _reconcile(h)
    assert _status(h.kube)["state"] == "Running"


async def test_pods_gone_before_their_delete_are_not_taken_for_the_next_attempt() -> None:
    kube, clock = FakeKube(), FakeClock()
    _submit(kube)

    # Operator A: attempt 0 runs; shard 0 fails; A writes attempt 1, then is killed while
    # its DELETEs of attempt 0's pods are cut off half-way.
    async with controller_on(kube, clock) as a:
        await _running(a)
        a.set_pod("c2-worker-0", "Failed", exit_code=137)
        kube.refuse = lambda verb, kind, _: status_error(
            500, "InternalError", "cut off") if (verb, kind) == ("DELETE", "Pod") else None
        with pytest.raises(TemporaryError, match="500: cut off"):
            await _reconcile(a)  # (A dies here: what it wrote is what counts)
        kube.refuse = lambda *_: None
    assert _status(kube)["attempt"] == 1
    for name in SHARDS:
        _half_deleted(kube, clock, name)
    clock.advance(4)

    # Operator B starts: it waits for the half-done deletes, then deletes them again; while
    # its status write awaits the API server, two of them go and its caches show it.
    async with controller_on(kube, clock) as b:
        await _reconcile(b)
        assert set(_pods(kube)) == set(SHARDS)  # overdue only 10 s after their deletion
        clock.advance(7)
        patch = kube.merge_patch_status

        async def write_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
            answer = await patch(*args, **kwargs)
            for name in ("c2-worker-1", "c2-worker-2"):
                kube.remove(PODS, NS, name)  # (KWOK finishing A's deletes)
            await b.sync()
            return answer

        kube.merge_patch_status = write_meanwhile  # type: ignore[method-assign]
        await _reconcile(b)
        kube.merge_patch_status = patch  # type: ignore[method-assign]
        assert _pods(kube) == {}
        assert [c.name for c in kube.made("DELETE", "Pod")][-3:] == SHARDS

        # Attempt 1 is created, its pods start: nothing of it may look deleted.
        await _reconcile(b)
        fresh = _pods(kube)
        assert sorted(fresh) == SHARDS and {a for _, a in fresh.values()} == {"1"}
        deletes = len(kube.made("DELETE", "Pod"))
        for name in SHARDS:
            b.set_pod(name, "Running")
        await _reconcile(b)
        assert len(kube.made("DELETE", "Pod")) == deletes, \
            [c.name for c in kube.made("DELETE", "Pod")][deletes:]
        assert _pods(kube) == fresh
        status = _status(kube)
        assert (status["attempt"], status["state"]) == (1, "Running"), status
        assert status["replicaStatuses"]["Worker"]["restarts"] == 1


def _wanted_deletions(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value("trainjobs_wanted_pod_deletions_total",
                                              {"kind": "Caffe2Job", "reason": reason})
    return value or 0.0


async def test_deleting_pods_the_job_still_wants_is_logged_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    kube, clock = FakeKube(), FakeClock()
    _submit(kube)
    async with controller_on(kube, clock) as h:
        await _running(h)
        before = _wanted_deletions("NewAttempt")
        h.set_pod("c2-worker-1", "Failed", exit_code=137)
        with caplog.at_level(logging.INFO, logger="trainjobs.operator"):
            await _reconcile(h)
        assert _wanted_deletions("NewAttempt") - before == 2  # the live peers, not the failed
        lines = [r.getMessage() for r in caplog.records if "still wants" in r.getMessage()]
        assert lines == ["Caffe2Job team-a/c2: deleting 2 pods it still wants (NewAttempt: "
                         "attempt 1 begins: pod c2-worker-1 failed with exit code 137): "
                         "c2-worker-0, c2-worker-2"]
        assert sorted(c.name for c in kube.made("DELETE", "Pod")) == SHARDS


async def test_a_pod_shown_before_its_create_answered_is_not_stood_in_for() -> None:
    """The watch may show a created pod before its create's answer: an expectation made after
    the answer stayed for the expectation timeout and stood in for the pod, Pending, once it
    was gone, so a replica lost meanwhile was neither seen lost nor recreated."""
    kube, clock = FakeKube(), FakeClock()
    async with controller_on(kube, clock, status_coalesce_seconds=0.0) as h:
        create = kube.create

        async def shown_first(resource: Resource, *args: Any, **kwargs: Any) -> None:
            await create(resource, *args, **kwargs)
            if resource.kind != "Event":  # (an Event is posted by the poster h.sync waits for)
                await h.sync()

        kube.create = shown_first  # type: ignore[method-assign]
        h.submit()
        await h.reconcile("tf")
        kube.create = create  # type: ignore[method-assign]
        names = h.pod_names()
        assert len(names) == 3
        memory = h.memory()
        assert memory is not None and memory.expectations.pending() == (set(), set())
        gone = kube.objects[(PODS.plural, NS, "tf-worker-1")]["metadata"]["uid"]
        kube.remove(PODS, NS, "tf-worker-1")  # deleted by someone else while Pending
        await h.reconcile("tf")
        assert h.pod_names() == names
        assert kube.objects[(PODS.plural, NS, "tf-worker-1")]["metadata"]["uid"] != gone


def test_a_deletion_is_expected_of_one_object() -> None:
    """A re-list shows a pod replaced under its name as a change, not a deletion: the object
    with another uid ends the expectation and is never taken for the one deleted."""
    now = [0.0]
    exp = Expectations(60.0, lambda: now[0])
    exp.expect_delete("Pod/a", "u1")
    assert exp.deleting("Pod/a", "u1") and not exp.deleting("Pod/a", "u2")
    exp.seen("Pod/a", True, "u1")  # (its own update: still expected)
    assert exp.deleting("Pod/a", "u1")
    exp.seen("Pod/a", True, "u2")
    assert not exp.deleting("Pod/a") and exp.pending() == (set(), set())
    # One we created and deleted before the caches showed it: bound to the first shown.
    exp.expect_create("Pod/b")
    exp.expect_delete("Pod/b")
    exp.seen("Pod/b", True, "u3")
    assert exp.deleting("Pod/b", "u3") and not exp.deleting("Pod/b", "u4")
    exp.seen("Pod/b", False)
    assert exp.pending() == (set(), set())


def test_expectations_end_with_their_timeout() -> None:
    now = [0.0]
    exp = Expectations(10.0, lambda: now[0])
    exp.expect_create("Pod/a")
    exp.expect_delete("Pod/b", "u1")
    assert exp.pending() == ({"Pod/a"}, {"Pod/b"})
    now[0] = 11.0
    assert exp.pending() == (set(), set())
