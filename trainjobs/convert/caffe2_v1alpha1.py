"""caffe2-operator's v1alpha1 Caffe2Job.

`backendSpecs` (`backendType` redis or nfs, `redisHost`, `redisPort`, `nfsPath`) becomes
`backend`; the single `replicaSpecs` object (every replica a shard) becomes
`replicaSpecs.Worker`. The environment the example programs read — SHARD_ID, NUM_SHARDS,
RUN_ID, REDIS_HOST/REDIS_PORT or NFS_PATH — is Caffe2Job's own.
"""

from __future__ import annotations

import copy
from typing import Any

from trainjobs.convert.base import Conversion, job_document, move_template_restart_policy

__all__ = ["convert_caffe2_v1alpha1"]

BACKEND_FIELDS = {"backendType": "type", "redisHost": "redisHost", "redisPort": "redisPort",
                  "nfsPath": "nfsPath"}
BACKEND_TYPES = ("none", "redis", "nfs")


def convert_caffe2_v1alpha1(doc: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    raw = doc["spec"]
    spec: dict[str, Any] = {}
    backend = raw.get("backendSpecs")
    if isinstance(backend, dict):
        spec["backend"] = {}
        for old, new in BACKEND_FIELDS.items():
            if old in backend:
                spec["backend"][new] = backend[old]
        for key in sorted(set(backend) - set(BACKEND_FIELDS)):
            conv.refuse(f"spec.backendSpecs.{key}", "not a Caffe2Job backend field")
        if spec["backend"].get("type") not in (None, *BACKEND_TYPES):
            conv.refuse("spec.backendSpecs.backendType",
                        f"{spec['backend']['type']!r} is not one of {', '.join(BACKEND_TYPES)}")
        conv.changed("spec.backendSpecs", "-> spec.backend (backendType -> type)")
    elif backend is not None:
        conv.refuse("spec.backendSpecs", "expected a mapping")
    replica = raw.get("replicaSpecs")
    if isinstance(replica, dict):
        spec["replicaSpecs"] = {"Worker": _worker(replica, conv)}
        conv.changed("spec.replicaSpecs", "-> spec.replicaSpecs.Worker (every replica a shard)")
    else:
        conv.refuse("spec.replicaSpecs", "required: {replicas, template}")
    for key in sorted(set(raw) - {"backendSpecs", "replicaSpecs"}):
        conv.refuse(f"spec.{key}", "unknown v1alpha1 Caffe2Job field; trainjobs has nothing "
                                   "like it")
    return job_document("Caffe2Job", doc, spec, conv)


def _worker(raw: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    rspec: dict[str, Any] = {"replicas": raw.get("replicas", 1)}
    template = copy.deepcopy(raw.get("template"))
    policy = move_template_restart_policy(template, "spec.replicaSpecs.template", conv)
    if policy is not None:
        rspec["restartPolicy"] = policy
        conv.changed("spec.replicaSpecs.template.spec.restartPolicy",
                     f"{policy}: now the replica's restartPolicy (same meaning)")
    rspec["template"] = template
    for key in sorted(set(raw) - {"replicas", "template"}):
        conv.refuse(f"spec.replicaSpecs.{key}", "no trainjobs equivalent for this field")
    return rspec
