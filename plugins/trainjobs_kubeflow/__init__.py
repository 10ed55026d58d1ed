"""Kubeflow's own kinds, served as they are: `kubeflow.org/v1` TFJob and MXJob.

Off unless enabled (`TRAINJOBS_ENABLE_PLUGINS=kubeflow`, the operator's `--enable-plugins
kubeflow`, the chart's `kubeflow.enabled`): these kinds are Kubeflow training-operator's, and
two operators must never reconcile the same objects. Enabled, manifests written for Kubeflow
and the Kubeflow Python SDK (`TrainingClient`) work unchanged: `tfReplicaSpecs` /
`mxReplicaSpecs`, `runPolicy`, Kubeflow's replica types, container names (`tensorflow`,
`mxnet`) and port names (`tfjob-port` 2222, `mxjob-port` 9091), its status (conditions,
`replicaStatuses` with active/succeeded/failed, `startTime`, `completionTime`,
`lastReconcileTime`), the `training.kubeflow.org/*` pod and Service labels dashboards and the
SDK select on, and replica keys in any case, as training-operator's defaulting has them.
Underneath run trainjobs' semantics: the environment contract of TfJob and MxJob, restarts
counted once, one true state, trainjobs' defaults (docs/migrating.md says where they differ).

Written against the public plugin API only, as a third party would write it: the replica
field's name comes from the spec model (an alias of `replica_specs`), the group and version
from `Framework.group`/`version`, the status fields from `Framework.status_model` and
`trainjobs_adjust_status`, the labels from `trainjobs_adjust_pod` and `trainjobs_adjust_service`,
the keys' case from `Framework.replica_keys_any_case` and the spec models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, model_validator
from trainjobs_mxnet import MxNetPlugin
from trainjobs_tensorflow import TensorFlowPlugin

from trainjobs.plugin import (
    Condition,
    Framework,
    FrameworkPlugin,
    Job,
    JobSpec,
    JobStatus,
    ParameterServers,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaSpec,
    ReplicaType,
    RunPolicy,
    SpecError,
    TensorBoard,
    TensorBoardSpec,
    hookimpl,
)

__all__ = ["GROUP", "KUBEFLOW_LABELS", "MXJOB", "SERVED", "TFJOB", "KubeflowJobStatus",
           "KubeflowRunPolicy",
           "MXJobSpec", "ServedKind", "TFJobSpec", "canonical_keys", "kubeflow_labels",
           "latest_time", "plugin"]

GROUP = "kubeflow.org"
VERSION = "v1"
LABEL_PREFIX = "training.kubeflow.org/"
KUBEFLOW_LABELS = tuple(f"{LABEL_PREFIX}{n}" for n in (
    "job-name", "replica-type", "replica-index", "job-role", "operator-name"))


TF_TYPES = ("PS", "Worker", "Chief", "Master", "Evaluator")
MX_TYPES = ("Scheduler", "Server", "Worker")


def canonical_keys(data: Any, field: str, types: Sequence[str]) -> Any:
    """training-operator's defaulting (`setTypeNameToCamelCase`): a replica key written in
    another case (`worker`, `PS`, `SERVER`) becomes the type's name, unless that name is a key
    already (then both stay, and the job is refused for naming one type twice)."""
    if not isinstance(data, dict):
        return data
    name = field if field in data else "replica_specs"
    specs = data.get(name)
    if not isinstance(specs, dict):
        return data
    by_lower = {t.lower(): t for t in types}
    out: dict[Any, Any] = {}
    for key, value in specs.items():
        canonical = by_lower.get(str(key).lower(), key)
        out[canonical if canonical not in specs else key] = value
    return {**data, name: out}


class KubeflowRunPolicy(RunPolicy):
    """Kubeflow's RunPolicy: trainjobs' plus `managedBy` (training-operator v1.9), which Kueue's
    own kubeflow integration reads and clears for MultiKueue."""

    managed_by: Literal["kubeflow.org/training-operator", "trainjobs.io/operator",
                        "kueue.x-k8s.io/multikueue"] | None = Field(
        default=None,
        description="The controller that reconciles the job: absent, "
                    "kubeflow.org/training-operator or trainjobs.io/operator (this operator), "
                    "kueue.x-k8s.io/multikueue (Kueue's MultiKueue runs it in a worker "
                    "cluster; this cluster's operator leaves it alone). Immutable.")


class TFJobSpec(JobSpec):
    """Kubeflow's TFJobSpec (kubeflow.org/v1)."""

    @model_validator(mode="before")
    @classmethod
    def _canonical_types(cls, data: Any) -> Any:
        return canonical_keys(data, "tfReplicaSpecs", TF_TYPES)

    run_policy: KubeflowRunPolicy = Field(default_factory=KubeflowRunPolicy)
    replica_specs: dict[str, ReplicaSpec] = Field(
        alias="tfReplicaSpecs",
        description="Replica specs keyed by replica type: Chief (or Master), Worker, PS, "
                    "Evaluator.")
    success_policy: Literal["", "AllWorkers"] = Field(
        default="", description='"" (the Chief, else Worker 0 decides) or AllWorkers.')
    enable_dynamic_worker: bool = Field(
        default=False, description="Accepted for compatibility; trainjobs puts every worker in "
                                   "TF_CONFIG from the start.")
    tensorboard: TensorBoardSpec | None = Field(
        default=None, description="trainjobs' addition, as TfJob's: run a TensorBoard "
                                  "Deployment and Service <job>-tensorboard.")


class MXJobSpec(JobSpec):
    """Kubeflow's MXJobSpec (kubeflow.org/v1)."""

    @model_validator(mode="before")
    @classmethod
    def _canonical_types(cls, data: Any) -> Any:
        return canonical_keys(data, "mxReplicaSpecs", MX_TYPES)

    run_policy: KubeflowRunPolicy = Field(default_factory=KubeflowRunPolicy)
    replica_specs: dict[str, ReplicaSpec] = Field(
        alias="mxReplicaSpecs",
        description="Replica specs keyed by replica type: Scheduler, Server, Worker.")
    job_mode: Literal["MXTrain", "MXTune"] = Field(
        default="MXTrain", description="MXTrain; MXTune (auto-tuning) is refused.")


class KubeflowCondition(Condition):
    last_update_time: datetime | None = None


class KubeflowJobStatus(JobStatus):
    """trainjobs' status plus what Kubeflow's clients read besides (the CRD keeps them)."""

    conditions: list[KubeflowCondition] = Field(default_factory=list)  # type: ignore[assignment]
    last_reconcile_time: datetime | None = None


TFJOB = Framework(
    kind="TFJob", plural="tfjobs", short_names=(), name="tensorflow",
    replica_types=(
        ReplicaType("Chief", 0, 1, aliases=("Master",), description="Chief (or Master)."),
        ReplicaType("Worker", 0, None, description="Workers."),
        ReplicaType("PS", 0, None, container_optional=True,
                    description="Parameter servers; without a `tensorflow` container (or "
                                "without a template) they get a standard TensorFlow gRPC "
                                "server, as TfJob's."),
        ReplicaType("Evaluator", 0, 1, description="At most one evaluator."),
    ),
    container_name="tensorflow", default_port=2222, spec_model=TFJobSpec,
    description="Kubeflow's TFJob (kubeflow.org/v1), reconciled by trainjobs.",
    group=GROUP, version=VERSION, status_model=KubeflowJobStatus,
    # TfJob's features: TensorBoard (spec.tensorboard) and the default PS server.
    capabilities=(TensorBoard(), ParameterServers("PS")),
    replica_keys_any_case=True, suspend_style="kubeflow",
)
MXJOB = Framework(
    kind="MXJob", plural="mxjobs", short_names=(), name="mxnet",
    replica_types=(
        ReplicaType("Scheduler", 1, 1, description="ps-lite scheduler: exactly one."),
        ReplicaType("Server", 1, None, description="Parameter servers."),
        ReplicaType("Worker", 1, None, description="Workers; all must succeed."),
    ),
    container_name="mxnet", default_port=9091, spec_model=MXJobSpec,
    env_in_all_containers=True,
    description="Kubeflow's MXJob (kubeflow.org/v1), reconciled by trainjobs.",
    group=GROUP, version=VERSION, status_model=KubeflowJobStatus,
    replica_keys_any_case=True, suspend_style="kubeflow",
)


def _tf_is_master(job: Job, replica: Replica) -> bool:
    """training-operator's TFJob IsMasterRole: the Chief/Master when the spec has one (by key,
    whatever its replicas), else Worker 0 — whatever the successPolicy."""
    specs = job.spec.replica_specs
    if "Chief" in specs or "Master" in specs:
        return replica.type in ("Chief", "Master")
    return replica.type == "Worker" and replica.index == 0


def _mx_is_master(job: Job, replica: Replica) -> bool:
    """training-operator's MXJob IsMasterRole (v1.7-v1.8; MXJob left in v1.9): every Server."""
    return replica.type == "Server"


class KubeflowTFJobPlugin(TensorFlowPlugin):
    """TFJob: TfJob's environment (TF_CONFIG) and success rule."""

    framework = TFJOB


class KubeflowMXJobPlugin(MxNetPlugin):
    """MXJob: MxJob's environment (DMLC_*, MX_CONFIG) and success rule; MXTune refused."""

    framework = MXJOB

    def validate(self, job: Job) -> list[SpecError]:
        spec: MXJobSpec = job.spec  # type: ignore[assignment]
        if spec.job_mode == "MXTune":
            return [SpecError("spec.jobMode", "MXTune (TVM auto-tuning) is not supported: "
                                              "trainjobs runs MXNet training (MXTrain)")]
        return []


@dataclass(frozen=True)
class ServedKind:
    """What differs between the served kinds, in one place: the trainjobs plugin that gives
    the kind its semantics, the `operator-name` label training-operator's controller writes,
    and which pods it labels `job-role: master`."""

    part: FrameworkPlugin
    operator_name: str
    is_master: Callable[[Job, Replica], bool]

    @property
    def framework(self) -> Framework:
        return self.part.framework


SERVED: dict[str, ServedKind] = {
    TFJOB.kind: ServedKind(KubeflowTFJobPlugin(), "tfjob-controller", _tf_is_master),
    MXJOB.kind: ServedKind(KubeflowMXJobPlugin(), "mxjob-controller", _mx_is_master),
}


def kubeflow_labels(job: Job, replica: Replica, served: ServedKind) -> dict[str, str]:
    """The labels training-operator puts on a replica's Service (GenLabels plus replica type
    and index); its pods get `job-role` besides."""
    return {f"{LABEL_PREFIX}operator-name": served.operator_name,
            f"{LABEL_PREFIX}job-name": job.name,
            f"{LABEL_PREFIX}replica-type": replica.type_lower,
            f"{LABEL_PREFIX}replica-index": str(replica.index)}


def latest_time(status: Mapping[str, Any]) -> str | None:
    """The latest timestamp the status carries (its conditions' transitions, startTime,
    completionTime): when the operator last changed the job's state. RFC 3339 UTC strings
    ("...Z" or "+00:00") compare by their instant."""
    stamps = [c.get("lastTransitionTime") for c in status.get("conditions") or []]
    stamps += [status.get("startTime"), status.get("completionTime")]
    parsed = [datetime.fromisoformat(str(s).replace("Z", "+00:00")) for s in stamps if s]
    if not parsed:
        return None
    return max(parsed).astimezone(UTC).isoformat().replace("+00:00", "Z")


class KubeflowPlugin:
    """Both kinds behind one entry point: each hook goes to the kind's `ServedKind`, plus
    Kubeflow's pod labels and status fields for both."""

    @hookimpl
    def trainjobs_frameworks(self) -> Sequence[Framework]:
        return [served.framework for served in SERVED.values()]

    @hookimpl
    def trainjobs_validate(self, job: Job, framework: Framework) -> Sequence[SpecError] | None:
        served = SERVED.get(job.kind)
        return served.part.validate(job) if served is not None else None

    @hookimpl
    def trainjobs_replica_env(self, job: Job, replica: Replica,
                              ctx: RenderContext) -> ReplicaEnv | None:
        served = SERVED.get(job.kind)
        return served.part.replica_env(job, replica, ctx) if served is not None else None

    @hookimpl
    def trainjobs_job_succeeded(self, job: Job, framework: Framework,
                                outcomes: Sequence[ReplicaOutcome]) -> bool | None:
        served = SERVED.get(job.kind)
        return served.part.succeeded(job, outcomes) if served is not None else None

    @hookimpl
    def trainjobs_checkpoint_replica(self, job: Job, framework: Framework) -> Replica | None:
        served = SERVED.get(job.kind)
        return served.part.checkpoint_replica(job) if served is not None else None

    @hookimpl
    def trainjobs_adjust_pod(self, job: Job, replica: Replica, pod: dict[str, Any],
                             ctx: RenderContext) -> None:
        served = SERVED.get(job.kind)
        if served is None:
            return
        labels = pod["metadata"]["labels"]
        labels.update(kubeflow_labels(job, replica, served))
        if served.is_master(job, replica):
            labels[f"{LABEL_PREFIX}job-role"] = "master"

    @hookimpl
    def trainjobs_adjust_service(self, job: Job, replica: Replica, service: dict[str, Any],
                                 ctx: RenderContext) -> None:
        """training-operator's Service labels (`CreateNewService`: GenLabels plus replica type
        and index; no job-role), so that selectors written for Kubeflow find the Services."""
        served = SERVED.get(job.kind)
        if served is not None:
            service["metadata"]["labels"].update(kubeflow_labels(job, replica, served))

    @hookimpl
    def trainjobs_adjust_status(self, job: Job, framework: Framework,
                                status: dict[str, Any]) -> None:
        """Deterministic, as every hook: the times come from the status itself.
        `lastReconcileTime` is the status's latest transition (training-operator sets it only
        while a PodGroup holds pod creation back); a condition's `lastUpdateTime` is its
        `lastTransitionTime` (trainjobs rewrites a condition only when it changes)."""
        if job.kind not in SERVED:
            return
        latest = latest_time(status)
        if latest is not None:
            status["lastReconcileTime"] = latest
        for condition in status.get("conditions") or []:
            if condition.get("lastTransitionTime"):
                condition.setdefault("lastUpdateTime", condition["lastTransitionTime"])


plugin = KubeflowPlugin()
