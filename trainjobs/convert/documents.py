"""Picks the converter for each document of a file; everything else passes through unchanged.

A document is converted when its group is one the old operators used (kubeflow.org, and
before it tensorflow.org and mlkube.io) and its kind is a training job; the form (list or map
replica specs) picks the module. trainjobs jobs, ConfigMaps, Services, PVCs and the rest are
printed as they are, so a whole `kubectl apply -f` file converts in one go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from trainjobs.convert.base import Conversion, Note
from trainjobs.convert.caffe2_v1alpha1 import convert_caffe2_v1alpha1
from trainjobs.convert.kubeflow_v1 import convert_kubeflow
from trainjobs.convert.mx_v1alpha1 import convert_mx_v1alpha1
from trainjobs.convert.tf_v1alpha1 import convert_tf_v1alpha1
from trainjobs.errors import SpecError, SpecInvalid
from trainjobs.yamlio import describe

__all__ = ["Converted", "convert_document", "convert_documents", "is_old_job"]

OLD_GROUPS = frozenset({"kubeflow.org", "tensorflow.org", "mlkube.io"})
OLD_KINDS = frozenset({"TFJob", "TfJob", "MXJob", "MxJob", "Caffe2Job"})

Converter = Callable[[dict[str, Any], Conversion], dict[str, Any]]


@dataclass
class Converted:
    """The documents of one file, converted or passed through, and what was done to each."""

    documents: list[Any] = field(default_factory=list)
    notes: list[tuple[str, Note]] = field(default_factory=list)  # (Kind/name, note)
    passed: list[str] = field(default_factory=list)


def is_old_job(doc: Any) -> bool:
    """A training job of one of the old operators (any version)."""
    if not isinstance(doc, dict):
        return False
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    return (isinstance(api_version, str) and api_version.split("/")[0] in OLD_GROUPS
            and isinstance(kind, str) and kind in OLD_KINDS)


def _converter(doc: dict[str, Any]) -> Converter | None:
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return None
    kind = str(doc["kind"])
    if kind == "Caffe2Job":
        return convert_caffe2_v1alpha1
    upper = kind.upper()
    if upper == "TFJOB":
        if "tfReplicaSpecs" in spec:
            return _as_kubeflow("TFJob")
        if "replicaSpecs" in spec or "replica_specs" in spec:
            return convert_tf_v1alpha1
    if upper == "MXJOB":
        if "mxReplicaSpecs" in spec:
            return _as_kubeflow("MXJob")
        if "replicaSpecs" in spec or "replica_specs" in spec:
            return convert_mx_v1alpha1
    return None


def _as_kubeflow(source_kind: str) -> Converter:
    return partial(convert_kubeflow, source_kind=source_kind)


def convert_document(doc: dict[str, Any], source: str = "") -> tuple[dict[str, Any], list[Note]]:
    """One old job as a trainjobs job, with the notes; `SpecInvalid` for what has no form."""
    conv = Conversion(source)
    converter = _converter(doc)
    if converter is None:
        field_names = "tfReplicaSpecs, mxReplicaSpecs or replicaSpecs"
        raise SpecInvalid([SpecError("spec", f"no replica specs found ({field_names}): "
                                             "not a form trainjobs convert knows")], source)
    out = converter(doc, conv)
    if conv.errors:
        raise SpecInvalid(conv.errors, source)
    return out, conv.notes


def convert_documents(docs: list[Any], source: str = "") -> Converted:
    """Every document, in order: old jobs converted, the rest unchanged.

    Every refusal of every document is raised together, each naming its document."""
    result = Converted()
    errors: list[SpecError] = []
    several = len(docs) > 1
    for number, doc in enumerate(docs, 1):
        if not is_old_job(doc):
            result.documents.append(doc)
            result.passed.append(describe(doc))
            continue
        where = f"document {number} ({describe(doc)}): " if several else ""
        try:
            converted, notes = convert_document(doc)
        except SpecInvalid as exc:
            errors += [SpecError(f"{where}{e.path}", e.message) for e in exc.errors]
            continue
        result.documents.append(converted)
        result.notes += [(describe(doc), note) for note in notes]
    if errors:
        raise SpecInvalid(errors, source)
    return result
