"""A TfJob's TensorBoard Deployment on the real control plane: created once, not on every pass.

It was not watched, so each reconcile of the job POSTed it again, got a 409 and read it back
to check its owner: two wasted API calls per pass for as long as the job ran."""

from __future__ import annotations

import pytest

from tests.integration.operator_helpers import (
    Namespace,
    Operator,
    Operators,
    job,
    replica,
    wait_for,
)

pytestmark = pytest.mark.integration


def _total(op: Operator, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(value for (sample, sample_labels), value in op.metrics().items()
               if sample == name and set(labels.items()) <= set(sample_labels))


def _deployment_uid(ns: Namespace, name: str) -> str | None:
    found = ns.get_path(f"/apis/apps/v1/namespaces/{ns.name}/deployments/{name}")
    return None if found is None else str(found["metadata"]["uid"])


def test_the_tensorboard_deployment_is_created_once_and_again_only_when_gone(
    bare_ns: Namespace, operators: Operators
) -> None:
    op = operators.start()
    bare_ns.apply(job("TfJob", "board", {"Chief": replica("TfJob"),
                                         "Worker": replica("TfJob", 2)},
                      tensorboard={"logDir": "/logs"}))
    bare_ns.wait_state("TfJob", "board", "Running", timeout=45)
    first = wait_for(lambda: _deployment_uid(bare_ns, "board-tensorboard"),
                     "the TensorBoard Deployment")

    # Ten more passes of the running job: each label change is a watch event, so a reconcile.
    before = _total(op, "trainjobs_reconciles_total")
    for i in range(10):
        bare_ns.kubectl("label", "tfjob", "board", f"pass=p{i}", "--overwrite")
    wait_for(lambda: _total(op, "trainjobs_reconciles_total") >= before + 10 or None,
             "ten reconciles of the labelled job", timeout=30)
    conflicts = _total(op, "trainjobs_api_errors_total", code="409")
    assert conflicts == 0, f"{conflicts} creates answered 409 (exists): {op.tail()}"
    assert _deployment_uid(bare_ns, "board-tensorboard") == first

    # Deleted by someone: the watch reports it and the operator creates it again.
    bare_ns.kubectl("delete", "deployment", "board-tensorboard", "--wait=true")
    second = wait_for(lambda: _deployment_uid(bare_ns, "board-tensorboard"),
                      "the TensorBoard Deployment created again", timeout=30)
    assert second != first
    assert _total(op, "trainjobs_api_errors_total", code="409") == 0, op.tail()
    assert op.problems() == [], op.tail()


def test_a_kubeflow_tfjob_gets_tensorboard_and_the_default_ps_server(
    kubeflow_crds: list[str], bare_ns: Namespace, operators: Operators
) -> None:
    """The TensorBoard and default-PS-server plugins act on the capabilities Kubeflow's TFJob
    declares, as on TfJob's. (Last in the module: while kubeflow_crds are installed, kubectl's
    `tfjob` may mean kubeflow.org's kind.)"""
    operators.start("--enable-plugins", "kubeflow")
    bare_ns.apply({"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                   "metadata": {"name": "kfboard"},
                   "spec": {"tfReplicaSpecs": {"Chief": replica("TfJob"),
                                               "PS": {"replicas": 1}},
                            "tensorboard": {"logDir": "/logs"}}})
    wait_for(lambda: _deployment_uid(bare_ns, "kfboard-tensorboard"),
             "the Kubeflow TFJob's TensorBoard Deployment", timeout=45)
    service = wait_for(lambda: bare_ns.get_path(
        f"/api/v1/namespaces/{bare_ns.name}/services/kfboard-tensorboard"),
        "the Kubeflow TFJob's TensorBoard Service")
    assert service["spec"]["ports"][0]["targetPort"] == 6006
    ps = wait_for(lambda: bare_ns.get_path(f"/api/v1/namespaces/{bare_ns.name}/pods/kfboard-ps-0"),
                  "the Kubeflow TFJob's PS pod")
    [server] = ps["spec"]["containers"]
    assert server["name"] == "tensorflow" and server["command"][:3] == ["python", "-u", "-c"]
    assert '"task":{"type":"ps","index":0}' in next(
        e["value"] for e in server["env"] if e["name"] == "TF_CONFIG")
