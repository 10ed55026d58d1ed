"""Pods a plugin adds for the replicas (a Caffe2Job's managed Redis) follow the job's life:
created with it, stopped when it is suspended or finished, back when it resumes."""

from __future__ import annotations

import copy

from tests.unit.planner_helpers import World, c2_doc, mx_doc, names_of
from trainjobs.core.planner import PlannerSettings

REDIS = "Pod/c2-redis"


def _redis_job() -> dict:  # type: ignore[type-arg]
    doc = c2_doc(workers=2)
    doc["spec"]["backend"] = {"type": "redis"}
    return doc


def test_suspend_stops_the_managed_redis_and_resume_recreates_it() -> None:
    doc = _redis_job()
    world = World.of(doc)
    world.settle()
    assert REDIS in world.extras

    suspended = copy.deepcopy(doc)
    suspended["spec"]["runPolicy"]["suspend"] = True
    world.respec(suspended)
    decision = world.plan()
    assert "c2-redis" in decision.delete_pods
    assert {"c2-worker-0", "c2-worker-1"} <= set(decision.delete_pods)
    world.apply(decision)
    world.extras.discard(REDIS)  # the backend saw it go
    assert world.plan().delete_pods == []  # nothing left to stop

    world.respec(doc)
    decision = world.plan()
    assert [o["metadata"]["name"] for o in decision.create_extras] == ["c2-redis"]
    assert sorted(p["metadata"]["name"] for p in decision.create_pods) == [
        "c2-worker-0", "c2-worker-1"]


def test_finished_job_stops_the_managed_redis_unless_clean_pod_policy_none() -> None:
    for policy, stopped in (("Running", True), ("All", True), ("None", False)):
        doc = _redis_job()
        doc["spec"]["runPolicy"]["cleanPodPolicy"] = policy
        world = World.of(doc)
        world.settle()
        world.run("c2-worker-0", "c2-worker-1")
        world.step()
        world.succeed("c2-worker-0", "c2-worker-1")
        world.step()
        assert world.state == "Succeeded"
        assert ("c2-redis" in world.plan().delete_pods) is stopped, policy


PODGROUP = "PodGroup/mx"


def _gang_world(doc: dict) -> World:  # type: ignore[type-arg]
    """A job whose plugins add a PodGroup declared `with_replicas` (as the gang plugins do)."""
    world = World.of(doc, settings=PlannerSettings(with_replicas_kinds=frozenset({"PodGroup"})))
    world.desired.extras.append({"apiVersion": "scheduling.volcano.sh/v1beta1",
                                 "kind": "PodGroup", "metadata": {"name": "mx"}, "spec": {}})
    return world


def test_suspend_deletes_a_with_replicas_object_and_resume_recreates_it() -> None:
    doc = mx_doc(workers=2)
    world = _gang_world(doc)
    world.settle()
    assert PODGROUP in world.extras

    suspended = copy.deepcopy(doc)
    suspended["spec"]["runPolicy"]["suspend"] = True
    desired_extras = world.desired.extras
    world.respec(suspended)
    world.desired.extras = desired_extras
    decision = world.plan()
    assert decision.delete_extras == [PODGROUP]
    world.apply(decision)
    assert world.plan().delete_extras == []  # gone: nothing more to delete
    world.settle()
    assert PODGROUP not in world.extras

    world.respec(doc)
    world.desired.extras = desired_extras
    decision = world.plan()
    assert names_of(decision.create_extras) == ["mx"]


def test_without_the_setting_suspend_keeps_other_extras() -> None:
    doc = mx_doc(workers=2)
    world = World.of(doc)
    world.extras.add(PODGROUP)
    suspended = copy.deepcopy(doc)
    suspended["spec"]["runPolicy"]["suspend"] = True
    world.respec(suspended)
    assert world.plan().delete_extras == []


def test_finished_job_deletes_a_with_replicas_object_unless_clean_pod_policy_none() -> None:
    for policy, deleted in (("Running", True), ("All", True), ("None", False)):
        doc = mx_doc(workers=1, servers=1)
        doc["spec"]["runPolicy"]["cleanPodPolicy"] = policy
        world = _gang_world(doc)
        world.settle()
        world.run(*world.pod_names())
        world.step()
        world.succeed(*world.pod_names())
        world.step()
        assert world.state == "Succeeded"
        assert (world.plan().delete_extras == [PODGROUP]) is deleted, policy
