"""Generates one CustomResourceDefinition per installed kind from the models and plugins.

Why generated: the CRD, the pydantic models and `trainjobs run` must agree on what is valid.
The schema comes from each kind's spec model (pydantic's JSON schema, made structural), with
the pinned Kubernetes PodTemplateSpec schema under every replica spec, and CEL rules for what a
schema cannot say (replica types and counts per kind, Chief xor Master, name lengths).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainjobs.api.models import GROUP, MANAGED_BY_MULTIKUEUE, MAX_REPLICAS
from trainjobs.api.podtemplate import crd_template_schema
from trainjobs.core.validation import MAX_NAME_LENGTH, elastic_refusal
from trainjobs.labels import ANNOTATION_PLUGIN_PACKAGE, LABEL_FRAMEWORK
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Framework, ReplicaType
from trainjobs.yamlio import dump_all

__all__ = ["CATEGORY", "crd_file_name", "crd_for", "structural", "write_crds"]

CATEGORY = "trainjobs"
MAX_REPLICA_TYPES = 8
# Descriptions deeper than this inside a pod template are dropped to keep each CRD small
# enough for client-side `kubectl apply` (its last-applied annotation holds 256 KiB).
TEMPLATE_DESCRIPTION_DEPTH = 5


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's JSON schema made structural: $refs inlined, Optional unwrapped, no titles."""
    defs = schema.get("$defs", {})

    def walk(node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            target = walk(defs[node["$ref"].rsplit("/", 1)[1]])
            if "description" in node:
                target["description"] = node["description"]
            return target
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            if len(options) == 1:
                merged = walk(options[0])
                for key in ("description",):
                    if key in node:
                        merged[key] = node[key]
                return merged
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "$defs", "default", "additionalProperties") and \
                    not (key == "additionalProperties" and isinstance(value, dict)):
                continue
            if key == "properties":
                out[key] = {k: walk(v) for k, v in value.items()}
            elif key in ("items", "additionalProperties"):
                out[key] = walk(value)
            elif key == "const":
                out["enum"] = [value]
            elif key == "format" and value == "date-time":
                out[key] = value
            elif key == "format" or key in ("exclusiveMinimum", "exclusiveMaximum"):
                continue
            else:
                out[key] = value
        if out.get("type") == "object" and "properties" not in out and \
                "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out

    return walk(schema)


def _trim_descriptions(node: dict[str, Any], depth: int) -> None:
    if depth <= 0:
        node.pop("description", None)
    for child in node.get("properties", {}).values():
        _trim_descriptions(child, depth - 1)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _trim_descriptions(node[key], depth - 1)


def _template_schema() -> dict[str, Any]:
    schema = crd_template_schema()
    _trim_descriptions(schema, TEMPLATE_DESCRIPTION_DEPTH)
    return schema


def _replica_rules(framework: Framework) -> list[dict[str, str]]:
    if framework.replica_keys_any_case:
        return _any_case_replica_rules(framework)
    allowed = [n for t in framework.replica_types for n in t.names]
    quoted = ", ".join(f"'{n}'" for n in allowed)
    rules = [{
        "rule": f"self.all(k, k in [{quoted}])",
        "message": f"replicaSpecs keys of a {framework.kind} must be among: {', '.join(allowed)}",
    }]
    for rtype in framework.replica_types:
        present = " || ".join(f"'{n}' in self" for n in rtype.names)
        if len(rtype.names) > 1:
            both = " && ".join(f"'{n}' in self" for n in rtype.names)
            rules.append({"rule": f"!({both})", "message": f"only one of "
                          f"{' and '.join(rtype.names)} may be set: they name the same replica"})
        if rtype.min_replicas > 0:
            rules.append({"rule": present, "message": f"a {framework.kind} needs a "
                          f"{rtype.name} replica spec (replicaSpecs.{rtype.name})"})
        if not rtype.container_optional:
            for name in rtype.names:
                rules.append({"rule": f"!('{name}' in self) || has(self['{name}'].template)",
                              "message": f"replicaSpecs.{name}.template is required"})
        for name in rtype.names:
            bounds = [f"self['{name}'].replicas >= {rtype.min_replicas}"]
            text = f"at least {rtype.min_replicas}"
            if rtype.max_replicas is not None:
                bounds.append(f"self['{name}'].replicas <= {rtype.max_replicas}")
                text = (f"exactly {rtype.min_replicas}" if rtype.min_replicas ==
                        rtype.max_replicas else f"{rtype.min_replicas} to {rtype.max_replicas}")
            rules.append({
                "rule": f"!('{name}' in self) || ({' && '.join(bounds)})",
                "message": f"replicaSpecs.{name}.replicas must be {text}",
            })
            rules.append(_elastic_rule(framework, rtype, name))
    rules.append(_total_replicas_rule())
    return rules


def _any_case_replica_rules(framework: Framework) -> list[dict[str, str]]:
    """The same rules for a kind whose replicaSpecs keys may be written in any case
    (Kubeflow's: its defaulting turns `worker` into `Worker`): each rule quantifies over the
    keys, a key naming a type when it equals one of the type's names ignoring case."""
    allowed = [n for t in framework.replica_types for n in t.names]
    lowered = ", ".join(f"'{n.lower()}'" for n in allowed)
    rules = [{
        "rule": f"self.all(k, k.lowerAscii() in [{lowered}])",
        "message": f"replicaSpecs keys of a {framework.kind} must be among: {', '.join(allowed)} "
                   "(in any case)",
    }]
    for rtype in framework.replica_types:
        names = ", ".join(f"'{n.lower()}'" for n in rtype.names)
        key = f"k.lowerAscii() in [{names}]"
        rules.append({"rule": f"self.filter(k, {key}).size() <= 1",
                      "message": f"{' and '.join(rtype.names)} in any case name the same "
                                 "replica: set only one key"})
        if rtype.min_replicas > 0:
            rules.append({"rule": f"self.exists(k, {key})", "message": f"a {framework.kind} "
                          f"needs a {rtype.name} replica spec (replicaSpecs.{rtype.name})"})
        if not rtype.container_optional:
            rules.append({"rule": f"self.all(k, !({key}) || has(self[k].template))",
                          "message": f"replicaSpecs.{rtype.name}.template is required"})
        bounds = [f"self[k].replicas >= {rtype.min_replicas}"]
        text = f"at least {rtype.min_replicas}"
        if rtype.max_replicas is not None:
            bounds.append(f"self[k].replicas <= {rtype.max_replicas}")
            text = (f"exactly {rtype.min_replicas}" if rtype.min_replicas ==
                    rtype.max_replicas else f"{rtype.min_replicas} to {rtype.max_replicas}")
        rules.append({"rule": f"self.all(k, !({key}) || ({' && '.join(bounds)}))",
                      "message": f"replicaSpecs.{rtype.name}.replicas must be {text}"})
        elastic = _elastic_rule(framework, rtype, rtype.name, "true", "self[k]")
        rules.append({"rule": f"self.all(k, !({key}) || ({elastic['rule']}))",
                      "message": elastic["message"]})
    rules.append(_total_replicas_rule())
    return rules


def _total_replicas_rule() -> dict[str, str]:
    return {
        # Guarded like every rule that does arithmetic on replicas: a value the schema refuses
        # (a float, one over the maximum) must be reported by the schema, not by a rule that
        # then fails to evaluate or misreads it.
        "rule": f"!self.all(k, {_countable('self[k].replicas')}) || "
                f"self.map(k, self[k].replicas).sum() <= {MAX_REPLICAS}",
        "message": f"the replicas of all types together must be at most {MAX_REPLICAS} per job",
        "reason": "FieldValueInvalid",
    }


def _template_restart_policy_rule(framework: Framework) -> dict[str, str]:
    """The CEL twin of validation's check: a template's restartPolicy must be what trainjobs
    sets for the pods, never silently replaced (`self` is one replica spec)."""
    rendered = "'Never'" if framework.replicas_restart_together else (
        "(has(self.restartPolicy) && self.restartPolicy in ['OnFailure', 'Always'] ? "
        "self.restartPolicy : 'Never')")
    return {
        "rule": "!has(self.template) || !has(self.template.spec) || "
                "!has(self.template.spec.restartPolicy) || "
                f"self.template.spec.restartPolicy == {rendered}",
        "fieldPath": ".template.spec.restartPolicy",
        "message": "would be replaced by the pods' restartPolicy that trainjobs sets from this "
                   "replica spec's restartPolicy: remove it from the template and set "
                   "restartPolicy (Never, OnFailure, Always, ExitCode) beside template instead"
                   + (f" ({framework.kind}'s pods always run with Never: its replicas "
                      "restart together)" if framework.replicas_restart_together else ""),
    }


def _countable(expr: str) -> str:
    """CEL: `expr` is a replica count the schema accepts (an int within 0..MAX_REPLICAS)."""
    return f"(type({expr}) == int && {expr} >= 0 && {expr} <= {MAX_REPLICAS})"


def _elastic_rule(framework: Framework, rtype: ReplicaType, name: str,
                  present: str = "", item: str = "") -> dict[str, str]:
    """elasticPolicy only on the types the kind allows; replicas within its bounds. `present`
    and `item`: CEL for "the replica spec is there" and for it (default: key `name`)."""
    present = present or f"'{name}' in self"
    item = item or f"self['{name}']"
    unset = f"!({present}) || !has({item}.elasticPolicy)"
    if not rtype.elastic:
        return {"rule": unset,
                "message": f"replicaSpecs.{name}.elasticPolicy: {elastic_refusal(framework)}"}
    policy = f"{item}.elasticPolicy"
    # Guarded like every rule on replicas: a value the schema refuses is the schema's to report.
    return {"rule": f"{unset} || !{_countable(f'{item}.replicas')} || "
                    f"({policy}.minReplicas <= {policy}.maxReplicas && "
                    f"{policy}.minReplicas <= {item}.replicas && "
                    f"{item}.replicas <= {policy}.maxReplicas)",
            "message": f"replicaSpecs.{name}: elasticPolicy needs minReplicas <= replicas <= "
                       "maxReplicas"}


def _root_rules() -> list[dict[str, str]]:
    count = "self.spec.replicaSpecs[k].replicas"
    name_rule = (
        f"self.spec.replicaSpecs.all(k, !{_countable(count)} || {count} == 0 || "
        "size(self.metadata.name) + size(k) + "
        f"size(string({count} - 1)) + 2 <= {MAX_NAME_LENGTH})"
    )
    return [
        {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
         "message": "metadata.name must be a DNS-1035 label (lowercase letters, digits, '-'; "
                    "starting with a letter)"},
        {"rule": name_rule,
         "message": f"metadata.name is too long: pod names <job>-<type>-<index> must fit in "
                    f"{MAX_NAME_LENGTH} characters"},
    ]


def _count(rtype: ReplicaType) -> str:
    if rtype.max_replicas is None:
        return f"{rtype.min_replicas} or more"
    if rtype.min_replicas == rtype.max_replicas:
        return f"exactly {rtype.min_replicas}"
    return f"{rtype.min_replicas} to {rtype.max_replicas}"


def replica_specs_description(framework: Framework) -> str:
    """What `kubectl explain <kind>.spec.replicaSpecs` says: this kind's own replica types."""
    types = "; ".join(
        f"{t.name}" + (f" (alias {', '.join(t.aliases)})" if t.aliases else "")
        + f" ({_count(t)})" + (f": {t.description.rstrip('.')}" if t.description else "")
        for t in framework.replica_types)
    return (f"Replica specs of a {framework.kind}, keyed by replica type. {types}. Each: "
            "replicas, restartPolicy, template (a core/v1 PodTemplateSpec), elasticPolicy.")


def spec_schema(framework: Framework) -> dict[str, Any]:
    schema = structural(framework.spec_model.model_json_schema(by_alias=True))
    field_name = framework.replica_specs_field
    replica_specs = schema["properties"][field_name]
    replica = replica_specs["additionalProperties"]
    replica["properties"]["template"] = _template_schema()
    replica["properties"]["replicas"]["default"] = 1
    replica["properties"]["replicas"]["minimum"] = 0
    replica["x-kubernetes-validations"] = _in_field(
        [_template_restart_policy_rule(framework)], field_name)
    replica_specs["maxProperties"] = MAX_REPLICA_TYPES
    replica_specs["description"] = replica_specs_description(framework)
    replica_specs["x-kubernetes-validations"] = _in_field(_replica_rules(framework), field_name)
    if framework.group != GROUP:
        # Another project's clients read runPolicy as always there (Kubeflow's defaulting
        # webhook wrote it; its SDK refuses an MXJob without one): the API server fills it.
        schema["properties"]["runPolicy"]["default"] = {}
    schema["x-kubernetes-validations"] = managed_by_rules(schema) + \
        failure_policy_rules(schema, framework)
    schema["description"] = framework.description
    return schema


def failure_policy_rules(spec: dict[str, Any], framework: Framework) -> list[dict[str, str]]:
    """CEL for `runPolicy.failurePolicy` (when the kind's run policy has one): what
    core/failure_rules.policy_errors checks and CEL can say (a cycle in escalation is
    refused by `trainjobs run`/`render` and by the operator, InvalidSpec). Put on the
    policy's own schema, and on the spec for the replica types it names."""
    run_policy = spec["properties"].get("runPolicy", {})
    policy = run_policy.get("properties", {}).get("failurePolicy")
    if policy is None:
        return []
    rule_schema = policy["items"]
    rule_schema["properties"]["match"]["x-kubernetes-validations"] = [{
        "rule": "has(self.exitCodes) || has(self.reasons)",
        "message": "an empty match matches nothing: give exitCodes or reasons (every "
                   "failure: exitCodes {operator: NotIn, values: [0]})"}, {
        "rule": "!has(self.exitCodes) || self.exitCodes.operator != 'In' || "
                "!self.exitCodes.values.exists(v, v == 0)",
        "message": "exitCodes: 0 is a success, never a failure"}]
    item_rules = [{"rule": "!has(self.whenSpent) || has(self.budget)",
                   "message": "whenSpent: only a rule with a budget is ever spent"},
                  {"rule": "self.action != 'RestartInPlace' || !has(self.match.reasons) || "
                           "self.match.reasons.all(x, x in ['Error', 'OOMKilled'])",
                   "message": "RestartInPlace: only Error and OOMKilled are restarted in "
                              "place"}]
    if framework.replicas_restart_together:
        item_rules.append({
            "rule": "self.action in ['RestartJob', 'FailJob', 'Ignore']",
            "message": f"{framework.kind}'s replicas restart together: the action must be "
                       "RestartJob, FailJob or Ignore"})
    rule_schema["x-kubernetes-validations"] = item_rules
    policy["x-kubernetes-validations"] = [
        {"rule": "self.all(r, self.filter(q, q.name == r.name).size() == 1)",
         "message": "failurePolicy rule names must be unique"},
        {"rule": "self.all(r, !has(r.whenSpent) || self.exists(q, q.name == r.whenSpent))",
         "message": "whenSpent must name a rule of the failurePolicy"}]
    field = framework.replica_specs_field
    in_place = "(has(s.restartPolicy) && s.restartPolicy in ['OnFailure', 'Always'])"
    return [{
        "rule": f"!has(self.runPolicy) || !has(self.runPolicy.failurePolicy) || "
                f"self.runPolicy.failurePolicy.all(r, r.action != 'RestartInPlace' || "
                f"(has(r.match.replicaTypes) ? r.match.replicaTypes.all(t, !(t in "
                f"self.{field}) || [self.{field}[t]].all(s, {in_place})) : "
                f"self.{field}.all(k, [self.{field}[k]].all(s, {in_place}))))",
        "message": "failurePolicy: RestartInPlace needs restartPolicy OnFailure or Always on "
                   "every replica type it matches (only the kubelet restarts a process in "
                   "place)"}, {
        "rule": f"!has(self.runPolicy) || !has(self.runPolicy.failurePolicy) || "
                f"self.runPolicy.failurePolicy.all(r, !has(r.match.replicaTypes) || "
                f"r.match.replicaTypes.all(t, t in self.{field}))",
        "message": f"failurePolicy: match.replicaTypes must name replica types of "
                   f"{field}"}]


def managed_by_rules(spec: dict[str, Any]) -> list[dict[str, str]]:
    """CEL transition rules on the spec: `managedBy` (and a Kubeflow kind's
    `runPolicy.managedBy`, when its schema has one) can be neither set, changed nor removed
    after creation, as batch/v1's and training-operator's: two controllers must never both
    think a job theirs. Both set, they must name the same kind of manager."""
    paths = ["managedBy"]
    run_policy = spec["properties"].get("runPolicy", {})
    if "managedBy" in run_policy.get("properties", {}):
        paths.append("runPolicy.managedBy")
    rules = []
    for path in paths:
        parent, _, leaf = path.rpartition(".")

        def present(obj: str, parent: str = parent, leaf: str = leaf) -> str:
            if not parent:
                return f"has({obj}.{leaf})"
            return f"(has({obj}.{parent}) && has({obj}.{parent}.{leaf}))"

        rules.append({
            "rule": f"{present('self')} == {present('oldSelf')} && "
                    f"(!{present('self')} || self.{path} == oldSelf.{path})",
            "message": f"spec.{path} is immutable: it cannot be set, changed or removed after "
                       "the job is created (delete and recreate the job to hand it to another "
                       "controller)",
            "reason": "FieldValueForbidden",
        })
    if len(paths) == 2:
        multi = f"'{MANAGED_BY_MULTIKUEUE}'"
        rules.append({
            "rule": "!has(self.managedBy) || !has(self.runPolicy) || "
                    "!has(self.runPolicy.managedBy) || "
                    f"(self.managedBy == {multi}) == (self.runPolicy.managedBy == {multi})",
            "message": "spec.managedBy and spec.runPolicy.managedBy name different managers: "
                       "set one of them",
        })
    return rules


def _in_field(rules: list[dict[str, str]], field_name: str) -> list[dict[str, str]]:
    """The core's rules in the terms of a kind whose replica specs field has another name
    (Kubeflow's `tfReplicaSpecs`): the same rules over that field, the messages naming it."""
    if field_name == "replicaSpecs":
        return rules
    return [{k: v.replace("replicaSpecs", field_name) for k, v in rule.items()}
            for rule in rules]


def crd_for(framework: Framework) -> dict[str, Any]:
    status = structural(framework.status_model.model_json_schema(by_alias=True))
    status.pop("required", None)
    kind_lower = framework.kind.lower()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{framework.plural}.{framework.group}",
            "labels": {"app.kubernetes.io/part-of": "trainjobs",
                       LABEL_FRAMEWORK: framework.name},
            "annotations": {ANNOTATION_PLUGIN_PACKAGE: framework.package},
        },
        "spec": {
            "group": framework.group,
            "scope": "Namespaced",
            "names": {
                "kind": framework.kind,
                "listKind": f"{framework.kind}List",
                "plural": framework.plural,
                "singular": kind_lower,
                "shortNames": list(framework.short_names),
                "categories": [CATEGORY],
            },
            "versions": [{
                "name": framework.version,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "State", "type": "string", "jsonPath": ".status.state"},
                    {"name": "Replicas", "type": "string", "jsonPath": ".status.replicaSummary"},
                    # The training program's own progress (docs/progress.md): step/total
                    # (percent), and the seconds left at the recent rate.
                    {"name": "Progress", "type": "string",
                     "jsonPath": ".status.progress.summary"},
                    {"name": "ETA", "type": "integer", "jsonPath": ".status.progress.etaSeconds",
                     "description": "Seconds left at the recent rate of steps."},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": framework.description,
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(framework),
                        "status": status,
                    },
                    "x-kubernetes-validations": _in_field(
                        _root_rules(), framework.replica_specs_field) + [
                        {"rule": r.rule, "message": r.message} for r in (
                            *framework.cel_rules,
                            *(r for c in framework.capabilities for r in c.cel_rules))],
                }},
            }],
        },
    }


def crd_file_name(framework: Framework) -> str:
    return f"{framework.group}_{framework.plural}.yaml"


def render_crd_yaml(framework: Framework) -> str:
    return dump_all([crd_for(framework)])


def write_crds(plugins: PluginManager, out_dir: Path) -> list[Path]:
    """Writes one file per kind; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for framework in plugins.frameworks.values():
        path = out_dir / crd_file_name(framework)
        path.write_text(render_crd_yaml(framework))
        written.append(path)
    return written
