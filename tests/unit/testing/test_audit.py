"""The audit-log replay of trainjobs.testing (pure logic): creates per pod name, the removals
that justify a create, and the fake kubelet's deletes that nobody asked for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainjobs.testing import agent_of, pod_histories
from trainjobs.testing._audit import read_events

OP = "trainjobs-operator/0.1"
KWOK = "kwok/v0.8.0 (linux/amd64)"
GC = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/$Format/generic-garbage-collector"


def event(verb: str, name: str, agent: str, code: int = 200, uid: str = "",
          phase: str = "", namespace: str = "ns") -> dict[str, Any]:
    out: dict[str, Any] = {
        "verb": verb, "userAgent": agent, "stageTimestamp": "2026-01-01T00:00:00.000000Z",
        "objectRef": {"resource": "pods", "namespace": namespace, "name": name},
        "responseStatus": {"code": code},
    }
    if uid:
        out["responseObject"] = {"kind": "Pod", "metadata": {"uid": uid},
                                 "status": {"phase": phase}}
    return out


def test_a_failed_pod_justifies_one_create_and_an_unasked_kubelet_delete_is_found() -> None:
    events = [
        event("create", "w-0", OP, 201),
        event("delete", "w-0", OP, uid="a", phase="Failed"),  # a failure: create again
        event("create", "w-0", OP, 201),
        event("delete", "w-0", KWOK, uid="b", phase="Pending"),  # nobody asked (the defect)
        event("create", "w-0", OP, 201),
        event("delete", "w-0", KWOK, code=404),  # aimed at a pod already gone
        event("create", "other", OP, 201, namespace="elsewhere"),
    ]
    history = pod_histories(events, "ns")["w-0"]
    assert history.creates() == 3
    assert history.failures() == 1
    assert history.duplicates() == 1
    assert [(w.uid, w.code) for w in history.unasked_deletes()] == [("b", 200), ("", 404)]
    assert set(pod_histories(events, "ns")) == {"w-0"}


def test_a_graceful_delete_finished_by_the_kubelet_and_a_gc_removal_are_not_duplicates() -> None:
    events = [
        event("create", "s-0", OP, 201),
        event("delete", "s-0", OP, uid="a", phase="Running"),  # cleanPodPolicy: graceful
        event("delete", "s-0", KWOK, uid="a", phase="Running"),  # the kubelet finishes it
        event("create", "j-0", OP, 201),
        event("delete", "j-0", GC, uid="c", phase="Running"),  # job deleted, created again
        event("delete", "j-0", KWOK, uid="c", phase="Running"),
        event("create", "j-0", OP, 201),
    ]
    histories = pod_histories(events, "ns")
    assert histories["s-0"].unasked_deletes() == [] and histories["s-0"].duplicates() == 0
    assert histories["j-0"].unasked_deletes() == [] and histories["j-0"].duplicates() == 0
    assert histories["j-0"].creates() == 2


def test_agents_and_a_torn_last_line(tmp_path: Path) -> None:
    assert agent_of(KWOK) == "kwok" and agent_of(GC) == "kube-controller-manager"
    assert agent_of(OP) == "operator" and agent_of("bench/1", (("bench", "bench"),)) == "bench"
    log = tmp_path / "audit.log"
    log.write_text(json.dumps(event("create", "a", OP, 201)) + "\n" + '{"verb": "cre')
    assert [e["objectRef"]["name"] for e in read_events(log)] == ["a"]
    assert read_events(tmp_path / "missing.log") == []


def test_a_delete_whose_answer_was_lost_accounts_for_the_kubelet_and_a_recreation() -> None:
    # An overloaded API server answers 504 to the operator's DELETE, yet the graceful deletion
    # started: the kubelet finishes it, and the operator creates the replica again.
    events = [
        event("create", "w-0", OP, 201),
        event("delete", "w-0", OP, code=504),
        event("delete", "w-0", KWOK, uid="a", phase="Running"),
        event("create", "w-0", OP, 201),
        event("delete", "w-0", KWOK, uid="b", phase="Running"),  # this one nobody asked for
    ]
    history = pod_histories(events, "ns")["w-0"]
    assert history.duplicates() == 0
    assert [w.uid for w in history.unasked_deletes()] == ["b"]


def test_a_pod_deleted_again_is_one_removal_and_is_counted_as_deleted_again() -> None:
    # The operator's DELETE of a Failed Worker was cut short (SIGKILL mid-request): the pod
    # stayed stored with its deletionTimestamp, and the next operator deleted it again 10 s
    # later. One failure, one justified create; the second DELETE is reported, not hidden.
    events = [
        event("create", "w-0", OP, 201),
        event("delete", "w-0", OP, uid="a", phase="Failed"),
        event("delete", "w-0", OP, uid="a", phase="Failed"),  # deleted again
        event("create", "w-0", OP, 201),
        event("create", "w-0", OP, 201),  # a duplicate: the second delete asks for nothing
    ]
    history = pod_histories(events, "ns")["w-0"]
    assert history.failures() == 1
    assert history.deleted_again() == 1
    assert history.duplicates() == 1
    assert pod_histories(events[:4], "ns")["w-0"].duplicates() == 0
    assert pod_histories(events[:2], "ns")["w-0"].deleted_again() == 0


def test_a_kubelet_delete_answered_504_while_a_deletion_is_unfinished_was_asked_for() -> None:
    # The API server just back answers 504 to KWOK finishing the operator's graceful delete;
    # KWOK tries again. Seen in the API server outage scenario: 4 such "unasked" deletes.
    events = [
        event("create", "s-0", OP, 201),
        event("delete", "s-0", OP, uid="a", phase="Running"),
        event("delete", "s-0", KWOK, code=504),  # finishing a's deletion, answer lost
        event("delete", "s-0", KWOK, uid="a", phase="Running"),
        event("create", "s-0", OP, 201),
        event("delete", "s-0", KWOK, code=504),  # nothing unfinished: nobody asked
    ]
    history = pod_histories(events, "ns")["s-0"]
    assert [(w.uid, w.code) for w in history.unasked_deletes()] == [("", 504)]


def test_a_second_kubelet_delete_finding_nothing_right_after_it_finished_one_is_asked() -> None:
    # KWOK queued its delete stage twice for a pod that changed while being deleted: the
    # second delete finds nothing (404). Only after a new create could it have hit the
    # successor, which is the harness defect these figures watch for (issue 15.8).
    events = [
        event("create", "s-0", OP, 201),
        event("delete", "s-0", OP, uid="a", phase="Pending"),
        event("delete", "s-0", KWOK, uid="a", phase="Running"),
        event("delete", "s-0", KWOK, code=404),  # the same deletion, queued twice
        event("create", "s-0", OP, 201),
        event("delete", "s-0", KWOK, code=404),  # after a create: could have hit it
    ]
    history = pod_histories(events, "ns")["s-0"]
    assert [(w.uid, w.code) for w in history.unasked_deletes()] == [("", 404)]


def test_a_kubelet_404_logged_just_before_it_finishes_the_asked_deletion_is_asked() -> None:
    # Hostile-spec run at 40b9933: KWOK's two queued deletes of a pod the operator deleted ran
    # at once; the one that found nothing was logged 0.3 ms before the one that removed it.
    events = [
        event("create", "a-0", OP, 201),
        event("delete", "a-0", OP, uid="a", phase="Running"),
        event("delete", "a-0", KWOK, code=404),  # concurrent with the next: nothing else here
        event("delete", "a-0", KWOK, uid="a", phase="Succeeded"),
        event("create", "a-0", OP, 201),
        event("delete", "a-0", KWOK, code=404),  # after a create, nothing deleting: unasked
    ]
    history = pod_histories(events, "ns")["a-0"]
    assert [(w.uid, w.code) for w in history.unasked_deletes()] == [("", 404)]
