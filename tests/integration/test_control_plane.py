"""The test control plane itself: real scheduling onto KWOK nodes, pods that end with the exit
code they ask for, restarts in place, garbage collection, and ``up``/``down`` leaving nothing
behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

import trainjobs
from trainjobs.kube import ApiForbidden, Kube, connect
from trainjobs.testing import (
    EXIT_CODE_ANNOTATION,
    FAIL_TIMES_ANNOTATION,
    K8S_VERSION,
    RUN_DURATION_ANNOTATION,
    ClusterOptions,
    ControlPlane,
    apply_crds,
)

pytestmark = pytest.mark.integration

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def make_pod(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    restart_policy: str = "Never",
    cpu: str = "100m",
    containers: int = 1,
    owner: dict[str, Any] | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "annotations": annotations or {}}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [
                {
                    "name": f"c{i}",
                    "image": "example.invalid/trainer:1",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }
                for i in range(containers)
            ],
        },
    }


def create(plane: ControlPlane, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    resp = plane.api().create(path, obj)
    assert resp.status == 201, resp.body.decode()
    created: dict[str, Any] = resp.json()
    return created


def get_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    resp = plane.api().get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    if resp.status == 404:
        return None
    assert resp.status == 200, resp.body.decode()
    pod: dict[str, Any] = resp.json()
    return pod


def pod_in_phase(
    plane: ControlPlane, namespace: str, name: str, *phases: str
) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        pod = get_pod(plane, namespace, name)
        return pod if pod is not None and pod["status"].get("phase") in phases else None

    return check


def test_fixture_nodes_are_ready(
    kube_cluster: ControlPlane, kube_cluster_options: ClusterOptions
) -> None:
    out = kube_cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout
    nodes = {n["metadata"]["name"]: n for n in json.loads(out)["items"]}
    assert sorted(nodes) == sorted(kube_cluster_options.node_names())
    for node in nodes.values():
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
        assert not [t for t in node["spec"].get("taints", []) if t["effect"] == "NoSchedule"]
        for field in ("capacity", "allocatable"):
            assert node["status"][field]["cpu"] == kube_cluster_options.node_cpu
            assert node["status"][field]["memory"] == kube_cluster_options.node_memory
            assert node["status"][field]["pods"] == kube_cluster_options.node_pods
    # KWOK keeps a node Lease like a kubelet; without one the node lifecycle controller
    # turns every node NotReady 50 s after start.
    leases = json.loads(
        kube_cluster.kubectl("-n", "kube-node-lease", "get", "leases", "-o", "json").stdout
    )
    assert sorted(lease["metadata"]["name"] for lease in leases["items"]) == sorted(nodes)


def test_version_matches_pin(kube_cluster: ControlPlane) -> None:
    version = json.loads(kube_cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == K8S_VERSION
    assert version["clientVersion"]["gitVersion"] == K8S_VERSION


@pytest.mark.parametrize(
    ("code", "phase", "reason"), [(0, "Succeeded", "Completed"), (137, "Failed", "Error")]
)
def test_pod_is_scheduled_runs_and_exits_with_its_code(
    kube_cluster: ControlPlane, kube_namespace: str, code: int, phase: str, reason: str
) -> None:
    ns = kube_namespace
    annotations = {EXIT_CODE_ANNOTATION: str(code), RUN_DURATION_ANNOTATION: "1500ms"}
    create(
        kube_cluster,
        f"/api/v1/namespaces/{ns}/pods",
        make_pod("worker", annotations=annotations, containers=2),
    )

    running = wait_for(pod_in_phase(kube_cluster, ns, "worker", "Running", phase), "Running")
    assert running["status"]["phase"] == "Running", "the pod ended before it was seen Running"
    assert running["spec"]["nodeName"] in kube_cluster.node_names
    assert running["status"]["podIP"]
    statuses = running["status"]["containerStatuses"]
    assert [s["name"] for s in statuses] == ["c0", "c1"]
    assert all("running" in s["state"] and s["ready"] for s in statuses)

    def scheduled_event() -> bool:
        events = (
            kube_cluster.api()
            .get(f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3Dworker")
            .json()["items"]
        )
        return any(
            e["reason"] == "Scheduled" and e.get("reportingComponent", "") == "default-scheduler"
            for e in events
        )

    wait_for(scheduled_event, "the default scheduler's Scheduled event")

    done = wait_for(pod_in_phase(kube_cluster, ns, "worker", phase), phase)
    for status in done["status"]["containerStatuses"]:
        terminated = status["state"]["terminated"]
        assert terminated["exitCode"] == code
        assert terminated["reason"] == reason
        assert status["ready"] is False
    ready = [c for c in done["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "False"


def test_run_duration_is_counted_from_container_start(
    kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    annotations = {EXIT_CODE_ANNOTATION: "0", RUN_DURATION_ANNOTATION: "3s"}
    create(
        kube_cluster,
        f"/api/v1/namespaces/{kube_namespace}/pods",
        make_pod("slow", annotations=annotations),
    )
    wait_for(pod_in_phase(kube_cluster, kube_namespace, "slow", "Running"), "Running")
    # Touching the pod while it runs must not restart its clock: the run ends 3-4 s after
    # the container started (startedAt has a 1 s resolution), not 3 s after the label.
    time.sleep(1.5)
    kube_cluster.kubectl("-n", kube_namespace, "label", "pod", "slow", "touched=yes")
    touched = time.monotonic()
    done = wait_for(pod_in_phase(kube_cluster, kube_namespace, "slow", "Succeeded"), "Succeeded")
    assert time.monotonic() - touched < 2.8
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    ran = _seconds(terminated["finishedAt"]) - _seconds(terminated["startedAt"])
    assert 3 <= ran <= 5


def _seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def test_pod_without_exit_code_keeps_running(
    kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    create(kube_cluster, f"/api/v1/namespaces/{kube_namespace}/pods", make_pod("server"))
    wait_for(pod_in_phase(kube_cluster, kube_namespace, "server", "Running"), "Running")
    time.sleep(2.5)
    pod = get_pod(kube_cluster, kube_namespace, "server")
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def test_on_failure_restarts_in_place_then_succeeds(
    kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    annotations = {
        EXIT_CODE_ANNOTATION: "3",
        RUN_DURATION_ANNOTATION: "300ms",
        FAIL_TIMES_ANNOTATION: "2",
    }
    create(
        kube_cluster,
        f"/api/v1/namespaces/{kube_namespace}/pods",
        make_pod("flaky", annotations=annotations, restart_policy="OnFailure"),
    )

    def restarted() -> dict[str, Any] | None:
        pod = get_pod(kube_cluster, kube_namespace, "flaky")
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        return pod if statuses[0].get("restartCount", 0) >= 1 else None

    pod = wait_for(restarted, "a restart")
    if pod["status"]["phase"] == "Running":  # seen between restarts, not after the end
        status = pod["status"]["containerStatuses"][0]
        assert "running" in status["state"]
        assert status["lastState"]["terminated"]["exitCode"] == 3
        assert status["lastState"]["terminated"]["reason"] == "Error"
    done = wait_for(
        pod_in_phase(kube_cluster, kube_namespace, "flaky", "Succeeded", "Failed"), "the end"
    )
    status = done["status"]["containerStatuses"][0]
    assert done["status"]["phase"] == "Succeeded"
    assert status["restartCount"] == 2
    assert status["state"]["terminated"]["exitCode"] == 0
    assert status["lastState"]["terminated"]["exitCode"] == 3


def test_always_restarts_without_ending(kube_cluster: ControlPlane, kube_namespace: str) -> None:
    annotations = {
        EXIT_CODE_ANNOTATION: "1",
        RUN_DURATION_ANNOTATION: "200ms",
        FAIL_TIMES_ANNOTATION: "3",
    }
    create(
        kube_cluster,
        f"/api/v1/namespaces/{kube_namespace}/pods",
        make_pod("daemon", annotations=annotations, restart_policy="Always"),
    )

    def restarted_three_times() -> dict[str, Any] | None:
        pod = get_pod(kube_cluster, kube_namespace, "daemon")
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        return pod if statuses[0].get("restartCount", 0) >= 3 else None

    wait_for(restarted_three_times, "three restarts")
    time.sleep(1.0)
    pod = get_pod(kube_cluster, kube_namespace, "daemon")
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 3


def test_unschedulable_pod_stays_pending(kube_cluster: ControlPlane, kube_namespace: str) -> None:
    create(
        kube_cluster, f"/api/v1/namespaces/{kube_namespace}/pods", make_pod("huge", cpu="100000")
    )

    def unschedulable() -> bool:
        pod = get_pod(kube_cluster, kube_namespace, "huge")
        conditions = (pod or {}).get("status", {}).get("conditions") or []
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
        )

    wait_for(unschedulable, "the scheduler to report Unschedulable")
    pod = get_pod(kube_cluster, kube_namespace, "huge")
    assert pod is not None and pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


def test_deleting_the_owner_garbage_collects_the_pod(
    kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    owner = create(
        kube_cluster,
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}},
    )
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": False,
    }
    create(kube_cluster, f"/api/v1/namespaces/{ns}/pods", make_pod("owned", owner=ref))
    wait_for(pod_in_phase(kube_cluster, ns, "owned", "Running"), "Running")

    kube_cluster.kubectl("-n", ns, "delete", "configmap", "owner")
    wait_for(lambda: get_pod(kube_cluster, ns, "owned") is None, "garbage collection")


def test_pod_deletion_waits_for_finalizers(kube_cluster: ControlPlane, kube_namespace: str) -> None:
    ns = kube_namespace
    create(
        kube_cluster,
        f"/api/v1/namespaces/{ns}/pods",
        make_pod("guarded", finalizers=["trainjobs.io/test-guard"]),
    )
    wait_for(pod_in_phase(kube_cluster, ns, "guarded", "Running"), "Running")
    kube_cluster.kubectl("-n", ns, "delete", "pod", "guarded", "--wait=false")
    time.sleep(1.0)
    pod = get_pod(kube_cluster, ns, "guarded")
    assert pod is not None and pod["metadata"].get("deletionTimestamp")
    kube_cluster.kubectl(
        "-n",
        ns,
        "patch",
        "pod",
        "guarded",
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/metadata/finalizers"}]',
    )
    wait_for(lambda: get_pod(kube_cluster, ns, "guarded") is None, "deletion")


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def test_cli_up_and_down_leave_no_process(tmp_path: Path) -> None:
    workdir = tmp_path / f"cli-{uuid.uuid4().hex[:6]}"
    repo_root = str(Path(trainjobs.__file__).resolve().parents[1])
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (repo_root, os.environ.get("PYTHONPATH")) if p),
    )
    cli = [sys.executable, "-m", "trainjobs.testing.cluster"]
    up = subprocess.run(
        [
            *cli,
            "up",
            "--workdir",
            str(workdir),
            "--nodes",
            "1",
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
            "--node-pods",
            "20",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = Path(up.stdout.strip().splitlines()[-1])
        assert kubeconfig == workdir / "kubeconfig" and kubeconfig.is_file()
        state = json.loads((workdir / "control-plane.json").read_text())
        pids = {p["name"]: p["pid"] for p in state["processes"]}
        assert sorted(pids) == sorted(
            ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
        )
        assert all(Path(f"/proc/{pid}").exists() for pid in pids.values())
        assert sorted(_processes_mentioning(str(workdir))) == sorted(pids.values())
        for name in pids:
            assert (workdir / "logs" / f"{name}.log").is_file()
        nodes = subprocess.run(
            [
                state["bin_dir"] + "/kubectl",
                f"--kubeconfig={kubeconfig}",
                "get",
                "nodes",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        [node] = json.loads(nodes.stdout)["items"]
        assert node["status"]["allocatable"] == {"cpu": "4", "memory": "8Gi", "pods": "20"}
    finally:
        down = subprocess.run(
            [*cli, "down", "--workdir", str(workdir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    assert down.returncode == 0, down.stderr
    assert _processes_mentioning(str(workdir)) == []
    assert not (workdir / "control-plane.json").exists()
    again = subprocess.run(
        [*cli, "down", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr


WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.trainjobs.io
spec:
  group: example.trainjobs.io
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
"""


def test_apply_crds_waits_until_established(
    kube_cluster: ControlPlane, kube_namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "widget.yaml").write_text(WIDGET_CRD)
    names = apply_crds(
        kube_cluster.kubeconfig, tmp_path / "crds", kubectl=kube_cluster.bin_dir / "kubectl"
    )
    assert names == ["widgets.example.trainjobs.io"]
    # Established means served: a custom resource is validated against the schema at once.
    bad = {
        "apiVersion": "example.trainjobs.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 0},
    }
    rejected = kube_cluster.kubectl(
        "-n", kube_namespace, "apply", "-f", "-", input=json.dumps(bad), check=False
    )
    assert rejected.returncode != 0 and "spec.size" in rejected.stderr
    bad["spec"] = {"size": 2}
    kube_cluster.kubectl("-n", kube_namespace, "apply", "-f", "-", input=json.dumps(bad))
    # Applying again is a no-op, not a conflict.
    assert apply_crds(kube_cluster.kubeconfig, tmp_path / "crds") == names


def test_a_controller_manager_that_gave_up_on_the_api_server_at_start_is_started_again(
    kube_cluster: ControlPlane, tmp_path: Path
) -> None:
    """kube-controller-manager exits 1 when the API server is not healthy within its own wait
    (about 10 s; the RBAC bootstrap hook is that slow at load 25 on 2 CPUs, and the start
    failed). Here a wrapper gives up once as it does, at once; the start heals it, says so
    in `healed`, and the control plane serves. Any other exit still fails the start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for binary in kube_cluster.bin_dir.iterdir():
        (bin_dir / binary.name).symlink_to(binary)
    wrapper = bin_dir / "kube-controller-manager"
    wrapper.unlink()
    once = tmp_path / "gave-up-once"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e {once} ]; then touch {once}\n"
        "  echo 'E1125 run.go:72] \"command failed\" err=\"failed to wait for apiserver being "
        "healthy: timed out waiting for the condition\"' >&2; exit 1\nfi\n"
        f"exec {kube_cluster.bin_dir / 'kube-controller-manager'} \"$@\"\n")
    wrapper.chmod(0o755)
    plane = ControlPlane.start(tmp_path / "plane", ClusterOptions(nodes=1), bin_dir=bin_dir)
    try:
        assert once.exists()
        assert len(plane.healed) == 1 and "kube-controller-manager" in plane.healed[0], \
            plane.healed
        assert not plane.dead(), plane.dead()
        # It runs its controllers: the default ServiceAccount of a new namespace appears.
        plane.kubectl("create", "namespace", "healed")
        wait_for(lambda: plane.kubectl("get", "serviceaccount", "default", "-n", "healed",
                                       check=False).returncode == 0,
                 "the ServiceAccount controller", timeout=60)
    finally:
        plane.stop()


async def test_the_transport_impersonates_as_the_kubeconfig_says(
    kube_cluster: ControlPlane, tmp_path: Path
) -> None:
    """kubeconfig `as`/`as-groups` reach the real API server as client-go sends them: the
    admin identity impersonating a user with no grant is refused, naming that user; the same
    user with the system:masters group may."""
    doc = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    path = "/api/v1/namespaces/default/pods"

    async def get_as(user: dict[str, object]) -> object:
        for entry in doc["users"]:
            entry["user"] = {k: v for k, v in entry["user"].items()
                             if not k.startswith("as")} | user
        kubeconfig = tmp_path / "kubeconfig-as"
        kubeconfig.write_text(yaml.safe_dump(doc))
        kube = Kube(await connect(str(kubeconfig)))
        try:
            return await kube.request("GET", path)
        finally:
            await kube.api.close()

    with pytest.raises(ApiForbidden) as refused:
        await get_as({"as": "trainjobs-nobody"})
    assert 'User "trainjobs-nobody" cannot list resource "pods"' in refused.value.message
    listed = await get_as({"as": "trainjobs-nobody", "as-groups": ["system:masters"]})
    assert isinstance(listed, dict) and listed.get("kind") == "PodList"
