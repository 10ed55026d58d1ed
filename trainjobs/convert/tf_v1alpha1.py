"""tf-operator's v1alpha1 TFJob (kubeflow.org, earlier tensorflow.org): the list form.

`replicaSpecs` (or `replica_specs`) entries with `tfReplicaType` (MASTER, WORKER, PS; MASTER
when left out), `tfPort` (2222), `replicas` (1); `tfImage` for the default parameter server;
`terminationPolicy.chief` naming the replica whose exit ends the job; `cleanupPodPolicy`
(default All); `tensorboard`, whose fields are TfJob's own.
"""

from __future__ import annotations

from typing import Any

from trainjobs.convert.base import Conversion, job_document, set_port
from trainjobs.convert.legacy import list_replica_specs

__all__ = ["convert_tf_v1alpha1"]

TYPES = {"MASTER": "Master", "WORKER": "Worker", "PS": "PS"}
DEFAULT_PORT = 2222
PORT_NAME = "tfjob-port"
OLD_DEFAULT_CLEAN_POD_POLICY = "All"
# `IsDefaultPS` (and the spec's `RuntimeId`): the Go field names, which `kubectl get -o yaml`
# printed (the v1alpha1 types had no json tags for them).
REPLICA_FIELDS = frozenset({"tfPort", "isDefaultPS", "IsDefaultPS"})
TENSORBOARD_FIELDS = ("logDir", "serviceType", "volumes", "volumeMounts")


def convert_tf_v1alpha1(doc: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    raw = doc["spec"]
    field_name = "replicaSpecs" if "replicaSpecs" in raw else "replica_specs"
    if field_name == "replica_specs":
        conv.changed("spec.replica_specs", "the old snake_case name -> spec.replicaSpecs")
    replicas = list_replica_specs(raw.get(field_name), f"spec.{field_name}", "tfReplicaType",
                                  TYPES, "MASTER", REPLICA_FIELDS, conv, _tf_replica)
    spec: dict[str, Any] = {"runPolicy": _run_policy(raw, conv), "replicaSpecs": replicas}
    _termination_policy(raw.get("terminationPolicy"), replicas, conv)
    if "tfImage" in raw:
        conv.dropped("spec.tfImage", "a PS without a `tensorflow` container gets trainjobs' "
                                     "standard gRPC server image instead")
    if raw.get("tensorboard") is not None:
        spec["tensorboard"] = _tensorboard(raw["tensorboard"], conv)
    if raw.get("schedulerName"):
        for rspec in replicas.values():
            pod = (rspec.get("template") or {}).setdefault("spec", {})
            pod.setdefault("schedulerName", raw["schedulerName"])
        conv.changed("spec.schedulerName", "set on every replica's pod template")
    known = {field_name, "terminationPolicy", "tfImage", "tensorboard", "schedulerName",
             "cleanupPodPolicy", "cleanPodPolicy", "runtimeId", "RuntimeId"}
    for name in ("runtimeId", "RuntimeId"):
        if name in raw:
            conv.dropped(f"spec.{name}", "pod names are <job>-<type>-<index>, no random suffix")
    for key in sorted(set(raw) - known):
        conv.refuse(f"spec.{key}", "unknown v1alpha1 TFJob field; trainjobs has nothing like it")
    return job_document("TfJob", doc, spec, conv)


def _tf_replica(entry: dict[str, Any], path: str, rspec: dict[str, Any],
                conv: Conversion) -> None:
    for name in ("isDefaultPS", "IsDefaultPS"):
        if not entry.get(name):
            continue
        if rspec.get("template") is not None:
            # The template tf-operator wrote for its default PS (as `kubectl get -o yaml`
            # shows it): its server image, mounting a ConfigMap only its pods had.
            rspec["template"] = None
            conv.changed(f"{path}.template", f"written by tf-operator for its default PS "
                                             f"({name}: true): left out, the PS gets "
                                             "trainjobs' standard gRPC server")
        else:
            conv.changed(f"{path}.{name}", "a PS without a `tensorflow` container gets "
                                           "trainjobs' standard gRPC server")
    if rspec.get("template") is None:
        rspec["template"] = {"spec": {"containers": []}}
        conv.changed(f"{path}.template", "none: an empty template (the PS gets trainjobs' "
                                         "standard gRPC server)")
    port = entry.get("tfPort", DEFAULT_PORT)
    if port != DEFAULT_PORT:
        set_port(rspec["template"], f"{path}.template", "tensorflow", PORT_NAME, port,
                 f"{path}.tfPort", conv)
    elif "tfPort" in entry:
        conv.changed(f"{path}.tfPort", f"{DEFAULT_PORT} is TfJob's default port; left out")


def _run_policy(raw: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    for name in ("cleanupPodPolicy", "cleanPodPolicy"):
        if name in raw:
            conv.changed(f"spec.{name}", "-> spec.runPolicy.cleanPodPolicy")
            return {"cleanPodPolicy": raw[name]}
    conv.changed("spec.runPolicy.cleanPodPolicy",
                 f"not set: written as {OLD_DEFAULT_CLEAN_POD_POLICY}, v1alpha1's default "
                 "(trainjobs' is Running)")
    return {"cleanPodPolicy": OLD_DEFAULT_CLEAN_POD_POLICY}


def _termination_policy(raw: Any, replicas: dict[str, Any], conv: Conversion) -> None:
    """trainjobs' rule: the Master decides; without one, Worker 0. Anything else is refused."""
    if raw is None:
        return
    chief = raw.get("chief") if isinstance(raw, dict) else None
    if not isinstance(chief, dict):
        conv.refuse("spec.terminationPolicy", "expected {chief: {replicaName, replicaIndex}}")
        return
    name = TYPES.get(str(chief.get("replicaName", "")).upper())
    index = chief.get("replicaIndex", 0)
    same = index == 0 and (name == "Master" or (name == "Worker" and "Master" not in replicas))
    if same:
        conv.changed("spec.terminationPolicy", f"chief {name} {index} is trainjobs' own rule "
                     "(the Master decides; without one, Worker 0); left out")
    else:
        conv.refuse("spec.terminationPolicy.chief",
                    f"{chief.get('replicaName')} {index}: a TfJob ends with its Master (or "
                    "Chief), else with Worker 0; no other replica can decide")


def _tensorboard(raw: Any, conv: Conversion) -> dict[str, Any]:
    if not isinstance(raw, dict):
        conv.refuse("spec.tensorboard", "expected a mapping")
        return {}
    for key in sorted(set(raw) - set(TENSORBOARD_FIELDS)):
        conv.refuse(f"spec.tensorboard.{key}", "not a TfJob tensorboard field")
    conv.changed("spec.tensorboard", "kept: a Deployment and Service <job>-tensorboard")
    unset = sorted(k for k in TENSORBOARD_FIELDS if k in raw and raw[k] in (None, ""))
    if unset:  # as `kubectl get -o yaml` printed the Go zero values
        conv.changed("spec.tensorboard", f"{', '.join(unset)}: empty, left out (the defaults)")
    return {k: raw[k] for k in TENSORBOARD_FIELDS if k in raw and k not in unset}
