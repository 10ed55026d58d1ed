"""What `trainjobs convert` writes from the upstream examples (tests/fixtures/kubeflow) is
accepted by the real API server with the generated CRDs: created, then read back unchanged in
its replica specs (nothing pruned)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.operator_helpers import Namespace
from tests.unit.convert.test_convert import EXPECTED, FIXTURES
from trainjobs.convert import convert_documents, is_old_job
from trainjobs.yamlio import read_documents

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_converted_fixture_is_created_by_the_api_server(bare_ns: Namespace, name: str) -> None:
    source = read_documents(FIXTURES / name)
    converted = convert_documents(source).documents
    jobs = [d for d in converted if d.get("apiVersion", "").startswith("trainjobs.io/")]
    assert len(jobs) == sum(1 for d in read_documents(FIXTURES / name) if is_old_job(d)) == 1
    job = jobs[0]
    job["metadata"].pop("namespace", None)  # two upstream examples name `kubeflow`
    result = bare_ns.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(job),
                             check=False)
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)
    assert stored["kind"] == EXPECTED[name].kind
    assert _without_defaults(stored["spec"]["replicaSpecs"]) == job["spec"]["replicaSpecs"]


def _without_defaults(node: Any) -> Any:
    """What the API server adds to what was written: a port's `protocol: TCP`."""
    if isinstance(node, list):
        return [_without_defaults(n) for n in node]
    if isinstance(node, dict):
        out = {k: _without_defaults(v) for k, v in node.items()}
        if "containerPort" in out and out.get("protocol") == "TCP":
            del out["protocol"]
        return out
    return node
