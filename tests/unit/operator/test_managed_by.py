"""spec.managedBy (issue 26.1): every kind has it with no plugin code, the Kubeflow kinds have
runPolicy.managedBy as training-operator v1.9; other values are refused, the CRDs carry the
immutability rules, and the operator leaves another controller's job entirely alone."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from trainjobs_kubeflow import MXJOB, TFJOB

from tests.unit.controller_harness import NS, TFJOBS, running_controller
from tests.unit.helpers import PLUGINS, tfjob
from trainjobs.api.models import MANAGED_BY_MULTIKUEUE, MANAGED_BY_OPERATOR, job_manager
from trainjobs.convert import convert_documents
from trainjobs.core.validation import parse_job
from trainjobs.crdgen import crd_for
from trainjobs.errors import SpecInvalid
from trainjobs.plugin.manager import load_plugins
from trainjobs.plugin.types import Framework

KUBEFLOW = load_plugins(enable=["kubeflow"])
IMMUTABLE = "is immutable: it cannot be set, changed or removed"


def _kubeflow_tfjob(**run_policy: Any) -> dict[str, Any]:
    worker = {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "tf:1"}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "j"},
            "spec": {"tfReplicaSpecs": {"Worker": worker}, "runPolicy": run_policy}}


@pytest.mark.parametrize(("spec", "manager"), [
    ({}, MANAGED_BY_OPERATOR),
    (None, MANAGED_BY_OPERATOR),
    ({"managedBy": MANAGED_BY_OPERATOR}, MANAGED_BY_OPERATOR),
    ({"managedBy": MANAGED_BY_MULTIKUEUE}, MANAGED_BY_MULTIKUEUE),
    ({"runPolicy": {"managedBy": "kubeflow.org/training-operator"}}, MANAGED_BY_OPERATOR),
    ({"runPolicy": {"managedBy": MANAGED_BY_MULTIKUEUE}}, MANAGED_BY_MULTIKUEUE),
    ({"runPolicy": None, "managedBy": ""}, MANAGED_BY_OPERATOR),
])
def test_job_manager_reads_both_fields(spec: Any, manager: str) -> None:
    assert job_manager(spec) == manager


def test_every_trainjobs_kind_takes_managed_by_and_refuses_other_values() -> None:
    for framework in PLUGINS.frameworks.values():
        assert "managedBy" in framework.spec_model.model_json_schema(by_alias=True)[
            "properties"], framework.kind
    doc = tfjob(Worker=1)
    doc["spec"]["managedBy"] = MANAGED_BY_MULTIKUEUE
    job = parse_job(doc, PLUGINS)
    assert job.spec.managed_by == MANAGED_BY_MULTIKUEUE
    assert job.spec.manager() == MANAGED_BY_MULTIKUEUE
    assert job.spec.to_api()["managedBy"] == MANAGED_BY_MULTIKUEUE
    assert parse_job(tfjob(Worker=1), PLUGINS).spec.manager() == MANAGED_BY_OPERATOR
    doc["spec"]["managedBy"] = "example.com/other"
    with pytest.raises(SpecInvalid, match="managedBy"):
        parse_job(doc, PLUGINS)


def test_the_kubeflow_kinds_take_run_policy_managed_by_as_training_operator() -> None:
    job = parse_job(_kubeflow_tfjob(managedBy="kubeflow.org/training-operator"), KUBEFLOW)
    assert job.spec.manager() == MANAGED_BY_OPERATOR
    job = parse_job(_kubeflow_tfjob(managedBy=MANAGED_BY_MULTIKUEUE), KUBEFLOW)
    assert job.spec.manager() == MANAGED_BY_MULTIKUEUE
    with pytest.raises(SpecInvalid, match="managedBy"):
        parse_job(_kubeflow_tfjob(managedBy="other"), KUBEFLOW)


def _spec_schema(framework: Framework) -> dict[str, Any]:
    schema: dict[str, Any] = crd_for(framework)["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_the_crds_enumerate_the_managers_and_make_them_immutable() -> None:
    for framework in PLUGINS.frameworks.values():
        spec = _spec_schema(framework)
        assert spec["properties"]["managedBy"]["enum"] == [MANAGED_BY_OPERATOR,
                                                           MANAGED_BY_MULTIKUEUE]
        rules = [r for r in spec["x-kubernetes-validations"]
                 if not r["message"].startswith("failurePolicy")]
        assert len(rules) == 1 and "oldSelf" in rules[0]["rule"], rules
        assert rules[0]["message"].startswith(f"spec.managedBy {IMMUTABLE}")
    for framework in (TFJOB, MXJOB):
        spec = _spec_schema(framework)
        assert spec["properties"]["runPolicy"]["properties"]["managedBy"]["enum"] == [
            "kubeflow.org/training-operator", MANAGED_BY_OPERATOR, MANAGED_BY_MULTIKUEUE]
        messages = [r["message"] for r in spec["x-kubernetes-validations"]]
        assert messages[1].startswith(f"spec.runPolicy.managedBy {IMMUTABLE}")
        assert "name different managers" in messages[2]


def test_convert_moves_a_kubeflow_manager_to_spec_managed_by() -> None:
    converted = convert_documents([_kubeflow_tfjob(managedBy=MANAGED_BY_MULTIKUEUE)])
    spec = converted.documents[0]["spec"]
    assert spec["managedBy"] == MANAGED_BY_MULTIKUEUE and "managedBy" not in spec["runPolicy"]
    converted = convert_documents(
        [_kubeflow_tfjob(managedBy="kubeflow.org/training-operator")])
    assert "managedBy" not in converted.documents[0]["spec"]


async def test_the_operator_leaves_another_controllers_job_alone(
        caplog: pytest.LogCaptureFixture) -> None:
    """Created, reconciled twice, then unsuspended: no pod, Service or status write, and
    one log line; a job of this operator beside it runs as usual."""
    caplog.set_level(logging.INFO, logger="trainjobs.operator.controller")
    async with running_controller(status_coalesce_seconds=0.0) as h:
        h.submit()
        job = h.job("tf")
        job["spec"]["managedBy"] = MANAGED_BY_MULTIKUEUE
        job["spec"]["runPolicy"] = {"suspend": True}
        h.kube.put(TFJOBS, job)
        await h.reconcile("tf")
        job = h.job("tf")
        job["spec"]["runPolicy"] = {"suspend": False}
        job["metadata"]["generation"] = 2
        h.kube.put(TFJOBS, job)
        await h.reconcile("tf")
        await h.reconcile("tf")
        assert h.pod_names() == []
        writes = [(c.verb, c.kind) for c in h.kube.calls if c.verb != "GET"]
        assert writes == [], writes
        assert h.status("tf") == {}
        lines = [r.getMessage() for r in caplog.records if "managed by" in r.getMessage()]
        assert lines == [f"TfJob/{NS}/tf is managed by {MANAGED_BY_MULTIKUEUE} "
                         "(spec.managedBy): this operator leaves it alone"]
        h.submit("mine")
        await h.reconcile("mine")
        assert sorted(h.pod_names()) == ["mine-chief-0", "mine-worker-0", "mine-worker-1"]


async def test_a_multikueue_manager_runs_no_job_of_its_own(
        caplog: pytest.LogCaptureFixture) -> None:
    """--multikueue-manager: a job without managedBy (which the chart's policy would have
    refused) gets no pod, Service or status write, and one warning saying what to set."""
    caplog.set_level(logging.INFO, logger="trainjobs.operator.controller")
    async with running_controller(status_coalesce_seconds=0.0, multikueue_manager=True) as h:
        h.submit()
        await h.reconcile("tf")
        await h.reconcile("tf")
        assert h.pod_names() == []
        writes = [(c.verb, c.kind) for c in h.kube.calls if c.verb != "GET"]
        assert writes == [], writes
        assert h.status("tf") == {}
        lines = [(r.levelname, r.getMessage()) for r in caplog.records
                 if "MultiKueue manager" in r.getMessage()]
        assert lines == [("WARNING", f"TfJob/{NS}/tf is not managed by {MANAGED_BY_MULTIKUEUE}: "
                          "this operator runs no job in a MultiKueue manager cluster "
                          "(--multikueue-manager); delete it and create it again with "
                          f"spec.managedBy: {MANAGED_BY_MULTIKUEUE} and a "
                          "kueue.x-k8s.io/queue-name label")]
