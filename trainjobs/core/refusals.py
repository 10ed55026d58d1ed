"""The words of a refusal: what is wrong with a field, in the user's terms, and what to write.

Why a module of its own: the same job is refused by `trainjobs run`/`render` and by the
operator, and people moving manifests from Kubeflow hit the same few mistakes (`tfReplicaSpecs`,
`cleanPodPolicy` directly under `spec`, a list of replica specs). Each message names the fix —
a "did you mean" (trainjobs.suggest, over the fields allowed at that place, plus the fields
Kubeflow named differently) or `trainjobs convert` — and none repeats the validation
library's own wording ("Input should be a valid dictionary or instance of ReplicaSpec").
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from trainjobs.errors import SpecError
from trainjobs.suggest import did_you_mean

__all__ = [
    "KUBEFLOW_KINDS",
    "did_you_mean",
    "kubeflow_hint",
    "pydantic_errors",
    "type_name",
    "unknown_field",
]

# Kubeflow's (and the old operators') kinds, and the trainjobs kind each becomes.
KUBEFLOW_KINDS = {"TFJob": "TfJob", "MXJob": "MxJob", "Caffe2Job": "Caffe2Job"}
# spec fields the old operators named differently: old name -> trainjobs field path
RENAMED_SPEC_FIELDS = {
    "tfReplicaSpecs": "replicaSpecs",
    "mxReplicaSpecs": "replicaSpecs",
    "replica_specs": "replicaSpecs",
    "backendSpecs": "backend",
    "cleanupPodPolicy": "runPolicy.cleanPodPolicy",
    "cleanPodPolicy": "runPolicy.cleanPodPolicy",
    "backoffLimit": "runPolicy.backoffLimit",
    "activeDeadlineSeconds": "runPolicy.activeDeadlineSeconds",
    "ttlSecondsAfterFinished": "runPolicy.ttlSecondsAfterFinished",
    "schedulingPolicy": "runPolicy.schedulingPolicy",
    "suspend": "runPolicy.suspend",
}
# Fields only a Kubeflow/old-operator manifest has: their presence says where it came from.
KUBEFLOW_ONLY_FIELDS = frozenset({"tfReplicaSpecs", "mxReplicaSpecs", "replica_specs",
                                  "backendSpecs", "cleanupPodPolicy", "jobMode",
                                  "enableDynamicWorker", "terminationPolicy", "tfImage",
                                  "tfReplicaType", "mxReplicaType", "tfPort", "PsRootPort"})
CONVERT = "run `trainjobs convert FILE` to rewrite it"

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", dict: "a mapping", type(None): "null"}


def type_name(value: Any) -> str:
    """What a user calls the type of a YAML value."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def kubeflow_hint(kind: str) -> str:
    """The sentence that sends a Kubeflow manifest to `trainjobs convert`."""
    old = next((k for k, v in KUBEFLOW_KINDS.items() if v == kind), kind)
    return f"this looks like a Kubeflow {old}: {CONVERT} as a {kind}"


def unknown_field(path: str, name: str, allowed: Iterable[str], kind: str = "") -> SpecError:
    """An unknown field, with the field meant when it is a typo or a Kubeflow name."""
    where = path.rsplit(".", 1)[0] if "." in path else ""
    message = "unknown field"
    if where == "spec" and name in RENAMED_SPEC_FIELDS:
        message += f"; did you mean {RENAMED_SPEC_FIELDS[name]}?"
    else:
        message += did_you_mean(name, allowed)
    if where.startswith("spec") and name in KUBEFLOW_ONLY_FIELDS and kind:
        message += f" ({kubeflow_hint(kind)})"
    return SpecError(path, message)


def pydantic_errors(exc: ValidationError, root: str, model: type[BaseModel],
                    kind: str = "") -> list[SpecError]:
    """Every problem pydantic found, with its field path and a message in our words."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _path(root, loc)
        if err["type"] == "extra_forbidden":
            out.append(unknown_field(path, str(loc[-1]), _fields_at(model, loc[:-1]), kind))
        else:
            out.append(SpecError(path, _message(err, loc, kind)))
    return out


def _path(root: str, loc: Sequence[int | str]) -> str:
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _message(err: Any, loc: tuple[int | str, ...], kind: str) -> str:
    kind_of, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    got = f", got {type_name(value)}"
    if kind_of == "missing":
        return "required field is missing"
    if kind_of in ("int_type", "int_parsing", "int_from_float"):
        return f"expected an integer{got}"
    if kind_of in ("bool_type", "bool_parsing"):
        return f"expected true or false{got}"
    if kind_of in ("string_type", "str_type"):
        return f"expected a string{got}"
    if kind_of in ("float_type", "float_parsing"):
        return f"expected a number{got}"
    if kind_of == "list_type":
        return f"expected a list{got}"
    if kind_of in ("dict_type", "model_type", "model_attributes_type"):
        return _expected_mapping(loc, value, kind)
    if kind_of in ("enum", "literal_error"):
        return f"{value!r} is not one of: {ctx.get('expected', '')}".replace("' or '", "', '")
    bounds = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}
    if kind_of in bounds:
        words, key = bounds[kind_of]
        return f"must be {words} {ctx.get(key)}, got {value!r}"
    if kind_of == "string_pattern_mismatch":
        return f"{value!r} does not match the pattern {ctx.get('pattern')}"
    if kind_of == "value_error":
        return str(ctx.get("error") or err["msg"]).removeprefix("Value error, ")
    return f"invalid value {value!r}"


def _expected_mapping(loc: tuple[int | str, ...], value: Any, kind: str) -> str:
    got = f", got {type_name(value)}"
    if loc == ("replicaSpecs",):
        extra = (f" (the list form of the old operators: {kubeflow_hint(kind)})"
                 if isinstance(value, list) and kind else "")
        return f"expected a mapping of replica type to replica spec{got}{extra}"
    if len(loc) == 2 and loc[0] == "replicaSpecs":
        return (f"expected a replica spec (replicas, restartPolicy, template){got}; "
                "replicaSpecs maps each replica type to one")
    return f"expected a mapping{got}"


def _fields_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names (as written in YAML) allowed at `loc` below `model`, if it is a model."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _step(annotation: Any, part: int | str) -> Any:
    """The annotation one step down: a model's field, a dict's value, a list's item."""
    annotation = _unwrap_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, f in annotation.model_fields.items():
            if part in (name, f.alias):
                return f.annotation
        return None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is list and args:
        return args[0]
    return None


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation
