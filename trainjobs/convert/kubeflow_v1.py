"""Kubeflow's map form: TFJob and MXJob of kubeflow.org v1alpha2, v1beta1, v1beta2 and v1.

`tfReplicaSpecs`/`mxReplicaSpecs` keyed by replica type, `runPolicy` (or, before v1, the same
fields directly under `spec`). The replica types, container names (`tensorflow`, `mxnet`),
port names (`tfjob-port`, `mxjob-port`) and replica `restartPolicy` values are trainjobs' own,
so most of a job carries over as written; what differs is the defaults (Kubeflow's
cleanPodPolicy is None, its backoffLimit unlimited), which are written out so that the job
keeps behaving as it did.
"""

from __future__ import annotations

import copy
from typing import Any

from trainjobs.api.models import MANAGED_BY_MULTIKUEUE, MANAGED_BY_OPERATOR
from trainjobs.convert.base import Conversion, job_document, move_template_restart_policy

__all__ = ["KINDS", "convert_kubeflow"]

# Kubeflow kind -> (trainjobs kind, replica specs field, replica types)
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "TFJob": ("TfJob", "tfReplicaSpecs", ("Chief", "Master", "Worker", "PS", "Evaluator")),
    "MXJob": ("MxJob", "mxReplicaSpecs", ("Scheduler", "Server", "Worker")),
}
RUN_POLICY_FIELDS = ("cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds",
                     "ttlSecondsAfterFinished", "suspend", "schedulingPolicy")
SCHEDULING_FIELDS = ("minAvailable", "queue", "priorityClass", "minResources",
                     "scheduleTimeoutSeconds")
REPLICA_RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
MX_TUNE_TYPES = ("TunerTracker", "TunerServer", "Tuner")


def convert_kubeflow(doc: dict[str, Any], conv: Conversion, source_kind: str) -> dict[str, Any]:
    """`source_kind` is TFJob or MXJob, however the document spelt it."""
    kind, field_name, types = KINDS[source_kind]
    raw = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    assert isinstance(raw, dict)
    spec: dict[str, Any] = {}
    run_policy = _run_policy(raw, conv)
    spec["runPolicy"] = run_policy
    manager = (raw.get("runPolicy") or {}).get("managedBy") \
        if isinstance(raw.get("runPolicy"), dict) else None
    if manager == MANAGED_BY_MULTIKUEUE:
        spec["managedBy"] = manager
        conv.changed("spec.runPolicy.managedBy", "moved to spec.managedBy")
    elif manager in ("kubeflow.org/training-operator", MANAGED_BY_OPERATOR):
        conv.dropped("spec.runPolicy.managedBy", "the job operator (trainjobs) is the default")
    elif manager is not None:
        conv.refuse("spec.runPolicy.managedBy", f"{manager!r}: the managers are "
                    f"kubeflow.org/training-operator and {MANAGED_BY_MULTIKUEUE}")
    spec["replicaSpecs"] = _replica_specs(raw.get(field_name), f"spec.{field_name}", types,
                                          conv)
    handled = {field_name, "runPolicy", *RUN_POLICY_FIELDS}
    if kind == "TfJob":
        handled |= _tf_fields(raw, spec, conv)
    else:
        handled |= _mx_fields(raw, conv)
    for key in sorted(set(raw) - handled):
        conv.refuse(f"spec.{key}", f"unknown {source_kind} field; trainjobs has nothing like it")
    return job_document(kind, doc, spec, conv)


def _run_policy(raw: dict[str, Any], conv: Conversion) -> dict[str, Any]:
    nested = raw.get("runPolicy")
    policy: dict[str, Any] = dict(nested) if isinstance(nested, dict) else {}
    for key in RUN_POLICY_FIELDS:
        if key in raw:  # before v1 these lived directly under spec
            if key in policy:
                conv.refuse(f"spec.{key}", "also set in spec.runPolicy; keep one")
                continue
            policy[key] = raw[key]
            conv.changed(f"spec.{key}", f"moved to spec.runPolicy.{key}")
    if "cleanPodPolicy" not in policy:
        policy["cleanPodPolicy"] = "None"
        conv.changed("spec.runPolicy.cleanPodPolicy",
                     "not set: written as None, Kubeflow's default (trainjobs' is Running)")
    if "backoffLimit" not in policy:
        conv.changed("spec.runPolicy.backoffLimit",
                     "not set: Kubeflow restarted without limit, trainjobs fails the job "
                     "after 6 restarts (the batch/v1 default); set it to change that")
    scheduling = policy.get("schedulingPolicy")
    if isinstance(scheduling, dict):
        for key in sorted(set(scheduling) - set(SCHEDULING_FIELDS)):
            conv.refuse(f"spec.runPolicy.schedulingPolicy.{key}", "unknown schedulingPolicy "
                        f"field (Kubeflow's are {', '.join(SCHEDULING_FIELDS)})")
    for key in sorted(set(policy) - set(RUN_POLICY_FIELDS) - {"managedBy"}):
        conv.refuse(f"spec.runPolicy.{key}", "unknown runPolicy field")
    return {k: policy[k] for k in RUN_POLICY_FIELDS if k in policy}


def _replica_specs(raw: Any, path: str, types: tuple[str, ...],
                   conv: Conversion) -> dict[str, Any]:
    if not isinstance(raw, dict) or not raw:
        conv.refuse(path, "required: a mapping of replica type to replica spec")
        return {}
    by_lower = {t.lower(): t for t in types}
    out: dict[str, Any] = {}
    for key, rspec in raw.items():
        rpath = f"{path}.{key}"
        canonical = by_lower.get(str(key).lower())
        if canonical is None:
            extra = (" (MXNet auto-tuning, jobMode MXTune: trainjobs runs training only)"
                     if key in MX_TUNE_TYPES else "")
            conv.refuse(rpath, f"replica type {key!r} has no trainjobs equivalent{extra}; "
                               f"allowed: {', '.join(types)}")
            continue
        if canonical != key:
            conv.changed(rpath, f"replica type written as {canonical} (Kubeflow accepted any "
                                "case)")
        out[canonical] = _replica(rspec, rpath, conv)
    return out


def _replica(raw: Any, path: str, conv: Conversion) -> dict[str, Any]:
    if not isinstance(raw, dict):
        conv.refuse(path, "expected a replica spec (replicas, restartPolicy, template)")
        return {}
    rspec = copy.deepcopy(raw)
    template = rspec.get("template")
    in_template = move_template_restart_policy(template, f"{path}.template", conv)
    policy = rspec.get("restartPolicy")
    if in_template is not None:
        conv.dropped(f"{path}.template.spec.restartPolicy",
                     f"{in_template}: Kubeflow ignored it too (it set the pod's policy from "
                     f"the replica's restartPolicy, {policy or 'Never'})")
    if policy is not None and policy not in REPLICA_RESTART_POLICIES:
        conv.refuse(f"{path}.restartPolicy",
                    f"{policy!r} is not one of {', '.join(REPLICA_RESTART_POLICIES)}")
    for key in sorted(set(rspec) - {"replicas", "restartPolicy", "template"}):
        conv.refuse(f"{path}.{key}", "no trainjobs equivalent for this replica field")
        del rspec[key]
    return rspec


def _tf_fields(raw: dict[str, Any], spec: dict[str, Any], conv: Conversion) -> set[str]:
    policy = raw.get("successPolicy")
    if policy:
        spec["successPolicy"] = policy
    if raw.get("enableDynamicWorker"):
        conv.dropped("spec.enableDynamicWorker",
                     "no equivalent: every worker is in TF_CONFIG from the start (the job "
                     "still runs; workers cannot join or leave while it runs)")
    return {"successPolicy", "enableDynamicWorker"}


def _mx_fields(raw: dict[str, Any], conv: Conversion) -> set[str]:
    mode = raw.get("jobMode")
    if mode == "MXTune":
        conv.dropped("spec.jobMode", "MXTune (TVM auto-tuning) has no equivalent: trainjobs "
                                     "runs MXNet training (Scheduler, Server, Worker)")
    elif mode not in (None, "MXTrain"):
        conv.refuse("spec.jobMode", f"{mode!r} is neither MXTrain nor MXTune")
    elif mode:
        conv.changed("spec.jobMode", "MXTrain is what an MxJob does; left out")
    conv.changed("spec", "success: Kubeflow marked an MXJob Succeeded when its Scheduler "
                         "exited 0; an MxJob succeeds when every Worker has exited 0")
    policy = raw.get("successPolicy")
    if policy == "AllWorkers":
        conv.changed("spec.successPolicy", "AllWorkers is MxJob's only rule; left out")
    elif policy:
        conv.refuse("spec.successPolicy", f"{policy!r}: an MxJob succeeds when every Worker "
                                          "has succeeded (AllWorkers) and no other way")
    return {"jobMode", "successPolicy"}
