#!/usr/bin/env python3
"""Regenerates trainjobs/api/schemas/pod-template-spec.json from the pinned Kubernetes release.

Why: each replica spec carries a full core/v1 PodTemplateSpec, and users expect a typo inside it
to be refused (by `kubectl apply` and by `trainjobs run` alike). We take the schema from the
OpenAPI v3 document that ships inside the k8s.io/kubernetes Go module we build the control plane
from (api/openapi-spec/v3/api__v1_openapi.json), inline every $ref, and make it structural so
it can sit inside a CRD: no $ref/allOf/oneOf, `x-kubernetes-int-or-string` for IntOrString and
Quantity, no patch-strategy extensions, defaults only where a list-map key needs one.

Usage: scripts/update-pod-schema.py [PATH_TO_api__v1_openapi.json]
Without a path it asks `go mod download` for the module (cached in GOMODCACHE).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

K8S_VERSION = "v1.36.3"
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "trainjobs" / "api" / "schemas" / "pod-template-spec.json"
INT_OR_STRING = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
}
TEMPLATE_METADATA_FIELDS = ("annotations", "labels", "name", "namespace", "finalizers")
DROPPED_KEYS = {
    "x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy", "x-kubernetes-unions",
}


def openapi_path() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
        check=True, capture_output=True, text=True,
    ).stdout
    return Path(json.loads(out)["Dir"]) / "api" / "openapi-spec" / "v3" / "api__v1_openapi.json"


class Inliner:
    def __init__(self, schemas: dict[str, Any]) -> None:
        self.schemas = schemas

    def resolve(self, name: str, stack: tuple[str, ...]) -> dict[str, Any]:
        if name in stack:
            raise ValueError(f"recursive schema {' -> '.join((*stack, name))}")
        if name in INT_OR_STRING:
            desc = self.schemas[name].get("description", "")
            return {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"},
                    {"type": "string"}], "description": desc.split("\n")[0]}
        return self.walk(self.schemas[name], (*stack, name))

    def walk(self, node: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
        if "$ref" in node:
            return self.resolve(node["$ref"].rsplit("/", 1)[1], stack)
        if "allOf" in node:
            (inner,) = node["allOf"]
            merged = self.walk(inner, stack)
            for k, v in node.items():
                if k not in ("allOf", "default"):
                    merged[k] = v
            return merged
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in DROPPED_KEYS or key == "default":
                continue
            if key == "properties":
                out[key] = {p: self.walk(s, stack) for p, s in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = self.walk(value, stack)
            else:
                out[key] = value
        return out


# A list-map key must be required or defaulted in a CRD. Upstream defaults these two
# (ContainerPort.protocol "TCP", LocalObjectReference.name ""); every other default is dropped
# so that the stored template stays exactly what the user wrote.
LIST_MAP_KEY_DEFAULTS = {"protocol": "TCP", "name": ""}


def add_list_map_key_defaults(node: dict[str, Any]) -> None:
    for child in node.get("properties", {}).values():
        add_list_map_key_defaults(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            add_list_map_key_defaults(node[key])
    for k in node.get("x-kubernetes-list-map-keys", []):
        item = node["items"]
        if k not in item.get("required", []):
            if k not in LIST_MAP_KEY_DEFAULTS:
                raise ValueError(f"list-map key {k} is neither required nor defaulted")
            item["properties"][k]["default"] = LIST_MAP_KEY_DEFAULTS[k]


def main() -> None:
    doc = json.loads(openapi_path().read_text())
    schemas = doc["components"]["schemas"]
    inliner = Inliner(schemas)
    spec = inliner.resolve("io.k8s.api.core.v1.PodSpec", ())
    add_list_map_key_defaults(spec)
    meta_props = schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]
    metadata = {
        "type": "object",
        "description": "Labels and annotations added to every pod of this replica type.",
        "properties": {f: inliner.walk(meta_props[f], ()) for f in TEMPLATE_METADATA_FIELDS},
    }
    template = {
        "type": "object",
        "description": schemas["io.k8s.api.core.v1.PodTemplateSpec"]["description"],
        "properties": {"metadata": metadata, "spec": spec},
    }
    result = {"kubernetesVersion": K8S_VERSION, "schema": template}
    OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
