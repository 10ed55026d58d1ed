"""What the v1alpha1 list forms of tf-operator and mxnet-operator share.

Both kept `replicaSpecs` as a list, each entry naming its type in upper case
(`tfReplicaType: MASTER`, `mxReplicaType: SCHEDULER`) with the pod's own `restartPolicy` in
the template. Each entry becomes a `replicaSpecs` key; the template's restart policy becomes
the replica's, which means the same thing in trainjobs (it is set on the pod as written).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from trainjobs.convert.base import Conversion, move_template_restart_policy, rename_old_gpu_resource

__all__ = ["ReplicaHook", "list_replica_specs"]

# (the entry as written, its path, the converted replica spec, conv) -> None
ReplicaHook = Callable[[dict[str, Any], str, dict[str, Any], Conversion], None]


def list_replica_specs(raw: Any, path: str, type_field: str, types: dict[str, str],
                       default_type: str | None, known: frozenset[str], conv: Conversion,
                       hook: ReplicaHook | None = None) -> dict[str, Any]:
    """`replicaSpecs: [{<type_field>: WORKER, ...}]` -> `{Worker: {...}}`."""
    if not isinstance(raw, list) or not raw:
        conv.refuse(path, "required: a list of replica specs")
        return {}
    out: dict[str, Any] = {}
    for index, entry in enumerate(raw):
        epath = f"{path}[{index}]"
        if not isinstance(entry, dict):
            conv.refuse(epath, "expected a replica spec")
            continue
        written = entry.get(type_field, default_type)
        rtype = types.get(str(written).upper()) if written is not None else None
        if rtype is None:
            conv.refuse(f"{epath}.{type_field}", f"{written!r} has no trainjobs equivalent; "
                        f"allowed: {', '.join(types)}")
            continue
        if type_field not in entry:
            conv.changed(epath, f"no {type_field}: {default_type}, the old default -> {rtype}")
        if rtype in out:
            conv.refuse(f"{epath}.{type_field}", f"a second {written} entry; trainjobs has "
                        "one replica spec per type: add up the replicas")
            continue
        rspec: dict[str, Any] = {"replicas": entry.get("replicas", 1)}
        template = copy.deepcopy(entry.get("template"))
        policy = move_template_restart_policy(template, f"{epath}.template", conv)
        if policy is not None:
            rspec["restartPolicy"] = policy
            conv.changed(f"{epath}.template.spec.restartPolicy",
                         f"{policy}: now the replica's restartPolicy (same meaning)")
        else:
            conv.changed(f"{epath}.template.spec.restartPolicy",
                         "not set: the replica gets trainjobs' default, Never (a failed "
                         "replica fails the job)")
        rename_old_gpu_resource(template, f"{epath}.template", conv)
        meta = template.get("metadata") if isinstance(template, dict) else None
        if isinstance(meta, dict) and "creationTimestamp" in meta:
            # `kubectl get -o yaml` prints the Go zero value (null) of every template.
            del meta["creationTimestamp"]
            conv.dropped(f"{epath}.template.metadata.creationTimestamp",
                         "written by the API server; left out")
        rspec["template"] = template
        for key in sorted(set(entry) - known - {"replicas", "template", type_field}):
            conv.refuse(f"{epath}.{key}", "no trainjobs equivalent for this replica field")
        if hook is not None:
            hook(entry, epath, rspec, conv)
        out[rtype] = rspec
    return out
