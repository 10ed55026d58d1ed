"""Pydantic models of the trainjobs.io/v1alpha1 resources: the common job spec and the status.

Why this shape: every kind shares `runPolicy` and `replicaSpecs` (a map keyed by replica type);
a framework plugin subclasses `JobSpec` to add its own fields (TfJob's `successPolicy`,
Caffe2Job's `backend`). Field names are the camelCase of the API; unknown fields are refused so
that a typo is an error, not a silently ignored setting. Pod templates are plain JSON checked
against the Kubernetes schema (see podtemplate.py), so they round-trip exactly.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints, WithJsonSchema
from pydantic.alias_generators import to_camel

from trainjobs.api.failure_policy import MAX_RULES, FailureRule
from trainjobs.api.spec_model import SpecModel

__all__ = [
    "API_VERSION",
    "DEFAULT_MAX_REPLICAS_PER_JOB",
    "GROUP",
    "MANAGED_BY_MULTIKUEUE",
    "MANAGED_BY_OPERATOR",
    "MAX_DURATION_SECONDS",
    "MAX_REPLICAS",
    "MAX_STATUS_METRICS",
    "VERSION",
    "CheckpointMethod",
    "CheckpointOutcome",
    "CheckpointRequestStatus",
    "CheckpointStatus",
    "CleanPodPolicy",
    "Condition",
    "ConditionType",
    "ElasticPolicy",
    "FailureRecord",
    "Job",
    "JobSpec",
    "JobStatus",
    "ManagedBy",
    "ObjectMeta",
    "OwnedObjectStatus",
    "ProgressDeadlineAction",
    "ProgressStatus",
    "ReplicaSpec",
    "ReplicaStatus",
    "RestartPolicy",
    "RunPolicy",
    "SchedulingPolicy",
    "SpecModel",
    "job_manager",
]

GROUP = "trainjobs.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
#: Most replicas of one type, and of one job in all (the CRD enforces both; the operator's
#: --max-replicas-per-job may lower the second). A job's cost grows with its replicas, and
#: with the square of them in bytes for the frameworks whose every replica lists every address
#: (TF_CONFIG, MX_CONFIG): without a bound one job can exhaust the operator for everyone.
MAX_REPLICAS = 5000
#: What the operator accepts unless told otherwise (--max-replicas-per-job): a job of 2,000
#: replicas peaks the operator at ~260 MB (docs/benchmarks.md, "One large job beside small
#: ones"), within the chart's 512 Mi; one of 5,000 would need an estimated 1 GiB while its
#: pods are created (their environments grow with the square of the replicas).
DEFAULT_MAX_REPLICAS_PER_JOB = 2000
#: Longest duration, in seconds, a spec may ask for (100 years): beyond any training run, and
#: far inside what a datetime holds (year 9999), so a deadline or a TTL never overflows.
MAX_DURATION_SECONDS = 100 * 365 * 24 * 3600
# A checkpoint is asked for and waited on while the pods keep their nodes: a day at most.
MAX_CHECKPOINT_TIMEOUT_SECONDS = 24 * 3600
#: `spec.managedBy` of a job this operator reconciles (absent means the same).
MANAGED_BY_OPERATOR = "trainjobs.io/operator"
#: `spec.managedBy` of a job Kueue's MultiKueue dispatches to a worker cluster: the operator
#: of the cluster it was created in leaves it alone; the worker's copy has no managedBy.
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
#: Every other value is refused (the CRD's enum), as batch/v1 and Kubeflow refuse theirs.
ManagedBy = Literal["trainjobs.io/operator", "kueue.x-k8s.io/multikueue"]
#: Names that mean "the job operator" in a served kind's `runPolicy.managedBy`: Kubeflow's
#: own (training-operator v1.9's KubeflowJobsController), which trainjobs stands in for.
_THIS_OPERATOR = frozenset({MANAGED_BY_OPERATOR, "kubeflow.org/training-operator"})


def job_manager(spec: Any) -> str:
    """Who reconciles a job, from its raw `spec`: MANAGED_BY_OPERATOR, or the controller
    named by `spec.managedBy` or (a Kubeflow kind's) `spec.runPolicy.managedBy`.

    Why on the raw spec: the operator must leave another controller's job alone before
    validating it (an invalid job must not get a Failed status the other controller owns)."""
    if not isinstance(spec, dict):
        return MANAGED_BY_OPERATOR
    run_policy = spec.get("runPolicy")
    for value in (spec.get("managedBy"),
                  run_policy.get("managedBy") if isinstance(run_policy, dict) else None):
        if isinstance(value, str) and value and value not in _THIS_OPERATOR:
            return value
    return MANAGED_BY_OPERATOR


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    NONE = "None"
    RUNNING = "Running"
    ALL = "All"


class CheckpointMethod(StrEnum):
    """How the checkpointing replica is asked: in the reply to its progress reports (it uses
    trainjobs_progress), or by SIGTERM, its pod being deleted first (it never reported)."""

    REPORT = "Report"
    SIGNAL = "Signal"


class CheckpointOutcome(StrEnum):
    """How a checkpoint request ended (Pending while it has not)."""

    PENDING = "Pending"
    SAVED = "Saved"  # the replica said it saved (status.lastCheckpoint)
    TIMED_OUT = "TimedOut"  # checkpointTimeoutSeconds passed without an answer
    STOPPED = "Stopped"  # asked by SIGTERM: its pod stopped (what it saved is its own)
    REPLICA_GONE = "ReplicaGone"  # its pod went before it answered


class ProgressDeadlineAction(StrEnum):
    """What a stall (no progress for `progressDeadlineSeconds`) does besides the Stalled
    condition and its Event: nothing more, a new start of every replica (counted against
    backoffLimit like a retryable failure), or the job's failure."""

    REPORT = "Report"
    RESTART = "Restart"
    FAIL = "Fail"


class ElasticPolicy(SpecModel):
    """Bounds for elastic workers: the job keeps Running while at least minReplicas run."""

    min_replicas: int = Field(
        ge=0, le=MAX_REPLICAS, strict=True,
        description="Fewest workers with which the job keeps running.",
    )
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS, strict=True,
                              description="Most workers the job may scale to.")


class ReplicaSpec(SpecModel):
    """How many replicas of one type to run, and the pod template each one runs."""

    replicas: int = Field(
        default=1, ge=0, le=MAX_REPLICAS, strict=True,
        description=f"Number of replicas of this type (default 1, at most {MAX_REPLICAS})."
    )
    restart_policy: RestartPolicy = Field(
        default=RestartPolicy.NEVER,
        description=(
            "Never: a failed replica fails the job. OnFailure/Always: the pod's own restart "
            "policy; container restarts count toward backoffLimit. ExitCode: exit codes 1-127 "
            "are permanent, 128-255 retryable (the pod is recreated)."
        ),
    )
    template: dict[str, Any] = Field(
        default_factory=dict,
        description="A core/v1 PodTemplateSpec, kept exactly as written. Required, except "
                    "where a plugin supplies the pods' container (TfJob's PS: the default "
                    "PS server).",
    )
    elastic_policy: ElasticPolicy | None = Field(
        default=None, description="Elastic bounds; only for Worker replica specs."
    )


# A resource quantity as Kubernetes writes it (`4`, `500m`, `8Gi`): int or string, the
# string with apimachinery's pattern; in the CRD, int-or-string.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
Quantity = Annotated[
    StrictInt | Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN)],
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN,
                    "anyOf": [{"type": "integer"}, {"type": "string"}]}),
]


class SchedulingPolicy(SpecModel):
    """Gang scheduling settings (a PodGroup for batch schedulers), Kubeflow's fields."""

    min_available: int | None = Field(default=None, ge=1, le=MAX_REPLICAS, strict=True)
    queue: str | None = None
    priority_class: str | None = None
    min_resources: dict[str, Quantity] | None = Field(
        default=None, description="The PodGroup's minResources (Volcano, Coscheduling), "
                                  "instead of what the first minAvailable pods request.")
    schedule_timeout_seconds: int | None = Field(
        default=None, ge=1, le=MAX_DURATION_SECONDS, strict=True,
        description="Coscheduling: the PodGroup's scheduleTimeoutSeconds, instead of the "
                    "operator's gangScheduling.scheduleTimeoutSeconds (Volcano has none).")


class RunPolicy(SpecModel):
    """Lifecycle settings shared by every kind."""

    clean_pod_policy: CleanPodPolicy = Field(
        default=CleanPodPolicy.RUNNING,
        description="Which pods to delete when the job finishes: None, Running (default), All.",
    )
    backoff_limit: int = Field(
        default=6,
        ge=0,
        strict=True,
        description="Restarts allowed across the job before it Fails (default 6, as batch/v1).",
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, le=MAX_DURATION_SECONDS, strict=True,
        description="Wall-clock limit from start; then Failed (at most 100 years).",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, le=MAX_DURATION_SECONDS, strict=True,
        description="Delete the job this long after it finished (at most 100 years).",
    )
    suspend: bool = Field(
        default=False, strict=True, description="true: delete pods, keep the job."
    )
    progress_deadline_seconds: int | None = Field(
        default=None, ge=1, le=MAX_DURATION_SECONDS, strict=True,
        description="A Running job whose reported training step has not advanced for this "
                    "long is Stalled (condition and Event; see progressDeadlineAction). Unset: "
                    "never called stalled. Progress comes from trainjobs_progress reports.",
    )
    progress_deadline_action: ProgressDeadlineAction | None = Field(
        default=None,
        description="What a stall does: Report (the condition and Event only; the default), "
                    "Restart (every replica starts again, counted against backoffLimit), "
                    "Fail (the job fails with reason ProgressDeadlineExceeded).",
    )
    checkpoint_timeout_seconds: int | None = Field(
        default=None, ge=1, le=MAX_CHECKPOINT_TIMEOUT_SECONDS, strict=True,
        description="Before stopping a running job for any reason but its own end, ask its "
                    "checkpointing replica (the kind declares which) to save, and wait up to "
                    "this long for it to say it has (trainjobs_progress.checkpoint_saved), "
                    "then stop the pods. Unset: no checkpoint is asked; pods stop at once.",
    )
    failure_policy: list[FailureRule] | None = Field(
        default=None, max_length=MAX_RULES,
        description="Ordered rules: what a replica's failure means and what to do (the "
                    "first that matches decides; failures none matches keep their "
                    "restartPolicy's meaning). See docs/api.md, Failure rules.")
    checkpoint_before_deadline_seconds: int | None = Field(
        default=None, ge=1, le=MAX_CHECKPOINT_TIMEOUT_SECONDS, strict=True,
        description="With activeDeadlineSeconds and checkpointTimeoutSeconds: ask for a "
                    "checkpoint this long before the deadline (default: "
                    "checkpointTimeoutSeconds), so that it is saved before the job fails.",
    )
    scheduling_policy: SchedulingPolicy | None = None


class JobSpec(SpecModel):
    """The spec every kind shares. Framework plugins subclass it to add their own fields."""

    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    replica_specs: dict[str, ReplicaSpec] = Field(
        description="Replica specs keyed by replica type (each kind's CRD lists its own)."
    )
    managed_by: ManagedBy | None = Field(
        default=None,
        description=f"The controller that reconciles the job: absent or {MANAGED_BY_OPERATOR} "
                    f"(this operator), {MANAGED_BY_MULTIKUEUE} (Kueue's MultiKueue runs it in "
                    "a worker cluster; this cluster's operator leaves it alone). Immutable.")

    def manager(self) -> str:
        """Who reconciles the job (see :func:`job_manager`)."""
        run_policy = getattr(self.run_policy, "managed_by", None)
        return job_manager({"managedBy": self.managed_by,
                            "runPolicy": {"managedBy": run_policy}})


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    # Waiting for a queueing system (Kueue) to admit it, or evicted by it.
    QUEUED = "Queued"
    # Not exclusive: a Running job whose progress has not advanced for
    # runPolicy.progressDeadlineSeconds (True), or no longer (False, with why).
    STALLED = "Stalled"


class StatusModel(SpecModel):
    """Status is written by the operator; unknown fields from other versions are ignored."""

    model_config = ConfigDict(extra="ignore")


class Condition(StatusModel):
    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


class ReplicaStatus(StatusModel):
    active: int = Field(default=0, description="running + pending (Kubeflow's meaning).")
    running: int = Field(default=0, description="Replicas whose pod runs.")
    pending: int = Field(
        default=0, description="Replicas waiting for a pod to be created, scheduled or started.")
    pending_reason: str = Field(
        default="", description="Why pending replicas wait, e.g. 'Unschedulable: 0/2 nodes "
        "are available: 2 Insufficient cpu.' or 'QuotaExceeded: ...'.")
    succeeded: int = Field(default=0, description="Replicas that succeeded (completedIndexes).")
    failed: int = 0
    restarts: int = Field(
        default=0, description="Failures counted toward backoffLimit: recreations after a "
        "retryable failure plus in-place container restarts.")
    recreations: int = Field(
        default=0, description="Pods recreated, after a retryable failure or a loss.")
    lost: int = Field(
        default=0, description="Replicas taken by the cluster (preempted, evicted, deleted by "
        "someone else) and recreated; never counted toward backoffLimit.")
    last_lost_reason: str = Field(
        default="", description="Why the last replica of this type was lost, as the API said: "
        "the pod's DisruptionTarget reason (PreemptionByScheduler, EvictionByEvictionAPI, "
        "TerminationByKubelet, DeletionByTaintManager, DeletionByPodGC) or its Failed "
        "status reason (Evicted, NodeLost, ...); Deleted when it was deleted with no such "
        "reason (kubectl delete pod), Disappeared when the operator did not see it go.")
    started_indexes: str = Field(
        default="", description="Indexes whose current pod has started, e.g. '0-2,5'; a pod "
        "that disappears from one of them was lost.")
    restarted_at: datetime | None = Field(
        default=None, description="A failure rule restarted this replica type (or the job) "
                                  "then: its pods created before are recreated.")
    completed_indexes: str = Field(
        default="", description="Indexes that succeeded, e.g. '0-3' (as batch/v1 Jobs): they "
        "are never run again, also when their pod disappears.")


class OwnedObjectStatus(StatusModel):
    kind: str
    name: str
    phase: str = ""
    message: str = ""


#: Most metrics `status.progress` carries (a report may hold 64): the first by name order.
MAX_STATUS_METRICS = 16


class ProgressStatus(StatusModel):
    """How far the training program says it has got (docs/progress.md): the furthest
    replica's newest report, written at most once per interval per job."""

    step: int = Field(ge=0, description="The furthest replica's step (only grows per process).")
    total_steps: int | None = Field(default=None, ge=1, description="Steps in all, if known.")
    epoch: int | None = Field(default=None, ge=0)
    percent: float | None = Field(
        default=None, ge=0, le=100, description="100 * step / totalSteps, to 0.1.")
    eta_seconds: int | None = Field(
        default=None, ge=0, description="Seconds left at the recent rate of steps.")
    summary: str = Field(
        default="", description="What kubectl's Progress column shows: '1200/5000 (24%)', or "
                                "'1200' without totalSteps.")
    metrics: dict[str, float] = Field(
        default_factory=dict, max_length=MAX_STATUS_METRICS,
        description=f"The reporting replica's newest metrics: at most {MAX_STATUS_METRICS}, "
                    "the first by name order.")
    replica: str = Field(default="", description="The replica (pod) whose report this is.")
    last_report_time: datetime | None = Field(
        default=None, description="When the newest report this status shows was received.")
    last_progress_time: datetime | None = Field(
        default=None, description="When the step last advanced.")


#: Failure decisions a status keeps (the newest).
MAX_FAILURE_RECORDS = 10


class FailureRecord(StatusModel):
    """One failure and what was decided about it."""

    time: datetime
    replica: str = Field(description="The replica's pod.")
    pod_uid: str = Field(default="", description="Its uid: the failure is decided once.")
    replica_type: str
    exit_code: int | None = None
    reason: str = Field(description="Error, OOMKilled, Evicted, Preempted, NodeLost, "
                                    "DeadlineExceeded, ImagePullFailed or Stalled.")
    rule: str = Field(description="The rule that decided: a failurePolicy rule's name, or "
                                  "restartPolicy/<policy> for the default rules.")
    action: str = Field(description="RecreatePod, RestartReplicaType, RestartJob, FailJob, "
                                    "Ignore.")
    budget_left: int | None = Field(
        default=None, description="How often the rule may still act (its budget, else "
                                  "backoffLimit's); absent: unlimited.")
    escalated_from: list[str] | None = Field(
        default=None, description="The rules whose budget was spent, in order, before this "
                                  "one acted.")


class CheckpointStatus(StatusModel):
    """A checkpoint the job's checkpointing replica said it saved."""

    id: int = Field(ge=1, description="The request it answered.")
    step: int = Field(ge=0, description="The training step it saved.")
    uri: str = Field(description="Where, in the program's own words (a path, an s3:// URL).")
    time: datetime = Field(description="When the operator received the acknowledgement.")
    attempt: int = Field(default=0, ge=0, description="The job's attempt that saved it.")
    replica: str = Field(default="", description="The replica (pod) that saved it.")


class CheckpointRequestStatus(StatusModel):
    """The job's newest checkpoint request: why, of whom, until when, and how it ended."""

    id: int = Field(ge=1, description="Grows with each request; an answer names it.")
    reason: str = Field(description="What asked: Suspended, Queued (Kueue evicted or "
                                    "preempted the job), NewAttempt, Stalled, Rescaled, "
                                    "ActiveDeadline or UserRequest.")
    replica: str = Field(description="The checkpointing replica (pod) asked.")
    pod_uid: str = Field(default="", description="Its pod's uid.")
    attempt: int = Field(default=0, ge=0, description="The attempt that pod belongs to.")
    method: CheckpointMethod = Field(description="Report (in the reply to its progress "
                                                 "reports) or Signal (SIGTERM).")
    request_time: datetime
    deadline: datetime = Field(description="When the pods stop even without an answer.")
    outcome: CheckpointOutcome = CheckpointOutcome.PENDING


class JobStatus(StatusModel):
    """What the operator reports. `state` is the one condition that is True now."""

    state: str = ""
    replica_summary: str = Field(
        default="", description="Active/desired per replica type, e.g. 'Server 2/2, Worker 3/3'.")
    conditions: list[Condition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    start_time: datetime | None = None
    completion_time: datetime | None = None
    observed_generation: int | None = None
    counted_failures: list[str] = Field(
        default_factory=list,
        description="UIDs of failed pods already counted as restarts; makes counting idempotent.",
    )
    attempt: int = Field(
        default=0,
        description="For kinds whose replicas restart together (Caffe2Job): which attempt of "
                    "the rendezvous runs now; 0 first, one more each time the replicas restart.",
    )
    owned_objects: list[OwnedObjectStatus] | None = Field(
        default=None,
        description="What objects plugins created for the job report, e.g. a gang scheduler's "
                    "PodGroup: its phase and why it waits.",
    )
    progress: ProgressStatus | None = Field(
        default=None, description="The training program's reported progress, "
                                  "when it reports.")
    failures: list[FailureRecord] | None = Field(
        default=None, max_length=MAX_FAILURE_RECORDS,
        description=f"The newest {MAX_FAILURE_RECORDS} failures and what was decided (rule, "
                    "action, budget left).")
    restarts_seen: dict[str, int] | None = Field(
        default=None, description="With a failurePolicy: per pod uid, the in-place restarts "
                                  "(restartCount) its rules have judged.")
    failure_rule_uses: dict[str, list[datetime]] | None = Field(
        default=None, description="When each failurePolicy rule acted (its newest uses, as "
                                  "many as its budget): what its budget counts.")
    last_checkpoint: CheckpointStatus | None = Field(
        default=None, description="The newest checkpoint the job said it saved; the next "
                                  "pods get it as TRAINJOBS_CHECKPOINT_STEP/_URI.")
    checkpoint_request: CheckpointRequestStatus | None = Field(
        default=None, description="The newest checkpoint request (runPolicy."
                                  "checkpointTimeoutSeconds) and how it ended.")
    observed_checkpoint_request: str | None = Field(
        default=None, description="The trainjobs.io/checkpoint-request annotation value the "
                                "operator last asked a checkpoint for.")


class ObjectMeta(BaseModel):
    """The metadata fields trainjobs reads. The API server validates the rest."""

    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, extra="ignore",
                              frozen=True)

    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None


class Job(BaseModel):
    """A job of any kind: its kind, metadata, framework-specific spec and status."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, arbitrary_types_allowed=True)

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str
    metadata: ObjectMeta
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """`namespace/name`, the job's identity in queues and logs."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def to_api(self) -> dict[str, Any]:
        meta = self.metadata.model_dump(by_alias=True, exclude_none=True, mode="json",
                                        exclude_defaults=True)
        meta["name"] = self.metadata.name
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": meta,
            "spec": self.spec.to_api(),
        }
