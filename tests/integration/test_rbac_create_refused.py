"""A pod create refused by RBAC — a 403 that is not a quota — fails the job with CreateFailed,
end to end: the real API server's authorizer refuses, not a canned body.

The operator runs with a real token (TokenRequest) of the chart's ServiceAccount, granted the
chart's own RBAC for one watched namespace (`helm template` of charts/trainjobs with
`watchNamespaces: [ns]`) minus `create` on pods: everything else it needs (Services, status,
Events) it may do, so the only refusal is the one under test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_helpers import Namespace, Operators, condition, job, replica
from tests.integration.test_helm_chart import (
    GET_HELM,
    Helm,
    can_i,
    service_account_kubeconfig,
)
from trainjobs.testing import ControlPlane

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """Helm (scripts/get-helm.sh, built once into the cache) for `helm template`; fails, never
    skips."""
    result = subprocess.run(["bash", str(GET_HELM)], capture_output=True, text=True,
                            timeout=1800, check=False)
    if result.returncode != 0:
        pytest.fail(f"{GET_HELM} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return Helm(Path(result.stdout.strip().splitlines()[-1]), tmp_path_factory.mktemp("helm"))


def without_pod_create(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules with `create` on core pods taken out (and nothing else)."""
    out = []
    for rule in rules:
        if "" not in rule.get("apiGroups", []) or "pods" not in rule.get("resources", []) \
                or "create" not in rule.get("verbs", []):
            out.append(rule)
            continue
        others = [r for r in rule["resources"] if r != "pods"]
        if others:
            out.append({**rule, "resources": others})
        verbs = [v for v in rule["verbs"] if v != "create"]
        if verbs:
            out.append({**rule, "resources": ["pods"], "verbs": verbs})
    return out


def test_pod_create_refused_by_rbac_fails_the_job_with_create_failed(
        chart: Helm, kube_cluster: ControlPlane, bare_ns: Namespace,
        operators: Operators, tmp_path: Path) -> None:
    ns = bare_ns.name
    docs = chart.template("rbac", ns, {"watchNamespaces": [ns]})
    [sa] = [d for d in docs if d["kind"] == "ServiceAccount"]
    [role] = [d for d in docs if d["kind"] == "Role" and d["metadata"]["namespace"] == ns]
    [binding] = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["subjects"][0]["name"] == sa["metadata"]["name"]
    role["rules"] = without_pod_create(role["rules"])
    for doc in (sa, role, binding):
        kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    name = sa["metadata"]["name"]
    identity = f"system:serviceaccount:{ns}:{name}"
    assert not can_i(kube_cluster, identity, "create", "pods", ns)
    for verb, resource in (("create", "services"), ("list", "pods"), ("delete", "pods"),
                           ("patch", "mxjobs.trainjobs.io/status"), ("create", "events")):
        assert can_i(kube_cluster, identity, verb, resource, ns), (verb, resource)
    kubeconfig = service_account_kubeconfig(kube_cluster, ns, name, tmp_path / "sa.kubeconfig")

    operators.start("--kubeconfig", str(kubeconfig))  # the last --kubeconfig wins
    bare_ns.create(job("MxJob", "denied", {
        "Scheduler": replica("MxJob", 1), "Server": replica("MxJob", 1),
        "Worker": replica("MxJob", 2, exit_code=0)}))
    status = bare_ns.wait_finished("MxJob", "denied", timeout=60)
    failed = condition(status, "Failed")
    assert failed is not None and failed["status"] == "True", status
    assert failed["reason"] == "CreateFailed", failed
    assert 'cannot create resource "pods"' in failed["message"], failed
    assert identity in failed["message"], failed
    assert bare_ns.pods("denied") == []
    # A refusal it cannot get past fails the job once and for all: no retry loop, no crash.
    bare_ns.wait_event("denied", "CreateFailed")
    assert operators.started[0].ready()
