"""The generated CRDs: checked in up to date, and shaped as api.md promises.

What the API server itself accepts and refuses is tested against a real one in
tests/integration; here we check the documents: names, printer columns, subresources, the full
pod template schema, CEL rules, and that the schema is structural (no $ref, every node typed).
"""

from __future__ import annotations

import difflib
import functools
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainjobs.api.models import MAX_DURATION_SECONDS, MAX_REPLICAS
from trainjobs.crdgen import CATEGORY, crd_file_name, crd_for, write_crds
from trainjobs.plugin.types import Framework

from .helpers import PLUGINS, REPO

CRDS_DIR = REPO / "crds"
KINDS = {
    "MxJob": ("mxjobs", ["mxj"]),
    "TfJob": ("tfjobs", ["tfj"]),
    "Caffe2Job": ("caffe2jobs", ["c2j"]),
}
TOTAL_RULE = (f"!self.all(k, (type(self[k].replicas) == int && self[k].replicas >= 0 && "
              f"self[k].replicas <= {MAX_REPLICAS})) || "
              f"self.map(k, self[k].replicas).sum() <= {MAX_REPLICAS}")


def _no_elastic(name: str) -> str:
    return f"!('{name}' in self) || !has(self['{name}'].elasticPolicy)"


def _elastic(name: str) -> str:
    policy = f"self['{name}'].elasticPolicy"
    replicas = f"self['{name}'].replicas"
    countable = f"(type({replicas}) == int && {replicas} >= 0 && {replicas} <= {MAX_REPLICAS})"
    return (f"{_no_elastic(name)} || !{countable} || "
            f"({policy}.minReplicas <= {policy}.maxReplicas && "
            f"{policy}.minReplicas <= self['{name}'].replicas && "
            f"self['{name}'].replicas <= {policy}.maxReplicas)")


def _template(name: str) -> str:
    """A template is required, except where a plugin supplies the container (TfJob's PS)."""
    return f"!('{name}' in self) || has(self['{name}'].template)"


REPLICA_RULES = {
    "MxJob": {
        "self.all(k, k in ['Scheduler', 'Server', 'Worker'])",
        "'Scheduler' in self",
        "!('Scheduler' in self) || (self['Scheduler'].replicas >= 1 && "
        "self['Scheduler'].replicas <= 1)",
        "'Server' in self",
        "!('Server' in self) || (self['Server'].replicas >= 1)",
        "'Worker' in self",
        "!('Worker' in self) || (self['Worker'].replicas >= 1)",
        TOTAL_RULE,
        _no_elastic("Scheduler"), _no_elastic("Server"), _elastic("Worker"),
        _template("Scheduler"), _template("Server"), _template("Worker"),
    },
    "TfJob": {
        "self.all(k, k in ['Chief', 'Master', 'Worker', 'PS', 'Evaluator'])",
        "!('Chief' in self && 'Master' in self)",
        "!('Chief' in self) || (self['Chief'].replicas >= 0 && self['Chief'].replicas <= 1)",
        "!('Master' in self) || (self['Master'].replicas >= 0 && self['Master'].replicas <= 1)",
        "!('Worker' in self) || (self['Worker'].replicas >= 0)",
        "!('PS' in self) || (self['PS'].replicas >= 0)",
        "!('Evaluator' in self) || (self['Evaluator'].replicas >= 0 && "
        "self['Evaluator'].replicas <= 1)",
        TOTAL_RULE,
        _no_elastic("Chief"), _no_elastic("Master"), _elastic("Worker"), _no_elastic("PS"),
        _no_elastic("Evaluator"),
        _template("Chief"), _template("Master"), _template("Worker"), _template("Evaluator"),
    },
    "Caffe2Job": {
        "self.all(k, k in ['Worker'])",
        "'Worker' in self",
        "!('Worker' in self) || (self['Worker'].replicas >= 1)",
        TOTAL_RULE,
        _elastic("Worker"), _template("Worker"),
    },
}


def framework(kind: str) -> Framework:
    fw = PLUGINS.framework_for(kind)
    assert fw is not None
    return fw


@functools.cache
def _load(path: Path) -> str:
    return json.dumps(yaml.load(path.read_text(), Loader=yaml.CSafeLoader))


def checked_in(kind: str) -> dict[str, Any]:
    """The checked-in CRD of `kind` (parsed once; each call returns a fresh copy)."""
    doc: dict[str, Any] = json.loads(_load(CRDS_DIR / crd_file_name(framework(kind))))
    return doc


def open_api(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_checked_in_crds_are_up_to_date(tmp_path: Path) -> None:
    written = write_crds(PLUGINS, tmp_path)
    expected = sorted(p.name for p in written)
    present = sorted(p.name for p in CRDS_DIR.glob("*.yaml"))
    hint = "crds/ is out of date: run `trainjobs crds -o crds` and commit the result"
    assert present == expected, hint
    for path in written:
        new, old = path.read_text(), (CRDS_DIR / path.name).read_text()
        if new != old:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"crds/{path.name}",
                                        "generated", lineterm="", n=1)
            pytest.fail(f"{hint}\n" + "\n".join(itertools.islice(diff, 40)))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_names_and_scope(kind: str) -> None:
    crd = checked_in(kind)
    plural, short = KINDS[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{plural}.trainjobs.io"
    assert crd["metadata"]["annotations"]["trainjobs.io/plugin-package"] == "trainjobs"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == ("trainjobs.io", "Namespaced")
    assert spec["names"] == {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                             "singular": kind.lower(), "shortNames": short,
                             "categories": [CATEGORY]}
    assert CATEGORY == "trainjobs"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_version_status_and_printer_columns(kind: str) -> None:
    (version,) = checked_in(kind)["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["State", "Replicas", "Progress", "ETA", "Age"]
    assert columns["State"]["jsonPath"] == ".status.state"
    assert columns["Replicas"]["jsonPath"] == ".status.replicaSummary"
    assert (columns["Progress"]["type"], columns["Progress"]["jsonPath"]) == (
        "string", ".status.progress.summary")
    assert (columns["ETA"]["type"], columns["ETA"]["jsonPath"]) == (
        "integer", ".status.progress.etaSeconds")
    assert (columns["Age"]["type"], columns["Age"]["jsonPath"]) == (
        "date", ".metadata.creationTimestamp")
    # The columns point at fields the status schema has.
    status = open_api(checked_in(kind))["properties"]["status"]["properties"]
    assert {"state", "replicaSummary", "conditions", "replicaStatuses", "progress"} <= set(status)
    progress = status["progress"]["properties"]
    assert {"summary", "etaSeconds", "step", "totalSteps", "percent", "metrics", "replica",
            "lastReportTime", "lastProgressTime"} <= set(progress)
    assert progress["etaSeconds"]["type"] == "integer"
    assert progress["metrics"]["maxProperties"] == 16
    assert progress["metrics"]["additionalProperties"] == {"type": "number"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_replica_spec_rules(kind: str) -> None:
    spec = open_api(checked_in(kind))["properties"]["spec"]
    replica_specs = spec["properties"]["replicaSpecs"]
    assert spec["required"] == ["replicaSpecs"]
    assert replica_specs["type"] == "object"
    assert {r["rule"] for r in replica_specs["x-kubernetes-validations"]} == REPLICA_RULES[kind]
    for rule in replica_specs["x-kubernetes-validations"]:
        assert rule["message"], rule
    item = replica_specs["additionalProperties"]
    assert "required" not in item  # the rules above require templates but for TfJob's PS
    replicas = item["properties"]["replicas"]
    assert (replicas["type"], replicas["minimum"], replicas["maximum"], replicas["default"]) == (
        "integer", 0, MAX_REPLICAS, 1)
    assert item["properties"]["restartPolicy"]["enum"] == ["Never", "OnFailure", "Always",
                                                           "ExitCode"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_root_rules_on_names(kind: str) -> None:
    schema = open_api(checked_in(kind))
    rules = [r["rule"] for r in schema["x-kubernetes-validations"]]
    assert "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')" in rules
    assert any("<= 63" in r and "self.spec.replicaSpecs" in r for r in rules)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_durations_and_ports_are_bounded(kind: str) -> None:
    """Every duration fits in a datetime from any date a status may hold; every container
    port is one the API server accepts (issue 15.2, 15.7)."""
    spec = open_api(checked_in(kind))["properties"]["spec"]
    run_policy = spec["properties"]["runPolicy"]["properties"]
    for name in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert run_policy[name]["maximum"] == MAX_DURATION_SECONDS, name
    ports: list[dict[str, Any]] = []
    _find(spec, lambda n: "containerPort" in n.get("properties", {}) and not ports.append(n))
    assert len(ports) == 3, "containers, initContainers, ephemeralContainers"
    for node in ports:
        port, host = node["properties"]["containerPort"], node["properties"]["hostPort"]
        assert (port["minimum"], port["maximum"]) == (1, 65535)
        assert (host["minimum"], host["maximum"]) == (0, 65535)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_full_pod_template_schema(kind: str) -> None:
    replica = open_api(checked_in(kind))["properties"]["spec"]["properties"]["replicaSpecs"][
        "additionalProperties"]
    tmpl = replica["properties"]["template"]
    assert tmpl["type"] == "object"
    assert tmpl["required"] == ["spec"]
    pod = tmpl["properties"]["spec"]
    assert "containers" in pod["required"]
    container = pod["properties"]["containers"]["items"]
    assert {"imagePullPolicy", "env", "ports", "resources", "securityContext",
            "volumeMounts"} <= set(container["properties"])
    assert container["properties"]["securityContext"]["properties"]["runAsUser"]["type"] == (
        "integer")
    env_from = container["properties"]["env"]["items"]["properties"]["valueFrom"]
    assert env_from["properties"]["fieldRef"]["required"] == ["fieldPath"]
    assert {"tolerations", "nodeSelector", "volumes", "affinity", "securityContext"} <= set(
        pod["properties"])
    assert pod["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    # No preserve-unknown-fields in the pod template: typos must be refused, not pruned.
    assert not _find(tmpl, lambda n: n.get("x-kubernetes-preserve-unknown-fields"))
    # `kubectl explain mxjob.spec.replicaSpecs` describes the fields.
    assert replica["properties"]["replicas"]["description"]
    assert replica["properties"]["template"]["description"]
    assert pod["properties"]["containers"]["description"]


def _find(node: Any, predicate: Any, path: str = "") -> list[str]:
    """Paths of every schema node (below and including `node`) matching `predicate`."""
    found = []
    if isinstance(node, dict):
        if predicate(node):
            found.append(path or ".")
        for key, child in node.get("properties", {}).items():
            found += _find(child, predicate, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                found += _find(node[key], predicate, f"{path}[{key}]")
    return found


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_structural(kind: str) -> None:
    crd = checked_in(kind)
    text = json.dumps(crd)
    assert "$ref" not in text and "$defs" not in text
    schema = open_api(crd)

    def untyped(node: dict[str, Any]) -> bool:
        if node.get("x-kubernetes-int-or-string"):
            return node.get("anyOf") != [{"type": "integer"}, {"type": "string"}]
        return "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields")

    assert _find(schema, untyped) == []

    def bad_keyword(node: dict[str, Any]) -> bool:
        if node.get("x-kubernetes-int-or-string"):
            return False
        return bool({"anyOf", "oneOf", "allOf", "not", "title", "nullable"} & set(node)) or (
            node.get("type") == "object" and "properties" in node
            and isinstance(node.get("additionalProperties"), dict))

    assert _find(schema, bad_keyword) == []
    # Lists that the API server merges by key have the key required or defaulted.
    for path in _find(schema, lambda n: n.get("x-kubernetes-list-type") == "map"):
        node = _at(schema, path)
        item = node["items"]
        for key in node["x-kubernetes-list-map-keys"]:
            assert key in item.get("required", []) or "default" in item["properties"][key], (
                path, key)


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.replace("[", ".[").split(".")[1:]:
        node = node[part[1:-1]] if part.startswith("[") else node["properties"][part]
    return node


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_small_enough_for_client_side_apply(kind: str) -> None:
    # `kubectl apply` (client side) stores the object in an annotation of at most 256 KiB.
    size = len(json.dumps(checked_in(kind), separators=(",", ":")))
    assert size < 256 * 1024 - 4096, size


def test_framework_fields_in_the_schema() -> None:
    tf = open_api(crd_for(framework("TfJob")))["properties"]["spec"]["properties"]
    assert tf["successPolicy"]["enum"] == ["", "AllWorkers"]
    assert tf["tensorboard"]["required"] == ["logDir"]
    assert tf["tensorboard"]["properties"]["serviceType"]["enum"] == [
        "ClusterIP", "NodePort", "LoadBalancer"]
    c2 = open_api(crd_for(framework("Caffe2Job")))["properties"]["spec"]["properties"]
    backend = c2["backend"]["properties"]
    assert backend["type"]["enum"] == ["none", "redis", "nfs"]
    assert (backend["redisPort"]["minimum"], backend["redisPort"]["maximum"]) == (1, 65535)
    run_policy = tf["runPolicy"]["properties"]
    assert run_policy["cleanPodPolicy"]["enum"] == ["None", "Running", "All"]
    assert run_policy["backoffLimit"]["minimum"] == 0
    assert run_policy["schedulingPolicy"]["properties"]["minAvailable"]["minimum"] == 1


@pytest.mark.parametrize(("kind", "types"), [
    ("MxJob", ["Scheduler (exactly 1)", "Server (1 or more)", "Worker (1 or more)"]),
    ("TfJob", ["Chief (alias Master) (0 to 1)", "Worker (0 or more)", "PS (0 or more)",
               "Evaluator (0 to 1)"]),
    ("Caffe2Job", ["Worker (1 or more)"]),
])
def test_replica_specs_describe_the_kinds_own_types(kind: str, types: list[str]) -> None:
    """`kubectl explain tfjob.spec.replicaSpecs` once said "(e.g. Scheduler, Server, Worker)"
    for every kind."""
    described = open_api(checked_in(kind))["properties"]["spec"]["properties"][
        "replicaSpecs"]["description"]
    assert described.startswith(f"Replica specs of a {kind}, keyed by replica type.")
    for text in types:
        assert text in described, described
    assert "e.g." not in described
