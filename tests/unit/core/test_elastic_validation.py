"""elasticPolicy is checked where the API server's CEL rules cannot reach (`trainjobs run`,
objects stored before the rules existed): bounds, and only the types the kind allows."""

from __future__ import annotations

import pytest

from tests.unit.planner_helpers import mx_doc, parse, tf_doc
from trainjobs.errors import SpecInvalid


@pytest.mark.parametrize(("elastic", "workers", "path", "message"), [
    ({"minReplicas": 2, "maxReplicas": 4}, 9, "spec.replicaSpecs.Worker.replicas",
     "must be within elasticPolicy bounds 2..4, got 9"),
    ({"minReplicas": 3, "maxReplicas": 4}, 2, "spec.replicaSpecs.Worker.replicas",
     "must be within elasticPolicy bounds 3..4, got 2"),
    ({"minReplicas": 5, "maxReplicas": 4}, 4, "spec.replicaSpecs.Worker.elasticPolicy.minReplicas",
     "must be at most maxReplicas (4), got 5"),
])
def test_elastic_bounds(elastic: dict[str, int], workers: int, path: str, message: str) -> None:
    with pytest.raises(SpecInvalid) as info:
        parse(mx_doc(workers=workers, elastic=elastic))
    assert [(e.path, e.message) for e in info.value.errors] == [(path, message)]


def test_elastic_policy_only_on_workers() -> None:
    doc = mx_doc(workers=2)
    doc["spec"]["replicaSpecs"]["Server"]["elasticPolicy"] = {"minReplicas": 1,
                                                              "maxReplicas": 2}
    with pytest.raises(SpecInvalid) as info:
        parse(doc)
    assert [(e.path, e.message) for e in info.value.errors] == [
        ("spec.replicaSpecs.Server.elasticPolicy",
         "a MxJob allows elasticPolicy only on Worker")]
    tf = tf_doc(workers=2)
    tf["spec"]["replicaSpecs"]["PS"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 1}
    with pytest.raises(SpecInvalid, match="a TfJob allows elasticPolicy only on Worker"):
        parse(tf)


def test_valid_elastic_policy_parses() -> None:
    job = parse(mx_doc(workers=3, elastic={"minReplicas": 2, "maxReplicas": 3}))
    policy = job.spec.replica_specs["Worker"].elastic_policy
    assert policy is not None and (policy.min_replicas, policy.max_replicas) == (2, 3)
