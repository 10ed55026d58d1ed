"""A template's restartPolicy is never silently replaced (issue: a TfJob written as the
tf-operator README's, `template.spec.restartPolicy: OnFailure`, failed at its first exit
with "restartPolicy Never"). It is accepted when it is what trainjobs sets for the pods,
refused otherwise, naming the field and the replacement — by parse_job (so `trainjobs
run`/`render` and the operator's InvalidSpec) and by the CRD's CEL rule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.helpers import Doc, caffe2job, errors_of, framework_of, render, tfjob
from trainjobs.cli import main
from trainjobs.crdgen import crd_for

PATH = "spec.replicaSpecs.Worker.template.spec.restartPolicy"


def _tf(template_policy: str, replica_policy: str | None = None) -> Doc:
    doc = tfjob("tf", Chief=1, Worker=2)
    worker = doc["spec"]["replicaSpecs"]["Worker"]
    worker["template"]["spec"]["restartPolicy"] = template_policy
    if replica_policy is not None:
        worker["restartPolicy"] = replica_policy
    return doc


def test_the_seeds_onfailure_template_is_refused_with_the_replacement() -> None:
    errors = errors_of(_tf("OnFailure"))
    assert errors == {PATH: "OnFailure would be replaced by Never: trainjobs sets the pods' "
                            "restartPolicy from spec.replicaSpecs.Worker.restartPolicy; set "
                            "replicaSpecs.Worker.restartPolicy: OnFailure instead, and remove "
                            "it from the template"}


def test_a_template_policy_that_disagrees_with_the_replica_policy_is_refused() -> None:
    errors = errors_of(_tf("Never", "OnFailure"))
    assert errors[PATH].startswith("Never would be replaced by OnFailure (from "
                                   "spec.replicaSpecs.Worker.restartPolicy: OnFailure)")


@pytest.mark.parametrize(("template_policy", "replica_policy"), [
    ("Never", None), ("Never", "ExitCode"), ("OnFailure", "OnFailure"), ("Always", "Always")])
def test_a_template_policy_equal_to_the_pods_is_accepted(template_policy: str,
                                                          replica_policy: str | None) -> None:
    pod = render(_tf(template_policy, replica_policy)).pods["tf-worker-0"]
    assert pod["spec"]["restartPolicy"] == template_policy


def test_caffe2_pods_always_run_never_and_say_why() -> None:
    doc = caffe2job("c2", workers=2, type="nfs", nfsPath="/x")
    worker = doc["spec"]["replicaSpecs"]["Worker"]
    worker["restartPolicy"] = "OnFailure"
    worker["template"]["spec"]["restartPolicy"] = "OnFailure"
    message = errors_of(doc)[PATH]
    assert "Caffe2Job's replicas restart together" in message
    assert message.endswith("spec.replicaSpecs.Worker.restartPolicy decides")


def test_the_cli_refuses_it_with_exit_2(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tf.yaml"
    path.write_text(yaml.safe_dump(_tf("OnFailure")))
    assert main(["render", str(path)]) == 2
    assert f"{PATH}: OnFailure would be replaced by Never" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["MxJob", "TfJob", "Caffe2Job"])
def test_the_crd_carries_the_rule_on_every_replica_spec(kind: str) -> None:
    spec = crd_for(framework_of(kind))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    replica = spec["properties"]["spec"]["properties"]["replicaSpecs"]["additionalProperties"]
    (rule,) = replica["x-kubernetes-validations"]
    assert rule["fieldPath"] == ".template.spec.restartPolicy"
    assert "self.template.spec.restartPolicy ==" in rule["rule"]
