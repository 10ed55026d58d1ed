"""The data that flows between the core and plugins.

Why plain frozen dataclasses: hooks return data and the core does all I/O (the lesson of
training-operator v1, whose template-method interface made every framework copy the status
logic). These types are part of the public plugin API; change them deliberately.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal, TypeVar

from trainjobs.api.models import GROUP, VERSION, JobSpec, JobStatus
from trainjobs.plugin.capabilities import Capability
from trainjobs.plugin.cel import CelRule

V = TypeVar("V")
C = TypeVar("C", bound=Capability)

__all__ = [
    "Address",
    "ClusterLayout",
    "Framework",
    "ObjectStatus",
    "OwnedResource",
    "RenderContext",
    "Replica",
    "ReplicaEnv",
    "ReplicaOutcome",
    "ReplicaPhase",
    "ReplicaType",
]


@dataclass(frozen=True)
class ReplicaType:
    """One replica type of a kind, e.g. MXNet's Server, with its allowed replica counts."""

    name: str
    min_replicas: int = 0
    max_replicas: int | None = None
    aliases: tuple[str, ...] = ()
    description: str = ""
    # True when a plugin supplies the framework container if the template lacks it
    # (TensorFlow's PS gets a standard gRPC server).
    container_optional: bool = False
    # True when replicas of this type may carry an elasticPolicy: the job keeps Running while
    # at least minReplicas of them run. False (the default) refuses elasticPolicy here.
    elastic: bool = False
    # False when the framework does not listen on the framework port in these replicas
    # (MXNet's servers and workers, Gloo's shards, TensorFlow's evaluator): the core then
    # adds no containerPort, which under hostNetwork would become a port of the node.
    listens: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name and every alias, as they may appear as replicaSpecs keys."""
        return (self.name, *self.aliases)


@dataclass(frozen=True)
class Framework:
    """Static description of a job kind, declared by a plugin's `trainjobs_frameworks` hook."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    name: str
    replica_types: tuple[ReplicaType, ...]
    container_name: str
    default_port: int
    spec_model: type[JobSpec] = JobSpec
    env_in_all_containers: bool = False
    description: str = ""
    cel_rules: tuple[CelRule, ...] = ()
    package: str = field(default="", compare=False)
    # True when no replica can rejoin the others alone (Gloo's rendezvous: a restarted shard
    # meets a group that has moved on): a retryable failure of one replica restarts every
    # replica, as a new attempt (`status.attempt`) whose environment may differ (Caffe2's
    # RUN_ID). Pods then run with restartPolicy Never; OnFailure/Always mean: recreate them.
    replicas_restart_together: bool = False
    # Since plugin API 1.8: the kind's API group and version, for a kind served in another
    # project's group (a compatibility plugin: Kubeflow's kubeflow.org/v1 TFJob).
    group: str = GROUP
    version: str = VERSION
    # Since 1.8: the model of the kind's `status`, for its CRD schema: a JobStatus subclass
    # with the fields `trainjobs_adjust_status` adds (the API server prunes any others).
    status_model: type[JobStatus] = JobStatus
    # Since 1.9: what the kind's jobs are, for feature plugins (trainjobs.plugin.capabilities):
    # e.g. TensorBoard(), ParameterServers("PS"), RedisRendezvous(managed=...).
    capabilities: tuple[Capability, ...] = ()
    # Since 1.10: replicaSpecs keys name their type in any case (`worker` is `Worker`), as
    # another project's defaulting has it (Kubeflow's); the spec model canonicalises them.
    replica_keys_any_case: bool = False
    # Since 1.12: how `runPolicy.suspend` shows in the status. "batch" (trainjobs' kinds): as
    # batch/v1 Jobs, reason JobSuspended/JobResumed, startTime cleared while suspended.
    # "kubeflow": as training-operator v1.9's ReconcileJobs (Kueue's kubeflow integrations
    # drive the kind through it): reason `<Kind>Suspended`/`<Kind>Resumed`, message
    # "<Kind> <name> is suspended.", a True Running set False with that reason, startTime
    # kept while suspended. Both delete the pods, Services and PodGroups whatever
    # cleanPodPolicy says, count active 0, and start the clock again on resume.
    suspend_style: Literal["batch", "kubeflow"] = "batch"

    def capability(self, kind: type[C]) -> C | None:
        """The kind's capability of that type, if it declares one."""
        for declared in self.capabilities:
            if isinstance(declared, kind):
                return declared
        return None

    @property
    def api_version(self) -> str:
        """`group/version`, as the kind's objects write it."""
        return f"{self.group}/{self.version}"

    @property
    def replica_specs_field(self) -> str:
        """The spec field that holds the replica specs: `replicaSpecs`, unless the spec model
        names it otherwise (an alias of `replica_specs`, e.g. Kubeflow's `tfReplicaSpecs`)."""
        return self.spec_model.model_fields["replica_specs"].alias or "replicaSpecs"

    @property
    def port_name(self) -> str:
        """Name of the container/service port that carries the framework's traffic.

        An IANA service name: at most 15 characters, not ending with '-'.
        """
        return f"{self.kind.lower()}-port"[:15].rstrip("-")

    def replica_type(self, key: str) -> ReplicaType | None:
        """The replica type a replicaSpecs key names (by name or alias; in any case with
        `replica_keys_any_case`), if any."""
        for rtype in self.replica_types:
            if key in rtype.names or (self.replica_keys_any_case and
                                      key.lower() in (n.lower() for n in rtype.names)):
                return rtype
        return None


@dataclass(frozen=True, order=True)
class Replica:
    """One replica of a job: its replicaSpecs key (as the user wrote it) and its index."""

    type: str
    index: int

    @property
    def type_lower(self) -> str:
        return self.type.lower()

    def object_name(self, job_name: str) -> str:
        """`<job>-<lowercase type>-<index>`: the pod's and the headless Service's name."""
        return f"{job_name}-{self.type_lower}-{self.index}"


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterLayout:
    """Where every replica of a job can be reached.

    The Kubernetes backend writes each replica's headless Service name and the framework port;
    the local backend writes 127.0.0.1 and ports it allocated. Plugins build their cluster specs
    (MX_CONFIG, TF_CONFIG, ...) from this and nothing else, so both backends share them.
    """

    addresses: Mapping[Replica, Address]
    job_name: str = ""
    # Local backend only: allocates an address for a named component (e.g. a managed Redis).
    allocate: Callable[[str, int], Address] | None = field(default=None, compare=False)

    def component(self, name: str, port: int) -> Address:
        """Where a job-owned component (a Service `<job>-<name>` on Kubernetes) listens."""
        if self.allocate is not None:
            return self.allocate(name, port)
        return Address(f"{self.job_name}-{name}", port)

    def of_type(self, rtype: str) -> list[Address]:
        """Addresses of every replica of one type (a replicaSpecs key), in index order."""
        return list(self._by_type.get(rtype, ()))

    def shared(self, key: Hashable, build: Callable[[], V]) -> V:
        """`build()`, called once per layout (that is, once per rendering of the job) for
        each `key`: for what every replica's environment repeats, such as the cluster part of
        TF_CONFIG. Without it, a plugin that rebuilds the list of every address for every
        replica makes rendering quadratic in CPU, not only in the bytes it writes."""
        memo = self._memo
        if key not in memo:
            memo[key] = build()
        value: V = memo[key]
        return value

    @cached_property
    def _by_type(self) -> dict[str, tuple[Address, ...]]:
        grouped: dict[str, list[tuple[int, Address]]] = {}
        for replica, address in self.addresses.items():
            grouped.setdefault(replica.type, []).append((replica.index, address))
        return {t: tuple(a for _, a in sorted(found, key=lambda p: p[0]))
                for t, found in grouped.items()}

    @cached_property
    def _memo(self) -> dict[Hashable, Any]:
        return {}

    def address(self, replica: Replica) -> Address:
        return self.addresses[replica]


@dataclass(frozen=True)
class RenderContext:
    """Facts about where the job runs, given to every rendering hook."""

    backend: Literal["kubernetes", "local"]
    framework: Framework
    cluster: ClusterLayout
    controller_config: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicaEnv:
    """Environment variables a plugin adds to one replica's containers.

    `all_containers`: False puts them in the framework's container only (TensorFlow, Caffe2);
    True in every container of the pod (MXNet's contract).
    """

    values: Mapping[str, str]
    all_containers: bool = False


class ReplicaPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class ReplicaOutcome:
    """What is known of one replica now, as the success rule sees it."""

    replica: Replica
    phase: ReplicaPhase
    exit_code: int | None = None


@dataclass(frozen=True)
class OwnedResource:
    """A kind of object a plugin creates for jobs (through `trainjobs_extra_objects`) that the
    operator must watch: to report its status (`trainjobs_object_status`), and, with
    `with_replicas`, to delete it whenever the job's pods go (suspend; a finished job's
    cleanup unless cleanPodPolicy is None) and create it again on resume — like a gang
    scheduler's PodGroup, which must not hold a place in a queue for pods that do not exist.
    """

    api_version: str  # e.g. "scheduling.volcano.sh/v1beta1"
    kind: str
    plural: str
    with_replicas: bool = False


@dataclass(frozen=True)
class ObjectStatus:
    """What one object a plugin created for a job reports now, shown in the job's
    `status.ownedObjects`: e.g. a PodGroup's phase and why it waits."""

    kind: str
    name: str
    phase: str
    message: str = ""
