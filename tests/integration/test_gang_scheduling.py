"""Gang scheduling on the real schedulers: scheduler-plugins' Coscheduling and Volcano's
vc-scheduler (built from Go modules, pinned), beside kube-scheduler, on KWOK nodes of limited
capacity: 2 nodes of 4 CPU, every pod asking for 1 CPU, so the cluster has 8 slots.

* A job of 6 pods while another workload holds 4 slots: without gang scheduling 4 of its pods
  are bound and 2 wait (the contrast); with it none is bound, the job's status shows the
  PodGroup waiting and why, and all 6 are bound once the capacity frees.
* Two such jobs at once (each needs 6 of the 8 slots): one runs whole, the other waits whole
  (no deadlock at 4 + 4), then runs when the first has finished.
* Suspend deletes the PodGroup with the pods; resume creates both again.
* (Volcano) an elastic job's gang is never placed without the replicas it cannot run without.

Every test runs once per scheduler, on a control plane of its own (small nodes, the gang
scheduler beside kube-scheduler); each test has its namespaces.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.operator_helpers import (
    CRDS_DIR,
    Namespace,
    Operators,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import ClusterOptions, ControlPlane, apply_crds

pytestmark = pytest.mark.integration

SLOT = {"requests": {"cpu": "1", "memory": "1Gi"}}
GROUP_PATHS = {"volcano": "/apis/scheduling.volcano.sh/v1beta1",
               "coscheduling": "/apis/scheduling.x-k8s.io/v1alpha1"}


@pytest.fixture(scope="module", params=["coscheduling", "volcano"])
def scheduler(request: pytest.FixtureRequest) -> str:
    """Each test runs once per gang scheduler."""
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def gang_cluster(scheduler: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """8 one-CPU slots, kube-scheduler and the gang scheduler (a control plane each)."""
    options = ClusterOptions(nodes=2, node_cpu="4", node_memory="16Gi",
                             gang_schedulers=(scheduler,))
    plane = ControlPlane.start(tmp_path_factory.mktemp(f"gang-{scheduler}"), options)
    try:
        apply_crds(plane.kubeconfig, CRDS_DIR)
        yield plane
    finally:
        plane.stop()


def _namespace(plane: ControlPlane) -> Namespace:
    name = f"gang-{uuid.uuid4().hex[:10]}"
    plane.kubectl("create", "namespace", name)
    return Namespace(plane, name)


@pytest.fixture
def namespaces(gang_cluster: ControlPlane) -> Iterator[Callable[[], Namespace]]:
    made: list[Namespace] = []

    def make() -> Namespace:
        made.append(_namespace(gang_cluster))
        return made[-1]

    try:
        yield make
    finally:
        # The next test needs the slots these pods hold: delete what makes pods, then the
        # pods themselves (KWOK removes them at once), waiting for that; the namespaces go
        # without waiting (the namespace controller takes seconds per namespace).
        for ns in made:
            ns.kubectl("delete", "deployments,mxjobs,pods", "--all", "--grace-period=0",
                       "--wait=true", "--timeout=60s", check=False, timeout=90)
        for ns in made:
            ns.plane.kubectl("delete", "namespace", ns.name, "--wait=false", check=False)


@pytest.fixture
def start_operator(gang_cluster: ControlPlane,
                   tmp_path: Path) -> Iterator[Callable[..., None]]:
    """Start an operator watching one namespace, with the given gang scheduler (or none)."""
    started: list[Operators] = []

    def start(ns: Namespace, scheduler: str | None) -> None:
        ops = Operators(gang_cluster, [ns.name], tmp_path)
        started.append(ops)
        if scheduler == "coscheduling":
            # The controller-config way, with a short Permit wait so that a group that cannot
            # complete gives its places back quickly.
            config = tmp_path / f"config-{ns.name}.yaml"
            config.write_text(yaml.safe_dump({"gangScheduling": {
                "scheduler": "coscheduling", "scheduleTimeoutSeconds": 10}}))
            ops.start("--controller-config-file", str(config), name=f"op-{scheduler}")
        elif scheduler == "volcano":
            ops.start("--gang-scheduler", "volcano", name=f"op-{scheduler}")  # the flag way
        else:
            ops.start(name="op-plain")

    try:
        yield start
    finally:
        problems = [p for ops in started for p in ops.stop_all()]
        assert not problems, "\n".join(problems)


def mx_gang(name: str, *, exit_code: int | None = None, run: str = "1s",
            **run_policy: Any) -> dict[str, Any]:
    """An MxJob of 6 pods (1 scheduler, 2 servers, 3 workers), one slot each."""
    specs = {
        "Scheduler": replica("MxJob", 1, exit_code=exit_code, run=run, resources=SLOT),
        "Server": replica("MxJob", 2, exit_code=exit_code, run=run, resources=SLOT),
        "Worker": replica("MxJob", 3, exit_code=exit_code, run=run, resources=SLOT),
    }
    return job("MxJob", name, specs, runPolicy=run_policy) if run_policy else \
        job("MxJob", name, specs)


def blocker(ns: Namespace, slots: int) -> None:
    """Another team's workload holding ``slots`` slots (kube-scheduler places it)."""
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "blocker"},
        "spec": {"replicas": slots, "selector": {"matchLabels": {"app": "blocker"}},
                 "template": {"metadata": {"labels": {"app": "blocker"}},
                              "spec": {"containers": [{"name": "c", "image": "example.invalid/x",
                                                       "resources": SLOT}]}}},
    }
    ns.kubectl("apply", "-f", "-", input=json.dumps(deployment))
    wait_for(lambda: len([p for p in ns.pods() if p["metadata"]["labels"].get("app") == "blocker"
                          and p["status"].get("phase") == "Running"]) == slots,
             f"{slots} blocker pods Running", timeout=60)


def bound(ns: Namespace, job_name: str) -> int:
    """How many of the job's pods are bound to a node and not finished."""
    return sum(1 for p in ns.pods(job_name) if p["spec"].get("nodeName")
               and p["status"].get("phase") not in ("Succeeded", "Failed")
               and not p["metadata"].get("deletionTimestamp"))


def pods_of(ns: Namespace, job_name: str) -> int:
    return len([p for p in ns.pods(job_name) if not p["metadata"].get("deletionTimestamp")])


def pod_group(ns: Namespace, scheduler: str, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = ns.get_path(
        f"{GROUP_PATHS[scheduler]}/namespaces/{ns.name}/podgroups/{name}")
    return found


def owned_objects(ns: Namespace, name: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = ns.status("MxJob", name).get("ownedObjects") or []
    return objects


def stays(check: Callable[[], bool], seconds: float, what: Callable[[], str]) -> None:
    """``check`` holds at every poll for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert check(), what()
        time.sleep(0.3)


def test_a_job_that_does_not_fit_gets_no_pod_until_it_fits(
        scheduler: str, namespaces: Callable[[], Namespace],
        start_operator: Callable[..., None]) -> None:
    others, plain, gang = namespaces(), namespaces(), namespaces()
    blocker(others, 4)  # 4 of 8 slots taken

    # The contrast: without gang scheduling 4 pods are bound, 2 wait, and the job trains
    # nothing while it holds half the cluster.
    start_operator(plain, None)
    plain.create(mx_gang("mx"))
    wait_for(lambda: pods_of(plain, "mx") == 6 and bound(plain, "mx") == 4,
             lambda: f"4 of 6 pods bound without gang scheduling: {plain.pod_summary('mx')}",
             timeout=60)
    assert plain.status("MxJob", "mx").get("ownedObjects") is None
    plain.kubectl("delete", "mxjob", "mx", "--wait=true", "--timeout=60s", "--cascade=foreground")
    wait_for(lambda: pods_of(plain, "mx") == 0, "the plain job's pods to go", timeout=60)

    # With gang scheduling: the PodGroup, owned by the job, and none of the 6 pods bound.
    start_operator(gang, scheduler)
    created = gang.create(mx_gang("mx"))
    group = wait_for(lambda: pod_group(gang, scheduler, "mx"), "the PodGroup", timeout=30)
    assert group["spec"]["minMember"] == 6
    assert group["spec"]["minResources"] == {"cpu": "6", "memory": str(6 * 2**30)}
    assert group["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    wait_for(lambda: pods_of(gang, "mx") == 6, "6 pods created", timeout=30)
    stays(lambda: bound(gang, "mx") == 0, 5,
          lambda: f"a pod of the gang was bound: {gang.pod_summary('mx')}")
    waiting = wait_for(lambda: [o for o in owned_objects(gang, "mx")
                                if o["kind"] == "PodGroup" and o["phase"] != "Running"],
                       lambda: f"the PodGroup on the job's status: {owned_objects(gang, 'mx')}",
                       timeout=30)
    assert waiting[0]["name"] == "mx" and waiting[0]["message"], waiting
    # And why the pods wait, as the scheduler wrote it on them (per replica type).
    why = wait_for(lambda: {k: r["pendingReason"] for k, r in
                            (gang.status("MxJob", "mx").get("replicaStatuses") or {}).items()
                            if r.get("pendingReason")},
                   lambda: f"a pendingReason: {gang.status('MxJob', 'mx')}", timeout=30)
    print(f"{scheduler}: waiting PodGroup on the job: {waiting[0]}; replicas: {why}")

    # Capacity frees: all 6 are bound, and the PodGroup says Running.
    others.kubectl("delete", "deployment", "blocker")
    wait_for(lambda: bound(gang, "mx") == 6,
             lambda: f"all 6 pods bound: {gang.pod_summary('mx')}", timeout=90)
    gang.wait_condition("MxJob", "mx", "Running", timeout=60)
    wait_for(lambda: [o for o in owned_objects(gang, "mx") if o["phase"] == "Running"],
             lambda: f"the PodGroup Running on the job: {owned_objects(gang, 'mx')}",
             timeout=60)


def test_two_jobs_that_each_need_most_of_the_cluster_run_one_after_the_other(
        scheduler: str, namespaces: Callable[[], Namespace],
        start_operator: Callable[..., None]) -> None:
    ns = namespaces()
    start_operator(ns, scheduler)
    # Each needs 6 of the 8 slots; pods end (exit 0) 10 s after they start.
    ns.create(mx_gang("a", exit_code=0, run="10s"))
    ns.create(mx_gang("b", exit_code=0, run="10s"))
    first = wait_for(lambda: next((n for n in ("a", "b") if bound(ns, n) == 6), None),
                     lambda: f"one job bound whole: a {ns.pod_summary('a')}; "
                             f"b {ns.pod_summary('b')}", timeout=90)
    second = "b" if first == "a" else "a"
    # The other waits whole: none of its pods takes one of the 2 free slots.
    stays(lambda: bound(ns, second) == 0 and pods_of(ns, second) == 6, 4,
          lambda: f"{second} must wait whole: {ns.pod_summary(second)}")
    ns.wait_condition("MxJob", first, "Succeeded", timeout=90)
    wait_for(lambda: bound(ns, second) == 6 or
             ns.status("MxJob", second).get("state") == "Succeeded",
             lambda: f"{second} bound once {first} finished: {ns.pod_summary(second)}",
             timeout=90)
    ns.wait_condition("MxJob", second, "Succeeded", timeout=90)


def test_suspend_deletes_the_pod_group_and_resume_recreates_it(
        scheduler: str, namespaces: Callable[[], Namespace],
        start_operator: Callable[..., None]) -> None:
    ns = namespaces()
    start_operator(ns, scheduler)
    ns.create(mx_gang("mx"))
    first = wait_for(lambda: pod_group(ns, scheduler, "mx"), "the PodGroup", timeout=30)
    wait_for(lambda: bound(ns, "mx") == 6, lambda: ns.pod_summary("mx"), timeout=60)

    ns.patch_job("MxJob", "mx", {"spec": {"runPolicy": {"suspend": True}}})
    ns.wait_condition("MxJob", "mx", "Suspended", timeout=30)
    wait_for(lambda: pod_group(ns, scheduler, "mx") is None and pods_of(ns, "mx") == 0,
             "the PodGroup and the pods to go", timeout=30)

    ns.patch_job("MxJob", "mx", {"spec": {"runPolicy": {"suspend": False}}})
    again = wait_for(lambda: pod_group(ns, scheduler, "mx"), "the PodGroup again", timeout=30)
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    wait_for(lambda: bound(ns, "mx") == 6, lambda: ns.pod_summary("mx"), timeout=60)
    ns.wait_condition("MxJob", "mx", "Running", timeout=60)


@pytest.mark.parametrize("scheduler", ["volcano"], indirect=True)
def test_an_elastic_gang_is_never_placed_without_the_replicas_it_cannot_run_without(
        scheduler: str, namespaces: Callable[[], Namespace],
        start_operator: Callable[..., None]) -> None:
    """minMember = Scheduler 1 + Server 2 + minReplicas 1 = 4, and Volcano's minTaskMember
    says which 4: with 4 slots free it never binds, say, 3 Workers and a Server (a job that
    holds 4 slots and cannot train). Volcano v1.10 does not pick the pods to fit that rule
    either, so the job may wait until more frees (docs/scheduling.md); then all 6 run."""
    others, ns = namespaces(), namespaces()
    blocker(others, 4)
    start_operator(ns, scheduler)
    doc = mx_gang("mx")
    doc["spec"]["replicaSpecs"]["Worker"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    ns.create(doc)
    group = wait_for(lambda: pod_group(ns, scheduler, "mx"), "the PodGroup", timeout=30)
    assert group["spec"]["minMember"] == 4
    assert group["spec"]["minTaskMember"] == {"scheduler": 1, "server": 2, "worker": 1}
    wait_for(lambda: pods_of(ns, "mx") == 6, "6 pods created", timeout=30)

    def bound_types() -> list[str]:
        return sorted(p["metadata"]["labels"]["trainjobs.io/replica-type"]
                      for p in ns.pods("mx") if p["spec"].get("nodeName"))

    def useful(types: list[str]) -> bool:  # nothing, or at least the gang's own members
        return not types or (types.count("scheduler") == 1 and types.count("server") == 2
                             and types.count("worker") >= 1)

    stays(lambda: useful(bound_types()), 6, lambda: f"a useless placement: {bound_types()}")
    others.kubectl("delete", "deployment", "blocker")
    wait_for(lambda: bound(ns, "mx") == 6, lambda: f"all 6 bound: {ns.pod_summary('mx')}",
             timeout=60)


def test_scheduling_policy_min_resources_and_timeout_are_the_pod_groups(
        scheduler: str, namespaces: Callable[[], Namespace],
        start_operator: Callable[..., None]) -> None:
    """Kubeflow's `schedulingPolicy.minResources` replaces the computed sum on the PodGroup and
    the scheduler holds the gang to it: 9 CPUs asked on an 8-CPU cluster, no pod is bound
    although all 6 would fit; `scheduleTimeoutSeconds` is the Coscheduling PodGroup's (over
    the operator's 10). Lowering minResources (a new job) lets the same gang run."""
    ns = namespaces()
    start_operator(ns, scheduler)
    ns.create(mx_gang("big", schedulingPolicy={"minResources": {"cpu": 9, "memory": "6Gi"},
                                              "scheduleTimeoutSeconds": 42}))
    group = wait_for(lambda: pod_group(ns, scheduler, "big"), "the PodGroup", timeout=30)
    assert group["spec"]["minResources"] == {"cpu": "9", "memory": "6Gi"}
    if scheduler == "coscheduling":
        assert group["spec"]["scheduleTimeoutSeconds"] == 42
    else:
        assert "scheduleTimeoutSeconds" not in group["spec"]  # Volcano has none
    wait_for(lambda: pods_of(ns, "big") == 6, "6 pods created", timeout=30)
    stays(lambda: bound(ns, "big") == 0, 8,
          lambda: f"a pod of the 9-CPU gang was bound: {ns.pod_summary('big')}")
    ns.kubectl("delete", "mxjob", "big", "--wait=true", "--timeout=60s", "--cascade=foreground")
    wait_for(lambda: pods_of(ns, "big") == 0, "the big job's pods to go", timeout=60)
    ns.create(mx_gang("fits", schedulingPolicy={"minResources": {"cpu": 6, "memory": "6Gi"}}))
    wait_for(lambda: bound(ns, "fits") == 6,
             lambda: f"all 6 pods bound: {ns.pod_summary('fits')}", timeout=90)
