"""The TfJob kind: TensorFlow with a Chief (or Master), Workers, parameter servers and an Evaluator.

Environment contract (docs/api.md, "Environment contracts"): TF_CONFIG in the `tensorflow`
container, when the job has more than one replica, with `chief` (or `master` when the user wrote
Master) in the cluster and the evaluator left out of it. Success: the Chief exits 0; with no
Chief, Worker 0 (or every Worker with `successPolicy: AllWorkers`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from trainjobs.labels import LABEL_JOB_ROLE
from trainjobs.plugin import (
    CelRule,
    Framework,
    FrameworkPlugin,
    Job,
    JobSpec,
    ParameterServers,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
    ReplicaType,
    SpecError,
    TensorBoard,
    TensorBoardSpec,
    hookimpl,
)

__all__ = [
    "TENSORFLOW",
    "TensorBoardSpec",
    "TensorFlowPlugin",
    "TfJobSpec",
    "master_replica",
    "plugin",
]

JOB_ROLE_LABEL = LABEL_JOB_ROLE


class TfJobSpec(JobSpec):
    success_policy: Literal["", "AllWorkers"] = Field(
        default="", description='"" (the Chief, else Worker 0 decides) or AllWorkers.')
    tensorboard: TensorBoardSpec | None = Field(
        default=None, description="Run a TensorBoard Deployment and Service <job>-tensorboard.")
    tf_image: str | None = Field(
        default=None, min_length=1,
        description="Image of the default PS server (a PS replica with no tensorflow "
                    "container); default: the controller config's tfImage, else "
                    "tensorflow/tensorflow:2.21.0. As the original TfJob's tfImage.")


TENSORFLOW = Framework(
    kind="TfJob",
    plural="tfjobs",
    short_names=("tfj",),
    name="tensorflow",
    replica_types=(
        ReplicaType("Chief", 0, 1, aliases=("Master",),
                    description="The chief (or master): at most one; its exit decides."),
        ReplicaType("Worker", 0, None, description="Workers.", elastic=True),
        ReplicaType("PS", 0, None, container_optional=True,
                    description="Parameter servers; without a `tensorflow` container (or "
                                "without a template) they get a standard TensorFlow gRPC "
                                "server."),
        # Not in TF_CONFIG's cluster: nothing connects to it, it serves no port.
        ReplicaType("Evaluator", 0, 1, listens=False,
                    description="At most one evaluator, outside the cluster."),
    ),
    container_name="tensorflow",
    default_port=2222,
    spec_model=TfJobSpec,
    cel_rules=(
        CelRule(" || ".join(f"('{k}' in self.spec.replicaSpecs && "
                            f"self.spec.replicaSpecs['{k}'].replicas > 0)"
                            for k in ("Chief", "Master", "Worker")),
                "a TfJob needs a Chief (or Master) or at least one Worker: their exit decides "
                "the job's success"),
    ),
    description="A distributed TensorFlow job: Chief/Master, Workers, PS and an Evaluator.",
    # spec.tensorboard runs a TensorBoard (its CEL rule on the name's length comes with it);
    # a PS without a tensorflow container runs the standard gRPC server.
    capabilities=(TensorBoard(), ParameterServers("PS")),
)


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _key_of(job: Job, type_name: str) -> str | None:
    for key in job.spec.replica_specs:
        rtype = TENSORFLOW.replica_type(key)
        if rtype is not None and rtype.name == type_name:
            return key
    return None


def master_replica(job: Job) -> Replica | None:
    """The replica whose exit decides success, if a single one does."""
    chief = _key_of(job, "Chief")
    if chief is not None and job.spec.replica_specs[chief].replicas > 0:
        return Replica(chief, 0)
    worker = _key_of(job, "Worker")
    spec: TfJobSpec = job.spec  # type: ignore[assignment]
    if worker is not None and spec.success_policy != "AllWorkers":
        return Replica(worker, 0)
    return None


class TensorFlowPlugin(FrameworkPlugin):
    framework = TENSORFLOW

    def checkpoint_replica(self, job: Job) -> Replica | None:
        """The Chief (or Master), as TensorFlow's own convention has the chief save; else
        Worker 0. A job of only PS and Evaluator has none."""
        keys = {}
        for key, rspec in job.spec.replica_specs.items():
            rtype = self.framework.replica_type(key)
            if rtype is not None and rspec.replicas > 0:
                keys[rtype.name] = key
        for name in ("Chief", "Worker"):
            if name in keys:
                return Replica(keys[name], 0)
        return None

    def validate(self, job: Job) -> list[SpecError]:
        chief, worker = _key_of(job, "Chief"), _key_of(job, "Worker")
        deciders = [k for k in (chief, worker) if k and job.spec.replica_specs[k].replicas > 0]
        if not deciders:
            return [SpecError("spec.replicaSpecs", "a TfJob needs a Chief (or Master) or at "
                              "least one Worker: their exit decides the job's success")]
        return []

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> ReplicaEnv | None:
        total = sum(r.replicas for r in job.spec.replica_specs.values())
        if total <= 1:
            return None
        # The cluster, the same for every replica, is serialised once per rendering and
        # spliced in (byte for byte what json.dumps of the whole object writes): serialising
        # every address again for every replica made rendering quadratic in CPU.
        cluster = ctx.cluster.shared("TF_CONFIG.cluster", lambda: _json({
            key.lower(): [str(a) for a in ctx.cluster.of_type(key)]
            for key, rspec in job.spec.replica_specs.items()
            if rspec.replicas > 0 and TENSORFLOW.replica_type(key).name != "Evaluator"  # type: ignore[union-attr]
        }))
        task = _json({"type": replica.type_lower, "index": replica.index})
        return ReplicaEnv({"TF_CONFIG": f'{{"cluster":{cluster},"task":{task},'
                                        f'"environment":"cloud"}}'})

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        master = master_replica(job)
        if master is not None:
            return any(o.replica == master and o.phase is ReplicaPhase.SUCCEEDED
                       for o in outcomes)
        workers = [o for o in outcomes if o.replica.type == _key_of(job, "Worker")]
        return bool(workers) and all(o.phase is ReplicaPhase.SUCCEEDED for o in workers)

    @hookimpl
    def trainjobs_adjust_pod(
        self, job: Job, replica: Replica, pod: dict[str, Any], ctx: RenderContext
    ) -> None:
        if job.kind == TENSORFLOW.kind and replica == master_replica(job):
            pod["metadata"]["labels"][JOB_ROLE_LABEL] = "master"


plugin = TensorFlowPlugin()
