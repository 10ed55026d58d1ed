"""Every hook a trainjobs plugin can implement. The one place that defines the plugin contract.

The hooks, numbered in the order of this module. That is not one sequence: each runs at the
moment named (docs/plugins.md has the details). 1 runs once when plugins load; 8, 9 and 10
run once when the operator starts, in that order, before it reads any job; 2-7 and 11-12 run
for jobs, again and again (3-6 in that order within a rendering).

1. `trainjobs_frameworks` — once at load: which kinds the plugin adds.
2. `trainjobs_validate` — for each job read: problems only a plugin can see. Errors of every
   plugin are collected, never only the first.
3. `trainjobs_adjust_pod` — for each replica: edits to the pod the core built.
4. `trainjobs_replica_env` — for each replica, right after its pod's edits: environment
   variables to inject.
5. `trainjobs_adjust_service` — for each replica, after its pod: labels and annotations of its
   headless Service (since 1.10).
6. `trainjobs_extra_objects` — for each job, after its pods: further objects the job owns.
7. `trainjobs_job_succeeded` — on every reconcile of a running job: the kind's success rule.
8. `trainjobs_config_overrides` — once when the operator starts: controller config sections
   its command-line options set (since 1.11).
9. `trainjobs_check_config` — once when the operator starts, after 8: refuse a malformed
   section of the controller config, naming the key (since 1.11).
10. `trainjobs_owned_resources` — once when the operator starts, after 9: kinds of extra
   objects it must watch (since 1.3).
11. `trainjobs_object_status` — on every reconcile, for each watched extra object: what it
   reports, for the job's status (since 1.3).
12. `trainjobs_adjust_status` — whenever the operator writes a job's status: fields another
   project's clients read (since 1.8).
13. `trainjobs_checkpoint_replica` — when a running job is about to be stopped (not by its
   own end) and has `runPolicy.checkpointTimeoutSeconds`: which replica to ask for a
   checkpoint (since 1.14).

Steps 3-6, in that order, are one rendering of the job. Validation renders it too, with
placeholder Kubernetes addresses, so environment collisions are refused before anything runs.

Rules every implementation follows (reconcile runs again and again on the same job):
- Deterministic and idempotent: the same job and context give the same answer.
- Return data; never call the API server or start processes. The core does all I/O.
- Look at `job.kind` (or `ctx.framework`) and return None for kinds you do not handle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pluggy

from trainjobs.api.models import Job
from trainjobs.errors import SpecError
from trainjobs.plugin.types import (
    Framework,
    ObjectStatus,
    OwnedResource,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
)

PROJECT = "trainjobs"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["PROJECT", "hookimpl", "hookspec"]


@hookspec
def trainjobs_frameworks() -> Sequence[Framework]:
    """Declare the job kinds this plugin adds.

    Called once when plugins load. Return every `Framework` the plugin provides (usually one).
    Two plugins declaring the same kind is a load error.
    """
    raise NotImplementedError


@hookspec
def trainjobs_validate(job: Job, framework: Framework) -> Sequence[SpecError] | None:
    """Problems with `job` that its schema cannot express.

    Called before anything is created (and by `trainjobs run`/`render`). Return a list of
    `SpecError(path, message)`, path being the dotted field path (e.g.
    `spec.replicaSpecs.Worker.replicas`); an empty list or None when all is well. The core has
    already checked replica types, counts and pod templates.
    """
    raise NotImplementedError


@hookspec
def trainjobs_adjust_pod(
    job: Job, replica: Replica, pod: dict[str, Any], ctx: RenderContext
) -> None:
    """Edit the pod the core built for `replica`, in place.

    `pod` is a full core/v1 Pod (a dict) built from the replica's template: name, namespace,
    labels, ownerReferences and restartPolicy set. The plugins' environment and the framework
    port are added after this hook, so a framework container added here (TensorFlow's PS
    server) receives them too. Add
    containers, volumes, labels or env; do not rename the pod or change the core's labels.
    Runs in plugin load order. Must be idempotent: the core rebuilds the pod every time.
    """
    raise NotImplementedError


@hookspec
def trainjobs_replica_env(
    job: Job, replica: Replica, ctx: RenderContext
) -> ReplicaEnv | None:
    """Environment variables for one replica's containers.

    `ctx.cluster` holds every replica's address. The variables go into the framework's
    container, or every container with `ReplicaEnv(all_containers=True)`, before the
    template's own. Two plugins setting the same variable is an error; a user's variable of the
    same name in the template refuses the job.
    """
    raise NotImplementedError


@hookspec
def trainjobs_adjust_service(
    job: Job, replica: Replica, service: dict[str, Any], ctx: RenderContext
) -> None:
    """Edit the headless Service the core built for `replica`, in place. Since plugin API 1.10.

    `service` is a full core/v1 Service (a dict): name, namespace, labels, ownerReferences,
    selector and port set. Add labels or annotations (another project's, for the selectors
    its users wrote: the Kubeflow plugin's `training.kubeflow.org/*`); do not rename the
    Service nor change its selector, ports or the core's labels. Runs in plugin load order;
    must be idempotent (the core rebuilds it every time).
    """
    raise NotImplementedError


@hookspec
def trainjobs_extra_objects(job: Job, ctx: RenderContext) -> Sequence[dict[str, Any]] | None:
    """Further Kubernetes objects the job owns (e.g. a TensorBoard Deployment and Service).

    Return full manifests without ownerReferences or namespace; the core adds both, creates
    what is missing and deletes them with the job. The local backend ignores objects it cannot
    run and says so.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def trainjobs_job_succeeded(
    job: Job, framework: Framework, outcomes: Sequence[ReplicaOutcome]
) -> bool | None:
    """The kind's success rule: True when the job has succeeded, False when not yet.

    `outcomes` has one entry per expected replica. The first plugin to return a bool decides;
    return None for kinds you do not handle. Failure (permanent exits, backoffLimit, deadline)
    is the core's business, not this hook's.
    """
    raise NotImplementedError


@hookspec
def trainjobs_config_overrides(options: Mapping[str, object]) -> Mapping[str, object] | None:
    """Sections of the controller config that the operator's command-line options set, over
    the file's. Since plugin API 1.11.

    `options` are the operator's parsed options by their argparse names (`gang_scheduler` for
    `--gang-scheduler`). Return `{section: {field: value}}` for what an option set (its fields
    are merged over the file's section of that name) or None. Called once, at start.
    """
    raise NotImplementedError


@hookspec
def trainjobs_check_config(controller_config: Mapping[str, object]) -> None:
    """Raise `PluginError`, naming the key, when this plugin's section of the controller
    config is malformed: the operator refuses to start. Since plugin API 1.11.

    Called once when the operator starts, with the config every hook will see (file and
    overrides). Parse with `config_section` so that the hooks reuse the parsed section.
    """
    raise NotImplementedError


@hookspec
def trainjobs_owned_resources(
    controller_config: Mapping[str, object],
) -> Sequence[OwnedResource] | None:
    """Kinds of the objects this plugin's `trainjobs_extra_objects` creates that the operator
    must watch (e.g. a gang scheduler's PodGroup). Since plugin API 1.3.

    Called once when the operator starts, with its controller config; return nothing when the
    feature is off (the kind's CRD may not even be installed). Watched objects are listed to
    `trainjobs_object_status`; with `with_replicas` they are deleted whenever the job's pods
    are (suspend, a finished job's cleanup) and recreated on resume. Kinds not declared are
    created and left to garbage collection, as before.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def trainjobs_object_status(job: Job, obj: dict[str, Any]) -> ObjectStatus | None:
    """What `obj`, a watched object the job owns (as the API server has it: apiVersion, kind,
    metadata, spec, status), reports now, for the job's `status.ownedObjects`. Since 1.3.

    Return None for objects you did not create. Data only, like every hook.
    """
    raise NotImplementedError


@hookspec
def trainjobs_adjust_status(job: Job, framework: Framework, status: dict[str, Any]) -> None:
    """Edit, in place, the status document the operator is about to write for `job`. Since
    plugin API 1.8.

    `status` is the core's status as the API writes it (state, conditions, replicaStatuses,
    startTime, completionTime, ...). A compatibility plugin adds what another project's
    clients read (Kubeflow's `lastReconcileTime`); declare those fields in
    `Framework.status_model` so that the CRD keeps them. Leave the core's fields as they are:
    the operator reads them back. Return None for kinds you do not handle (do nothing).
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def trainjobs_checkpoint_replica(job: Job, framework: Framework) -> Replica | None:
    """The replica that saves the job's checkpoint when asked (issue 38), e.g. TfJob's Chief.
    Since plugin API 1.14.

    Asked only for a job with `runPolicy.checkpointTimeoutSeconds`, before it is stopped for
    any reason but its own end. The first plugin to return a replica decides; None (every
    plugin) means the kind has no checkpointing replica: nothing is asked, the processes or
    pods stop at once as without the field.
    """
    raise NotImplementedError
