"""Every upstream example manifest runs to Succeeded on the real control plane, with the
`kubeflow` plugin enabled (docs/migrating.md):

- `kubeflow.org/v1` TFJob and MXJob (tests/fixtures/kubeflow): applied unchanged, `kubectl
  apply -f FILE`, and reconciled as Kubeflow's own kinds;
- the older forms no API server serves today (tf-operator and mxnet-operator v1alpha1 to
  v1beta1, caffe2-operator v1alpha1; tests/fixtures/kubeflow and the v1alpha1 manifests of the
  project's seed texts, tests/fixtures/kubeflow/seeds): `trainjobs convert FILE`, applied.

What the examples expect of their cluster is given to them, not edited into them: fake GPU
nodes (`nvidia.com/gpu`), the PersistentVolumeClaims they mount (bound to PVs), the namespace
`kubeflow` two of them name. KWOK runs no programs: the test plays their part and ends every
pod that runs with exit code 0 (the `kwok.trainjobs.io/exit-code` annotation; the manifest is
not touched). Two examples cannot run as written, on training-operator either, and the test
holds what happens to them: MXTune's, refused (its replica types), and the BytePS MXJob,
whose v1 manifest keeps pre-v1 fields under `spec`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_helpers import Namespace, Operators, condition, wait_for
from tests.unit.convert.test_convert import FIXTURES
from trainjobs.convert import convert_documents, is_old_job
from trainjobs.testing import EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION, ControlPlane
from trainjobs.yamlio import read_documents

pytestmark = pytest.mark.integration

SEEDS = FIXTURES / "seeds"
SERVED = ("mxjob-v1-dist.yaml", "tfjob-v1-dist_mnist.yaml", "tfjob-v1-mnist_with_summaries.yaml",
          "tfjob-v1-multi_worker.yaml", "tfjob-v1-simple.yaml")
# v1 manifests written before runPolicy (tf-operator 1.0, mxnet-operator v1): its fields
# directly under spec, which training-operator's v1 CRD does not have either.
PRE_RUN_POLICY = {"mx-v1-byteps.yaml": ("spec.cleanPodPolicy", "spec.successPolicy"),
                  "tf-v1-early-multi_worker.yaml": ("spec.cleanPodPolicy",)}
TUNE = "mxjob-v1-tune.yaml"
CONVERTED = tuple(sorted(
    [p.name for p in FIXTURES.glob("*.yaml") if p.name not in (*SERVED, *PRE_RUN_POLICY, TUNE)]
    + [f"seeds/{p.name}" for p in SEEDS.glob("*.yaml")]))
# The claims the examples mount, and the GPUs their pods request (most: 2 BytePS workers x 8).
CLAIMS = ("strategy-volume", "tfevent-volume")
GPU_NODES, GPUS_PER_NODE = 2, 16
KWOK_NODE = {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}


@dataclass(frozen=True)
class Example:
    """One job of an example, where it runs and the path of its object."""

    file: str
    namespace: str
    path: str  # /apis/<group>/<version>/namespaces/<ns>/<plural>/<name>
    name: str


def test_examples_are_all_accounted_for() -> None:
    """A new example lands in one of the groups below or this fails."""
    files = {p.name for p in FIXTURES.glob("*.yaml")} | {
        f"seeds/{p.name}" for p in SEEDS.glob("*.yaml")}
    assert files == {*SERVED, *PRE_RUN_POLICY, TUNE, *CONVERTED}
    assert len(SERVED) + len(PRE_RUN_POLICY) + len(CONVERTED) + 1 == len(files) >= 24


@pytest.fixture(scope="module")
def gpu_nodes(kube_cluster: ControlPlane) -> Iterator[list[str]]:
    """Fake nodes (KWOK) with GPUs, for the examples' `nvidia.com/gpu` requests; removed
    after the module."""
    names = [f"kwok-gpu-{uuid.uuid4().hex[:6]}-{i}" for i in range(GPU_NODES)]
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu":
                str(GPUS_PER_NODE)}
    for name in names:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": KWOK_NODE,
                             "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                        "kubernetes.io/os": "linux"}},
                "status": {"capacity": capacity, "allocatable": capacity}}
        kube_cluster.kubectl("create", "-f", "-", input=json.dumps(node))
    try:
        wait_for(lambda: all(_node_ready(kube_cluster, n) for n in names),
                 f"GPU nodes {names} Ready", timeout=60)
        yield names
    finally:
        kube_cluster.kubectl("delete", "node", *names, "--wait=false", check=False)


def _node_ready(plane: ControlPlane, name: str) -> bool:
    resp = plane.api().get(f"/api/v1/nodes/{name}")
    if resp.status != 200:
        return False
    node = resp.json()
    gpus = (node.get("status", {}).get("allocatable") or {}).get("nvidia.com/gpu")
    ready = any(c["type"] == "Ready" and c["status"] == "True"
                for c in node["status"].get("conditions") or [])
    return ready and gpus == str(GPUS_PER_NODE)


def _namespace(plane: ControlPlane, name: str) -> Namespace:
    """The namespace with the claims the examples mount, each bound to a PV of its own."""
    plane.kubectl("create", "namespace", name, check=False)
    for claim in CLAIMS:
        pv = f"{name}-{claim}"
        plane.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "storageClassName": "", "hostPath": {"path": f"/tmp/{pv}"},
                     "claimRef": {"namespace": name, "name": claim}}}))
        plane.kubectl("-n", name, "apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}}))
    ns = Namespace(plane, name)
    wait_for(lambda: all((ns.get_path(f"/api/v1/namespaces/{name}/persistentvolumeclaims/{c}")
                          or {}).get("status", {}).get("phase") == "Bound" for c in CLAIMS),
             f"the claims {CLAIMS} in {name} Bound", timeout=60)
    return ns


@pytest.fixture(scope="module")
def cluster(kube_cluster: ControlPlane, trainjobs_crds: list[str], kubeflow_crds: list[str],
            gpu_nodes: list[str], tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[dict[str, Namespace], Operators]]:
    """The namespace `kubeflow` (two examples name it) and as few others as the examples' job
    names allow (six are `example-job`), and one operator with the plugin enabled watching
    them all."""
    assert sorted(kubeflow_crds) == ["mxjobs.kubeflow.org", "tfjobs.kubeflow.org"]
    prefix = f"ex-{uuid.uuid4().hex[:6]}"
    taken: dict[str, set[str]] = {}
    names = {}
    for file in (*SERVED, *PRE_RUN_POLICY, TUNE, *CONVERTED):
        job_name, written = _job_name_and_namespace(file)
        if written is None:
            written = next((n for n, used in taken.items()
                            if n.startswith(prefix) and job_name not in used),
                           f"{prefix}-{len(taken)}")
        assert job_name not in taken.setdefault(written, set()), (file, written)
        taken[written].add(job_name)
        names[file] = written
    spaces = {f: _namespace(kube_cluster, n) for f, n in names.items()}
    ops = Operators(kube_cluster, sorted(set(names.values())),
                    tmp_path_factory.mktemp("kubeflow-examples"))
    try:
        ops.start("--enable-plugins", "kubeflow", timeout=120)
        yield spaces, ops
    finally:
        problems = ops.stop_all()
        for name in sorted(set(names.values())):
            kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
        kube_cluster.kubectl("delete", "pv", *[f"{n}-{c}" for n in set(names.values())
                                               for c in CLAIMS], "--wait=false", check=False)
    assert not problems, "\n".join(problems)


def _job_name_and_namespace(file: str) -> tuple[str, str | None]:
    """The job's name and the namespace it names (`default`, printed by `kubectl get -o yaml`
    in one seed, is taken as none: the test does not write to `default`)."""
    [job] = [d for d in read_documents(FIXTURES / file) if is_old_job(d)]
    namespace = job["metadata"].get("namespace")
    return job["metadata"]["name"], None if namespace == "default" else namespace


def _example(file: str, ns: Namespace, job: dict[str, Any]) -> Example:
    group_version = job["apiVersion"]
    plural = f"{job['kind'].lower()}s"
    name = job["metadata"]["name"]
    return Example(file, ns.name, f"/apis/{group_version}/namespaces/{ns.name}/{plural}/{name}",
                   name)


def _run_to_the_end(examples: list[Example], spaces: dict[str, Namespace],
                    timeout: float = 240) -> dict[str, dict[str, Any]]:
    """End every running pod of the examples with exit code 0 until each job has finished;
    each job's status by file."""
    finished: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while len(finished) < len(examples):
        for ex in examples:
            if ex.file in finished:
                continue
            ns = spaces[ex.file]
            status = (ns.get_path(ex.path) or {}).get("status") or {}
            if any((condition(status, t) or {}).get("status") == "True"
                   for t in ("Succeeded", "Failed")):
                finished[ex.file] = status
                continue
            for pod in ns.pods(ex.name):
                annotations = pod["metadata"].get("annotations") or {}
                if pod["status"].get("phase") == "Running" and \
                        EXIT_CODE_ANNOTATION not in annotations:
                    # check=False: the job may delete it meanwhile (cleanPodPolicy).
                    ns.kubectl("annotate", "pod", pod["metadata"]["name"],
                               f"{EXIT_CODE_ANNOTATION}=0", f"{RUN_DURATION_ANNOTATION}=0s",
                               check=False)
        if time.monotonic() > deadline:
            waiting = {ex.file: spaces[ex.file].pod_summary(ex.name) for ex in examples
                       if ex.file not in finished}
            raise AssertionError(f"timed out after {timeout}s; still running: {waiting}")
        time.sleep(0.5)
    return finished


def _succeeded(statuses: dict[str, dict[str, Any]]) -> dict[str, str]:
    """file -> what is wrong, for every job that did not succeed."""
    out = {}
    for file, status in statuses.items():
        done = condition(status, "Succeeded")
        if not done or done["status"] != "True":
            failed = condition(status, "Failed") or {}
            out[file] = f"{failed.get('reason')}: {failed.get('message')}"
    return out


def test_kubeflow_v1_examples_applied_unchanged_succeed(
        cluster: tuple[dict[str, Namespace], Operators]) -> None:
    spaces, ops = cluster
    examples = []
    for file in SERVED:
        ns = spaces[file]
        out = ns.kubectl("apply", "-f", str(FIXTURES / file), "-o", "json", check=False)
        assert out.returncode == 0, f"{file}: {out.stderr}"
        stored = json.loads(out.stdout)
        assert stored["apiVersion"] == "kubeflow.org/v1", file
        examples.append(_example(file, ns, stored))
    statuses = _run_to_the_end(examples, spaces)
    assert not _succeeded(statuses), (_succeeded(statuses), ops.report())
    for ex in examples:
        pods = spaces[ex.file].pods(ex.name)
        assert all(p["metadata"]["labels"]["training.kubeflow.org/job-name"] == ex.name
                   for p in pods), ex.file


@pytest.mark.parametrize("file", sorted(PRE_RUN_POLICY))
def test_pre_run_policy_fields_refused_as_upstream_then_pruned_run(
        cluster: tuple[dict[str, Namespace], Operators], file: str) -> None:
    """`spec.cleanPodPolicy` (and MXJob's `spec.successPolicy`) are no fields of a v1 job
    since runPolicy (training-operator's v1 CRD has neither): strict `kubectl apply` refuses
    them, as it would with Kubeflow's CRD; with `--validate=false` the API server drops them,
    as Kubeflow's would, and the job runs with the defaults (trainjobs': cleanPodPolicy
    Running; docs/migrating.md). `trainjobs convert` moves them into runPolicy instead."""
    spaces, ops = cluster
    ns = spaces[file]
    refused = ns.kubectl("apply", "-f", str(FIXTURES / file), check=False)
    assert refused.returncode != 0
    for field in PRE_RUN_POLICY[file]:
        assert f'unknown field "{field}"' in refused.stderr, refused.stderr
    out = ns.kubectl("apply", "--validate=false", "-f", str(FIXTURES / file), "-o", "json")
    stored = json.loads(out.stdout)
    assert not {f.removeprefix("spec.") for f in PRE_RUN_POLICY[file]} & set(stored["spec"])
    statuses = _run_to_the_end([_example(file, ns, stored)], spaces)
    assert not _succeeded(statuses), (_succeeded(statuses), ops.report())


def test_mxtune_example_is_refused_by_the_api_server(
        cluster: tuple[dict[str, Namespace], Operators]) -> None:
    """MXNet auto-tuning is not served: its replica types are refused at admission."""
    spaces, _ = cluster
    refused = spaces[TUNE].kubectl("apply", "-f", str(FIXTURES / TUNE), check=False)
    assert refused.returncode != 0
    assert "mxReplicaSpecs keys of a MXJob must be among: Scheduler, Server, Worker" in \
        refused.stderr, refused.stderr


def test_older_examples_converted_succeed(
        cluster: tuple[dict[str, Namespace], Operators], tmp_path: Path) -> None:
    spaces, ops = cluster
    examples = []
    for file in CONVERTED:
        ns = spaces[file]
        converted = convert_documents(read_documents(FIXTURES / file), file)
        [job] = [d for d in converted.documents
                 if d.get("apiVersion", "").startswith("trainjobs.io/")]
        if job["metadata"].get("namespace") == "default":
            del job["metadata"]["namespace"]  # see _job_name_and_namespace
        out = ns.kubectl("apply", "-f", "-", "-o", "json", input=json.dumps(job), check=False)
        assert out.returncode == 0, f"{file}: {out.stderr}"
        # The examples' other objects (caffe2's Redis Service and Pod) as they are; the
        # upstream Pod has a stray `metadata.app`, which the API server drops.
        for other in converted.documents:
            if other is not job:
                ns.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(other))
        examples.append(_example(file, ns, json.loads(out.stdout)))
    statuses = _run_to_the_end(examples, spaces)
    assert not _succeeded(statuses), (_succeeded(statuses), ops.report())


def test_lowercase_replica_keys_run_as_training_operators_defaulting(
        cluster: tuple[dict[str, Namespace], Operators]) -> None:
    """`worker`, `ps`, `chief`: admitted, and the pods, labels and status are the canonical
    types' (training-operator's setTypeNameToCamelCase)."""
    spaces, ops = cluster
    ns = spaces[SERVED[2]]
    [doc] = read_documents(FIXTURES / "tfjob-v1-dist_mnist.yaml")
    doc["metadata"]["name"] = "lower"
    specs = doc["spec"]["tfReplicaSpecs"]
    doc["spec"]["tfReplicaSpecs"] = {k.lower(): v for k, v in specs.items()}
    stored = ns.apply(doc)
    assert sorted(stored["spec"]["tfReplicaSpecs"]) == ["chief", "ps", "worker"]
    example = _example("lower", ns, stored)
    # Selectors written for Kubeflow find the Services (training-operator's labels on them).
    selector = ("training.kubeflow.org/job-name=lower,training.kubeflow.org/replica-type=worker,"
                "training.kubeflow.org/operator-name=tfjob-controller")
    services = wait_for(lambda: len(found := ns.get_path(
        f"/api/v1/namespaces/{ns.name}/services", {"labelSelector": selector})["items"]) == 2
        and found, "the Workers' Services by Kubeflow's labels", timeout=60)
    assert sorted(s["metadata"]["labels"]["training.kubeflow.org/replica-index"]
                  for s in services) == ["0", "1"]
    statuses = _run_to_the_end([example], {"lower": ns})
    assert not _succeeded(statuses), (_succeeded(statuses), ops.report())
    assert sorted(statuses["lower"]["replicaStatuses"]) == ["Chief", "PS", "Worker"]
    types = {p["metadata"]["labels"]["training.kubeflow.org/replica-type"]
             for p in ns.pods("lower")}
    assert types <= {"chief", "ps", "worker"} and types
    lowered = stored["spec"]["tfReplicaSpecs"]
    both = {**lowered, "Worker": lowered["worker"]}
    doc["metadata"]["name"] = "both"
    doc["spec"]["tfReplicaSpecs"] = both
    refused = ns.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)
    assert refused.returncode != 0 and "name the same replica" in refused.stderr, refused.stderr


def test_scheduling_policy_as_kubeflow_has_it_is_kept(
        cluster: tuple[dict[str, Namespace], Operators]) -> None:
    """Kubeflow's five schedulingPolicy fields, applied strictly, are stored as written
    (nothing refused or pruned); the gang plugins use them (test_gang_scheduling)."""
    spaces, _ = cluster
    ns = spaces[SERVED[0]]
    [doc] = read_documents(FIXTURES / "tfjob-v1-dist_mnist.yaml")
    doc["metadata"]["name"] = "sched"
    policy = {"minAvailable": 3, "queue": "team-a", "priorityClass": "high",
              "minResources": {"cpu": 4, "memory": "8Gi", "nvidia.com/gpu": "2"},
              "scheduleTimeoutSeconds": 120}
    doc["spec"]["runPolicy"] = {"schedulingPolicy": policy}
    stored = ns.apply(doc)
    assert stored["spec"]["runPolicy"]["schedulingPolicy"] == policy
    doc["metadata"]["name"] = "badsched"
    doc["spec"]["runPolicy"] = {"schedulingPolicy": {"minResources": {"cpu": "lots"}}}
    refused = ns.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)
    assert refused.returncode != 0 and "minResources" in refused.stderr, refused.stderr
    ns.kubectl("delete", "tfjobs.kubeflow.org", "sched", "--wait=false")
