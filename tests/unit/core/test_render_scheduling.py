"""schedulingPolicy.priorityClass reaches every pod, unless the template chose its own."""

from __future__ import annotations

from tests.unit.helpers import mxjob, parse, render


def test_priority_class_from_scheduling_policy() -> None:
    doc = mxjob()
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high", "minAvailable": 6}}
    doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "low"
    pods = render(parse(doc)).pods
    assert pods["mx-scheduler-0"]["spec"]["priorityClassName"] == "high"
    assert pods["mx-server-1"]["spec"]["priorityClassName"] == "high"
    assert {pods[f"mx-worker-{i}"]["spec"]["priorityClassName"] for i in range(3)} == {"low"}


def test_no_scheduling_policy_sets_no_priority_class() -> None:
    pods = render(parse(mxjob())).pods
    assert all("priorityClassName" not in p["spec"] for p in pods.values())
