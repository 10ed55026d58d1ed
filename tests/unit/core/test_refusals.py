"""Refusals a user can act on: every problem of a job in one pass, a "did you mean" for a
misspelt or Kubeflow-named field, and no wording of the validation library."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.helpers import Doc, container, errors_of, mxjob, replica, template, tfjob

LIBRARY_WORDING = ("Input should", "valid dictionary", "instance of", "Extra inputs",
                   "Field required", "Value error", "type=", "pydantic")


def _typo(doc: Doc, key: str) -> None:
    doc["spec"]["replicaSpecs"][key]["template"]["spec"]["containers"][0][
        "imagePullPolicyy"] = "Always"


def test_every_problem_in_one_pass_when_the_spec_model_refuses() -> None:
    doc = tfjob(Worker=2)
    doc["spec"]["replicaSpecs"]["Worker"]["replicas"] = "2"  # the model refuses the spec
    doc["spec"]["replicaSpecs"]["Workers"] = replica(1, template(container("tensorflow")))
    doc["spec"]["tfReplicaSpecs"] = {}
    _typo(doc, "Worker")
    errors = errors_of(doc)
    assert set(errors) == {
        "spec.replicaSpecs.Worker.replicas", "spec.replicaSpecs.Workers", "spec.tfReplicaSpecs",
        "spec.replicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy"}


def test_every_problem_in_one_pass_when_the_replica_rules_refuse() -> None:
    doc = mxjob(scheduler=2)  # a replica rule the model cannot see
    doc["spec"]["replicaSpecs"]["Server"]["template"] = template(container("ps"))
    _typo(doc, "Worker")
    doc["metadata"]["name"] = "Not_A_Name"
    errors = errors_of(doc)
    assert set(errors) == {
        "spec.replicaSpecs.Scheduler.replicas", "metadata.name",
        "spec.replicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy"}


def test_template_problems_reported_when_the_metadata_is_missing() -> None:
    doc = mxjob()
    del doc["metadata"]
    _typo(doc, "Server")
    assert set(errors_of(doc)) == {
        "metadata.name", "spec.replicaSpecs.Server.template.spec.containers[0].imagePullPolicyy"}


@pytest.mark.parametrize(("change", "path", "hint"), [
    (lambda d: d["spec"].update(tfReplicaSpecs={}), "spec.tfReplicaSpecs",
     "did you mean replicaSpecs? (this looks like a Kubeflow TFJob: run `trainjobs convert"),
    (lambda d: d["spec"].update(cleanPodPolicy="None"), "spec.cleanPodPolicy",
     "did you mean runPolicy.cleanPodPolicy?"),
    (lambda d: d["spec"].update(runPolicy={"cleanPodPolicyy": "All"}),
     "spec.runPolicy.cleanPodPolicyy", "did you mean cleanPodPolicy?"),
    (lambda d: d["spec"].update(sucessPolicy="AllWorkers"), "spec.sucessPolicy",
     "did you mean successPolicy?"),
    (lambda d: d["spec"]["replicaSpecs"]["Worker"].update(restartPolicyy="Never"),
     "spec.replicaSpecs.Worker.restartPolicyy", "did you mean restartPolicy?"),
    (lambda d: d["spec"]["replicaSpecs"].update(WORKERS=d["spec"]["replicaSpecs"].pop("Worker")),
     "spec.replicaSpecs.WORKERS", "did you mean Worker?"),
    (lambda d: d["spec"]["replicaSpecs"].update(ps=copy.deepcopy(d["spec"]["replicaSpecs"]
                                                                 ["Worker"])),
     "spec.replicaSpecs.ps", "did you mean PS?"),
    (lambda d: _typo(d, "Worker"),
     "spec.replicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy",
     "unknown field; did you mean imagePullPolicy?"),
    (lambda d: d.update(specs=d["spec"]), "specs", "did you mean spec?"),
    (lambda d: d.update(apiVersion="kubeflow.org/v1"), "apiVersion",
     "this looks like a Kubeflow TFJob: run `trainjobs convert FILE` to rewrite it as a TfJob"),
    (lambda d: d.update(kind="TFJob"), "kind",
     "this looks like a Kubeflow TFJob: run `trainjobs convert FILE`"),
    (lambda d: d.update(kind="TfJobs"), "kind", "did you mean TfJob?"),
    (lambda d: d["spec"].update(replicaSpecs=[{"tfReplicaType": "MASTER"}]),
     "spec.replicaSpecs", "got a list (the list form of the old operators: this looks like a "
                          "Kubeflow TFJob"),
])
def test_hint_names_the_field_meant(change: Any, path: str, hint: str) -> None:
    doc = tfjob(Worker=2)
    change(doc)
    errors = errors_of(doc)
    assert path in errors, errors
    assert hint in errors[path]


@pytest.mark.parametrize(("where", "value", "says"), [
    (("replicaSpecs", "Worker", "replicas"), "3", "expected an integer, got a string"),
    (("replicaSpecs", "Worker", "replicas"), -1, "must be at least 0, got -1"),
    (("replicaSpecs", "Worker"), 3, "expected a replica spec (replicas, restartPolicy, "
                                    "template), got an integer"),
    (("replicaSpecs", "Worker", "restartPolicy"), "Sometimes",
     "'Sometimes' is not one of: 'Never', 'OnFailure', 'Always', 'ExitCode'"),
    (("replicaSpecs", "Worker", "template"), None, "required field is missing"),
    (("runPolicy",), [], "expected a mapping, got a list"),
    (("runPolicy", "suspend"), "yes", "expected true or false, got a string"),
    (("successPolicy",), "Chief", "'Chief' is not one of: '', 'AllWorkers'"),
])
def test_messages_are_ours_not_the_validation_librarys(where: tuple[str, ...], value: Any,
                                                       says: str) -> None:
    doc = tfjob(Worker=2)
    node = doc["spec"]
    for key in where[:-1]:
        node = node.setdefault(key, {})
    if value is None:
        del node[where[-1]]
    else:
        node[where[-1]] = value
    errors = errors_of(doc)
    path = "spec." + ".".join(where)
    assert errors.get(path, "").startswith(says), errors
    assert not [m for m in errors.values() if any(w in m for w in LIBRARY_WORDING)], errors


def test_one_replica_spec_where_a_mapping_belongs_is_one_problem() -> None:
    doc = tfjob(Worker=1)
    doc["spec"]["replicaSpecs"] = replica(2, template(container("tensorflow")))
    assert errors_of(doc) == {"spec.replicaSpecs": (
        "expected a mapping of replica type to replica spec, got one replica spec: put it "
        "under a type, e.g. replicaSpecs.Chief")}
