"""Validation of the core/v1 PodTemplateSpec that each replica spec carries.

Why not a pydantic model of the whole pod: the pod API is large and changes with every
Kubernetes release, and a template must survive load then dump *exactly* (users compare what
they wrote with what runs). We keep the template as plain JSON data and check it against the
structural schema of the pinned Kubernetes release (`schemas/pod-template-spec.json`, made by
scripts/update-pod-schema.py). The same schema goes into the CRDs, so `trainjobs run` and the
API server refuse the same typos.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from trainjobs.errors import SpecError
from trainjobs.suggest import did_you_mean

__all__ = ["KUBERNETES_VERSION", "PORT_RANGES", "crd_template_schema", "validate_pod_template"]


@cache
def _schema_document() -> dict[str, Any]:
    text = resources.files("trainjobs.api").joinpath("schemas/pod-template-spec.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    # Upstream's PodTemplateSpec requires nothing, but a template without a pod spec runs
    # nothing (and the core reads template.spec.containers): refuse it, here and in the CRDs.
    doc["schema"].setdefault("required", ["spec"])
    _bound_ports(doc["schema"])
    return doc


#: What the API server's pod validation requires of a container's ports (hostPort 0: none).
#: Upstream's OpenAPI schema says only int32, so a template with `containerPort: -1` passed
#: the CRD and rendering, then every pod and Service of the job was refused with a 422.
PORT_RANGES = {"containerPort": (1, 65535), "hostPort": (0, 65535)}


def _bound_ports(node: dict[str, Any]) -> None:
    """Adds PORT_RANGES to every ContainerPort in the schema (containers, init, ephemeral)."""
    for name, prop in node.get("properties", {}).items():
        if name in PORT_RANGES and prop.get("type") == "integer":
            prop["minimum"], prop["maximum"] = PORT_RANGES[name]
        _bound_ports(prop)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _bound_ports(node[key])


KUBERNETES_VERSION: str = _schema_document()["kubernetesVersion"]


def crd_template_schema() -> dict[str, Any]:
    """The structural schema for a CRD (a fresh copy, safe to edit)."""
    return copy.deepcopy(_schema_document()["schema"])


def _to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """Turns the CRD (OpenAPI v3 structural) schema into strict JSON Schema.

    Objects with declared properties refuse unknown ones, as the API server's strict field
    validation does; int-or-string fields take either.
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "default") or key.startswith("x-kubernetes"):
            continue
        if key == "properties":
            out[key] = {k: _to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _to_json_schema(value)
        elif key == "format":
            continue
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        return {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if out.get("type") == "number":
        out["type"] = ["number", "integer"]
    return out


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(_to_json_schema(_schema_document()["schema"]))


def _format_path(base: str, parts: list[str | int]) -> str:
    path = base
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _describe(error: ValidationError) -> tuple[list[str | int], str]:
    parts: list[str | int] = list(error.absolute_path)
    if error.validator == "additionalProperties":
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        instance = error.instance if isinstance(error.instance, dict) else {}
        known = set(schema.get("properties", {}))
        unknown = sorted(k for k in instance if k not in known)
        if unknown:
            return [*parts, unknown[0]], "unknown field" + did_you_mean(unknown[0], known)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [*parts, missing], "required field is missing"
    if error.validator == "type":
        expected = error.validator_value
        return parts, f"expected {expected}, got {type(error.instance).__name__}"
    if error.validator in ("minimum", "maximum"):
        low, high = _bounds(error.schema)
        return parts, f"must be between {low} and {high}, got {error.instance!r}"
    if error.validator == "enum":
        values = error.validator_value if isinstance(error.validator_value, list) else []
        allowed = ", ".join(map(str, values))
        return parts, f"{error.instance!r} is not one of: {allowed}"
    return parts, error.message


def _bounds(schema: Any) -> tuple[Any, Any]:
    node = schema if isinstance(schema, Mapping) else {}
    return node.get("minimum", "-inf"), node.get("maximum", "inf")


def validate_pod_template(template: Any, path: str) -> list[SpecError]:
    """Every problem in `template`, each named by its full field path below `path`."""
    if not isinstance(template, dict):
        return [SpecError(path, "expected a pod template (an object with metadata and spec)")]
    errors: list[SpecError] = []
    for error in _validator().iter_errors(template):
        parts, message = _describe(error)
        errors.append(SpecError(_format_path(path, parts), message))
    return errors
