"""Builds the pods, headless Services and extra objects a job should own.

Why here and pure: both backends (Kubernetes and local processes) and `trainjobs render` need
exactly the same objects, so they are built in one place from the job, the plugins and a
`ClusterLayout`, with no I/O. The order is fixed: base pod from the template, plugins'
`adjust_pod` edits, then the injected environment and the framework port, so a container a
plugin adds (TensorFlow's PS server) receives the environment too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainjobs.api.models import Job, RestartPolicy
from trainjobs.core.progress import (
    ENV_CHECKPOINT_STEP,
    ENV_CHECKPOINT_URI,
    ProgressEndpoint,
    progress_env,
)
from trainjobs.core.progress_pod import add_token_volume
from trainjobs.errors import SpecError, SpecInvalid
from trainjobs.labels import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_REPLICAS,
    LABEL_FRAMEWORK,
    LABEL_JOB_NAME,
    LABEL_JOB_ROLE,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Address, ClusterLayout, Framework, RenderContext, Replica

__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_REPLICAS",
    "LABEL_FRAMEWORK",
    "LABEL_JOB_NAME",
    "LABEL_JOB_ROLE",
    "LABEL_REPLICA_INDEX",
    "LABEL_REPLICA_TYPE",
    "PLACEHOLDER_UID",
    "RenderedJob",
    "Rendering",
    "expected_replicas",
    "kubernetes_layout",
    "named_port",
    "pod_restart_policy",
    "render_job",
    "render_key",
    "replica_counts",
    "replica_port",
]

# A job read from a file has no uid until the API server assigns one.
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"

POD_RESTART_POLICY = {
    RestartPolicy.NEVER: "Never",
    RestartPolicy.EXIT_CODE: "Never",
    RestartPolicy.ON_FAILURE: "OnFailure",
    RestartPolicy.ALWAYS: "Always",
}


@dataclass
class RenderedJob:
    """Everything a job should own, keyed by object name. (The operator's are mappings that
    decode each object only when it is read: see operator/cache.py, PackedRender.)"""

    pods: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    services: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    extras: list[dict[str, Any]] = field(default_factory=list)
    replicas: dict[str, Replica] = field(default_factory=dict)

    def manifests(self) -> list[dict[str, Any]]:
        """Every object in a stable order: per replica its pod then its Service, then extras."""
        out: list[dict[str, Any]] = []
        for name in self.pods:
            out.append(self.pods[name])
            if name in self.services:
                out.append(self.services[name])
        return out + self.extras


def pod_restart_policy(policy: RestartPolicy, framework: Framework) -> str:
    """The restartPolicy of a replica's pods: from its replicaSpec's policy; always Never
    where replicas restart together (a failure must reach the planner, which restarts all)."""
    return "Never" if framework.replicas_restart_together else POD_RESTART_POLICY[policy]


def expected_replicas(job: Job) -> list[Replica]:
    """Every replica the spec asks for, in replicaSpecs order then by index."""
    return [Replica(key, i) for key, rspec in job.spec.replica_specs.items()
            for i in range(rspec.replicas)]


def _framework_container(template: dict[str, Any], framework: Framework) -> dict[str, Any] | None:
    for container in template.get("spec", {}).get("containers", []):
        if container.get("name") == framework.container_name:
            return dict(container)
    return None


def named_port(template: dict[str, Any], framework: Framework) -> int | None:
    """The container port the template names `<kind>-port` in the framework container."""
    container = _framework_container(template, framework)
    for port in (container or {}).get("ports", []):
        if port.get("name") == framework.port_name:
            return int(port["containerPort"])
    return None


def replica_port(job: Job, replica_type: str, framework: Framework) -> int:
    """The framework port of a replica type: a container port named `<kind>-port`, else default."""
    port = named_port(job.spec.replica_specs[replica_type].template, framework)
    return framework.default_port if port is None else port


def kubernetes_layout(job: Job, framework: Framework) -> ClusterLayout:
    """Each replica reached through its headless Service's name and the framework port."""
    return ClusterLayout(
        {r: Address(r.object_name(job.name), replica_port(job, r.type, framework))
         for r in expected_replicas(job)},
        job_name=job.name,
    )


def owner_reference(job: Job) -> dict[str, Any]:
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "name": job.name,
        "uid": job.metadata.uid or PLACEHOLDER_UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_labels(job: Job, framework: Framework) -> dict[str, str]:
    return {LABEL_JOB_NAME: job.name, LABEL_FRAMEWORK: framework.name}


def replica_labels(job: Job, framework: Framework, replica: Replica) -> dict[str, str]:
    return {
        **job_labels(job, framework),
        LABEL_REPLICA_TYPE: replica.type_lower,
        LABEL_REPLICA_INDEX: str(replica.index),
    }


def replica_counts(job: Job) -> str:
    """The job's replica counts as ANNOTATION_REPLICAS writes them: "Server=1,Worker=4"."""
    return ",".join(f"{k}={r.replicas}" for k, r in sorted(job.spec.replica_specs.items()))


class Rendering:
    """A job's desired objects, rendered one replica at a time.

    Why a stream: a framework that lists every address in every replica's environment
    (TF_CONFIG, MX_CONFIG) makes a job's rendered objects grow with the square of its
    replicas (2,000 MxJob replicas: ~160 MB as text). Validation needs only to see each pod
    once and the operator keeps them compressed, so neither ever holds them all at once.
    """

    def __init__(
        self,
        job: Job,
        framework: Framework,
        plugins: PluginManager,
        backend: Literal["kubernetes", "local"] = "kubernetes",
        layout: ClusterLayout | None = None,
        controller_config: Mapping[str, Any] | None = None,
        progress: ProgressEndpoint | None = None,
    ) -> None:
        if progress is not None and backend != "local" and not progress.audience:
            # On a cluster a replica proves who it is with a projected token of our audience
            # (docs/progress.md); an endpoint without one would take anyone's reports.
            raise ValueError("a cluster progress endpoint needs a token audience")
        self.job = job
        self.progress = progress
        self.framework = framework
        self.plugins = plugins
        self.ctx = RenderContext(
            backend=backend,
            framework=framework,
            cluster=layout or kubernetes_layout(job, framework),
            controller_config={} if controller_config is None else controller_config,
        )

    def replicas(self) -> Iterator[tuple[str, Replica, dict[str, Any], dict[str, Any]]]:
        """(name, replica, pod, Service) per replica, in order; then raises `SpecInvalid` if
        any environment collided (every problem of every replica at once)."""
        job, errors = self.job, list[SpecError]()
        counts = replica_counts(job)
        for replica in expected_replicas(job):
            pod = _render_pod(job, replica, self.ctx, self.plugins, errors, self.progress)
            pod["metadata"].setdefault("annotations", {})[ANNOTATION_REPLICAS] = counts
            service = _render_service(job, replica, self.ctx)
            self.plugins.adjust_service(job, replica, service, self.ctx)
            yield replica.object_name(job.name), replica, pod, service
        if errors:
            raise SpecInvalid(errors)

    def extras(self) -> list[dict[str, Any]]:
        """The plugins' extra objects, owned by and labelled for the job."""
        job, out = self.job, []
        for obj in self.plugins.extra_objects(job, self.ctx):
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            meta["namespace"] = job.namespace
            meta["ownerReferences"] = [owner_reference(job)]
            meta.setdefault("labels", {}).update(job_labels(job, self.framework))
            out.append(obj)
        return out


def render_key(job: Job) -> tuple[int, int]:
    """What of a job's status its rendering depends on (the attempt, the last checkpoint's
    id): a backend that keeps a rendering renders again when it changes."""
    saved = job.status.last_checkpoint
    return job.status.attempt, saved.id if saved is not None else 0


def render_job(job: Job, framework: Framework, plugins: PluginManager,
               **options: Any) -> RenderedJob:
    """The desired objects of `job`, all at once (`options`: Rendering's backend, layout,
    controller_config, progress). Raises `SpecInvalid` on environment collisions."""
    rendering = Rendering(job, framework, plugins, **options)
    pods: dict[str, dict[str, Any]] = {}
    services: dict[str, dict[str, Any]] = {}
    replicas: dict[str, Replica] = {}
    for name, replica, pod, service in rendering.replicas():
        replicas[name], pods[name], services[name] = replica, pod, service
    return RenderedJob(pods, services, rendering.extras(), replicas)


def _render_pod(
    job: Job,
    replica: Replica,
    ctx: RenderContext,
    plugins: PluginManager,
    errors: list[SpecError],
    progress: ProgressEndpoint | None = None,
) -> dict[str, Any]:
    framework = ctx.framework
    rspec = job.spec.replica_specs[replica.type]
    # No template: a plugin supplies the container (TfJob's PS gets the default PS server).
    template = copy.deepcopy(rspec.template) or {"spec": {"containers": []}}
    meta = template.get("metadata") or {}
    labels = {**meta.get("labels", {}), **replica_labels(job, framework, replica)}
    pod_meta: dict[str, Any] = {
        "name": replica.object_name(job.name),
        "namespace": job.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }
    if meta.get("annotations"):
        pod_meta["annotations"] = dict(meta["annotations"])
    spec = template["spec"]
    # A different restartPolicy in the template is refused by validation, never replaced.
    spec["restartPolicy"] = pod_restart_policy(rspec.restart_policy, framework)
    if framework.replicas_restart_together:
        pod_meta.setdefault("annotations", {})[ANNOTATION_ATTEMPT] = str(job.status.attempt)
    scheduling = job.spec.run_policy.scheduling_policy
    if scheduling is not None and scheduling.priority_class and "priorityClassName" not in spec:
        spec["priorityClassName"] = scheduling.priority_class
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}
    plugins.adjust_pod(job, replica, pod, ctx)
    _inject_env(job, replica, pod, ctx, plugins, errors, progress)
    if progress is not None and progress.audience:
        add_token_volume(pod, progress, f"spec.replicaSpecs.{replica.type}", errors)
    rtype = framework.replica_type(replica.type)
    if rtype is None or rtype.listens:
        _ensure_port(pod, ctx.cluster.addresses[replica].port, ctx.framework)
    return pod


def _inject_env(
    job: Job,
    replica: Replica,
    pod: dict[str, Any],
    ctx: RenderContext,
    plugins: PluginManager,
    errors: list[SpecError],
    progress: ProgressEndpoint | None = None,
) -> None:
    """Prepends the plugins' variables, so user variables may refer to them with $(NAME).
    With `progress`, every container also gets the core's progress contract (any kind,
    a plugin's too, without the plugin doing anything), and with a `status.lastCheckpoint`
    the checkpoint to start from."""
    injected: dict[str, str] = {}
    everywhere: dict[str, str] = {} if progress is None else progress_env(
        progress.url, progress.interval, namespace=job.namespace, job=job.name,
        uid=job.metadata.uid or "", replica=replica.object_name(job.name),
        replica_type=replica.type, replica_index=replica.index, attempt=job.status.attempt,
        token_file=progress.token_file, ca=progress.ca)
    saved = job.status.last_checkpoint
    if saved is not None:  # the next pods start from the job's newest checkpoint
        everywhere.update({ENV_CHECKPOINT_STEP: str(saved.step), ENV_CHECKPOINT_URI: saved.uri})
    for env in plugins.replica_env(job, replica, ctx):
        for key, value in env.values.items():
            if key in injected or key in everywhere:
                errors.append(SpecError(f"spec.replicaSpecs.{replica.type}", f"two plugins "
                                        f"set the environment variable {key}"))
            (everywhere if env.all_containers else injected)[key] = value
    for i, container in enumerate(pod["spec"]["containers"]):
        values = dict(everywhere)
        if container.get("name") == ctx.framework.container_name:
            values.update(injected)
        if not values:
            continue
        user_env = container.get("env", [])
        for var in user_env:
            if var.get("name") in values:
                errors.append(SpecError(
                    f"spec.replicaSpecs.{replica.type}.template.spec.containers[{i}].env",
                    f"{var['name']} is set by trainjobs ({ctx.framework.name} environment "
                    f"contract); remove it from the template"))
        container["env"] = [{"name": k, "value": v} for k, v in values.items()] + user_env


def _ensure_port(pod: dict[str, Any], port: int, framework: Framework) -> None:
    for container in pod["spec"]["containers"]:
        if container.get("name") != framework.container_name:
            continue
        ports = container.setdefault("ports", [])
        if not any(p.get("name") == framework.port_name for p in ports):
            ports.append({"name": framework.port_name, "containerPort": port})


def _render_service(job: Job, replica: Replica, ctx: RenderContext) -> dict[str, Any]:
    labels = replica_labels(job, ctx.framework, replica)
    port = ctx.cluster.addresses[replica].port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": replica.object_name(job.name),
            "namespace": job.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            # Peers must resolve each other while they start, before any is Ready.
            "publishNotReadyAddresses": True,
            "selector": dict(labels),
            "ports": [{"name": ctx.framework.port_name, "port": port, "targetPort": port}],
        },
    }
