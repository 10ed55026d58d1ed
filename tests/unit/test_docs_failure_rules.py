"""The trainjobs examples of docs/migrating.md's "Failure rules from JobSet, Volcano and
Kubernetes Jobs" are jobs the operator accepts: each `failurePolicy` goes through the same
parsing and checks as `trainjobs render` (a rule renamed, an action or reason misspelt, a
replica type a TfJob lacks would fail here); the other projects' examples are YAML."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from tests.unit.helpers import container, parse, replica, template
from trainjobs.api.models import API_VERSION

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"
SECTION = "## Failure rules from JobSet, Volcano and Kubernetes Jobs"
#: The replica types the examples' TfJobs have where they leave replicaSpecs out.
TF_TYPES = ("Chief", "PS", "Worker")


def examples() -> list[dict[str, Any]]:
    text = DOC.read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    return [yaml.safe_load(block) for block in blocks]


def as_job(example: dict[str, Any]) -> dict[str, Any]:
    """The example as a whole TfJob: its replicaSpecs (or TF_TYPES) with a template each."""
    spec = copy.deepcopy(example["spec"])
    given = spec.pop("replicaSpecs", None) or {t: {} for t in TF_TYPES}
    spec["replicaSpecs"] = {t: {**replica(1, template(container("tensorflow"))), **fields,
                                "template": template(container("tensorflow"))}
                            for t, fields in given.items()}
    return {"apiVersion": API_VERSION, "kind": example["kind"],
            "metadata": {"name": "example"}, "spec": spec}


def test_every_trainjobs_example_is_accepted() -> None:
    ours = [e for e in examples() if e.get("kind") == "TfJob"]
    assert len(ours) == 4  # batch/v1, JobSet, Volcano, ExitCode
    for example in ours:
        job = parse(as_job(example))
        rules = job.spec.run_policy.failure_policy
        assert rules, example
        assert [r.name for r in rules] == \
            [r["name"] for r in example["spec"]["runPolicy"]["failurePolicy"]]


def test_the_other_projects_examples_are_yaml() -> None:
    theirs = [e for e in examples() if e.get("kind") != "TfJob"]
    assert len(theirs) == 3  # batch/v1, JobSet, Volcano
    assert all(isinstance(e, dict) and "spec" in e for e in theirs)
