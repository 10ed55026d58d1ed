"""Under hostNetwork a containerPort is a port of the node (the API server sets hostPort to
it, and the scheduler's NodePorts filter keeps two pods with the same one apart). trainjobs
adds no port where the framework does not listen (Gloo's shards, ps-lite's servers and
workers, TensorFlow's evaluator), never picks a node port itself (the user names it), and
its feature plugins' objects never run on the host network."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.helpers import (
    Doc,
    caffe2job,
    container,
    errors_of,
    job_doc,
    named,
    render,
    replica,
    template,
)

# caffe2-operator's README example: two shards on the host network, an existing Redis.
SEED_CAFFE2: Doc = caffe2job("example-job", workers=2, type="redis", redisHost="redis-service",
                             redisPort=6379)
SEED_CAFFE2["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True


def _host_network(doc: Doc, ports: dict[str, int]) -> Doc:
    """Every template on the host network; `ports` names the framework port per type."""
    doc = copy.deepcopy(doc)
    for key, rspec in doc["spec"]["replicaSpecs"].items():
        rspec["template"]["spec"]["hostNetwork"] = True
        if key in ports:
            rspec["template"]["spec"]["containers"][0]["ports"] = [
                {"name": f"{doc['kind'].lower()}-port", "containerPort": ports[key]}]
    return doc


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Pod":
        return [obj["spec"]]
    if obj["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"):
        return [obj["spec"]["template"]["spec"]]
    return []


def _ports(spec: dict[str, Any]) -> list[int]:
    return sorted(p["containerPort"] for c in spec.get("containers", [])
                  for p in c.get("ports", []))


HOST_NETWORK_JOBS = {
    "caffe2-seed": (SEED_CAFFE2, {}),
    "caffe2-managed-redis": (_host_network(caffe2job("c2", workers=3), {}), {}),
    "mxjob": (_host_network(job_doc("MxJob", "mx", {
        "Scheduler": replica(1, template(container("mxnet"))),
        "Server": replica(2, template(container("mxnet"))),
        "Worker": replica(3, template(container("mxnet")))}), {"Scheduler": 19091}),
        {"Scheduler": [19091]}),
    "tfjob-tensorboard-default-ps-evaluator": (_host_network(job_doc("TfJob", "tf", {
        "Chief": replica(1, template(container("tensorflow"))),
        "Worker": replica(2, template(container("tensorflow"))),
        "PS": replica(2, template(container("tensorflow"))),
        "Evaluator": replica(1, template(container("tensorflow")))},
        tensorboard={"logDir": "/logs"}), {"Chief": 12222, "Worker": 12223, "PS": 12224}),
        {"Chief": [12222], "Worker": [12223], "PS": [12224]}),
}


@pytest.mark.parametrize("case", list(HOST_NETWORK_JOBS))
def test_no_port_of_the_node_that_the_user_did_not_write(case: str) -> None:
    doc, expected = HOST_NETWORK_JOBS[case]
    rendered = render(copy.deepcopy(doc))
    for name, pod in rendered.pods.items():
        key = rendered.replicas[name].type
        user = doc["spec"]["replicaSpecs"][key]["template"]["spec"]
        assert pod["spec"]["hostNetwork"] is True
        # Every port of a host-network pod is one the user wrote, nothing added.
        assert _ports(pod["spec"]) == _ports(user) == expected.get(key, []), name
    for obj in rendered.extras:  # TensorBoard, the managed Redis: never on the host network
        for spec in _pod_specs(obj):
            assert not spec.get("hostNetwork"), obj["metadata"]["name"]


def test_two_seed_caffe2_jobs_ask_nothing_of_the_node() -> None:
    rendered = render(copy.deepcopy(SEED_CAFFE2))
    for pod in rendered.pods.values():
        assert "ports" not in named(pod["spec"]["containers"], "caffe2")
    # Addresses (CAFFE2_CONFIG, the Service) still name the port: the seed's contract.
    service = rendered.services["example-job-worker-0"]
    assert service["spec"]["ports"][0]["port"] == 2222


def test_the_default_ps_server_with_the_default_port_never_runs_on_the_host_network() -> None:
    doc = job_doc("TfJob", "tf", {"Worker": replica(2, template(container("tensorflow"))),
                                  "PS": replica(1, template(container("sidecar")))})
    doc["spec"]["replicaSpecs"]["PS"]["template"]["spec"]["hostNetwork"] = True
    errors = errors_of(doc)
    assert list(errors) == ["spec.replicaSpecs.PS.template.spec.hostNetwork"]


@pytest.mark.parametrize(("kind", "key", "specs"), [
    ("TfJob", "Worker", {"Worker": replica(2, template(container("tensorflow")))}),
    ("MxJob", "Scheduler", {"Scheduler": replica(1, template(container("mxnet"))),
                            "Server": replica(1, template(container("mxnet"))),
                            "Worker": replica(1, template(container("mxnet")))}),
])
def test_a_listening_replica_on_the_host_network_must_name_its_port(
        kind: str, key: str, specs: dict[str, Any]) -> None:
    doc = _host_network(job_doc(kind, "hn", specs), {})
    errors = errors_of(doc)
    message = errors[f"spec.replicaSpecs.{key}.template.spec.hostNetwork"]
    assert f"a containerPort named '{kind.lower()}-port'" in message
    assert "trainjobs does not choose a node port" in message
    assert len(errors) == 1, errors  # MXNet's servers and workers do not listen: no error
