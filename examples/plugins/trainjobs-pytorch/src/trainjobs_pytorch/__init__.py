"""The PyTorchJob kind for trainjobs: distributed PyTorch with one Master and any number of Workers.

A third-party plugin, and the worked example of the plugin author guide (docs/plugins.md): an
independent package that imports nothing from trainjobs but its public plugin API,
`trainjobs.plugin`, and is found through the `trainjobs` entry-point group.

What it adds: kind `PyTorchJob` (plural `pytorchjobs`, short name `ptj`), replica types Master
(exactly one) and Worker (zero or more), the framework container `pytorch` and port 23456
(named `pytorchjob-port`), as Kubeflow's PyTorchJob has them.

Environment contract: Kubeflow training-operator's PyTorchJob (pkg/controller.v1/pytorch,
`setPodEnv` in envvar.go and `MasterEnvVarGenerator` in master.go), set in every container of
every replica:

    MASTER_ADDR, PET_MASTER_ADDR  the master's host: its headless Service `<job>-master-0`
                                  (127.0.0.1 with `trainjobs run`)
    MASTER_PORT, PET_MASTER_PORT  the master's port (23456; a free port with `trainjobs run`)
    WORLD_SIZE                    replicas (master + workers) x nprocPerNode when that is a
                                  number, else the number of replicas
    RANK, PET_NODE_RANK           0 for the master, i + 1 for worker i
    PET_NNODES                    replicas (master + workers)
    PET_NPROC_PER_NODE            `spec.nprocPerNode`, default "1"

`MASTER_*`, `WORLD_SIZE` and `RANK` are what `torch.distributed.init_process_group` reads
(env://); the `PET_*` variables are torchrun's options (`PET_NNODES` is `--nnodes`), so a
template may run either `python train.py` or `torchrun train.py`. Where this differs from
Kubeflow, on purpose: `nprocPerNode` defaults to "1" (Kubeflow's "auto" makes torchrun start
one process per CPU on a machine without accelerators); PYTHONUNBUFFERED is not injected (it
is no part of the distributed contract, and trainjobs refuses templates that set a variable a
plugin sets); elastic mode (`elasticPolicy`, torchrun's c10d rendezvous) is refused; a Master
is required. With `trainjobs run` every container also gets GLOO_SOCKET_IFNAME=lo, so Gloo
binds and advertises the loopback address of this machine.

Success: the Master exits 0 (Kubeflow's rule). Workers still running are then cleaned up
according to `runPolicy.cleanPodPolicy`. Checkpoints (`runPolicy.checkpointTimeoutSeconds`):
the Master is the replica asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from trainjobs.plugin import (
    PLUGIN_API_VERSION,
    Framework,
    FrameworkPlugin,
    Job,
    JobSpec,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
    ReplicaType,
    SpecError,
    hookimpl,
)

__all__ = [
    "JOB_ROLE_LABEL",
    "PYTORCH",
    "PyTorchJobSpec",
    "PyTorchPlugin",
    "plugin",
    "rank_of",
    "world_size",
]

# Written against plugin API 1.x: a trainjobs whose plugin API has another major version
# would break this module in ways only a test could tell, so refuse to load with a clear
# message instead (trainjobs reports it as "plugin 'pytorch' from trainjobs-pytorch failed to
# import: ...").
if PLUGIN_API_VERSION.split(".")[0] != "1":
    raise ImportError(f"trainjobs-pytorch needs the trainjobs plugin API 1.x; this trainjobs "
                      f"has {PLUGIN_API_VERSION}")

#: The label the master pod gets (Kubeflow's `training.kubeflow.org/job-role: master`).
JOB_ROLE_LABEL = "trainjobs.io/job-role"
DEFAULT_NPROC_PER_NODE = "1"


class PyTorchJobSpec(JobSpec):
    """PyTorchJob's spec: the common fields and `nprocPerNode`."""

    nproc_per_node: str | None = Field(
        default=None,
        pattern=r"^(auto|cpu|gpu|[1-9][0-9]*)$",
        description="Processes per replica for torchrun (PET_NPROC_PER_NODE): a number, auto, "
                    "cpu or gpu. Default 1.",
    )


PYTORCH = Framework(
    kind="PyTorchJob",
    plural="pytorchjobs",
    short_names=("ptj",),
    name="pytorch",
    replica_types=(
        ReplicaType("Master", 1, 1,
                    description="Rank 0: hosts the rendezvous (MASTER_ADDR); its exit decides."),
        ReplicaType("Worker", 0, None, description="Ranks 1..n."),
    ),
    container_name="pytorch",
    default_port=23456,
    spec_model=PyTorchJobSpec,
    description="A distributed PyTorch job: one Master and Workers (Kubeflow's PyTorchJob "
                "environment: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, PET_*).",
)


def _is_master_key(key: str) -> bool:
    """Whether a replicaSpecs key names the Master."""
    rtype = PYTORCH.replica_type(key)
    return rtype is not None and rtype.name == "Master"


def _is_master(replica: Replica) -> bool:
    return _is_master_key(replica.type)


def rank_of(replica: Replica) -> int:
    """The master is rank 0; worker i is rank i + 1."""
    return 0 if _is_master(replica) else replica.index + 1


def _replicas(job: Job) -> int:
    return sum(rspec.replicas for rspec in job.spec.replica_specs.values())


def _nproc_per_node(job: Job) -> str:
    spec = job.spec
    value = spec.nproc_per_node if isinstance(spec, PyTorchJobSpec) else None
    return value or DEFAULT_NPROC_PER_NODE


def world_size(job: Job) -> int:
    """Replicas x nprocPerNode when that is a number, else the number of replicas (Kubeflow)."""
    nproc = _nproc_per_node(job)
    return _replicas(job) * (int(nproc) if nproc.isdigit() else 1)


def _master_key(job: Job) -> str:
    return next(key for key in job.spec.replica_specs if _is_master_key(key))


class PyTorchPlugin(FrameworkPlugin):
    """`FrameworkPlugin` supplies the hooks for this kind; three methods say what is specific."""

    framework = PYTORCH

    def validate(self, job: Job) -> list[SpecError]:
        return [
            SpecError(f"spec.replicaSpecs.{key}.elasticPolicy",
                      "PyTorchJob runs a fixed number of replicas: elastic training (torchrun's "
                      "c10d rendezvous) is not supported; remove elasticPolicy")
            for key, rspec in job.spec.replica_specs.items() if rspec.elastic_policy is not None
        ]

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> ReplicaEnv:
        master = ctx.cluster.address(Replica(_master_key(job), 0))
        rank = str(rank_of(replica))
        values = {
            "MASTER_PORT": str(master.port),
            "PET_MASTER_PORT": str(master.port),
            "MASTER_ADDR": master.host,
            "PET_MASTER_ADDR": master.host,
            "WORLD_SIZE": str(world_size(job)),
            "RANK": rank,
            "PET_NPROC_PER_NODE": _nproc_per_node(job),
            "PET_NODE_RANK": rank,
            "PET_NNODES": str(_replicas(job)),
        }
        if ctx.backend == "local":
            values["GLOO_SOCKET_IFNAME"] = "lo"
        return ReplicaEnv(values, all_containers=True)

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        return any(_is_master(o.replica) and o.phase is ReplicaPhase.SUCCEEDED
                   for o in outcomes)

    def checkpoint_replica(self, job: Job) -> Replica | None:
        """The Master (rank 0) saves when trainjobs asks for a checkpoint (plugin API 1.14;
        an older trainjobs never calls it)."""
        return Replica(_master_key(job), 0)

    # A raw hook beside the FrameworkPlugin methods: it must check the kind itself.
    @hookimpl
    def trainjobs_adjust_pod(
        self, job: Job, replica: Replica, pod: dict[str, Any], ctx: RenderContext
    ) -> None:
        if job.kind == PYTORCH.kind and _is_master(replica):
            pod["metadata"]["labels"][JOB_ROLE_LABEL] = "master"


#: The object the entry point names: `pytorch = "trainjobs_pytorch:plugin"`.
plugin = PyTorchPlugin()
