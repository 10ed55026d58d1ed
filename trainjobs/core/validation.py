"""Turns a job document (from a YAML file or the API server) into a validated `Job`.

Why one function for both sources: `trainjobs run`, `trainjobs render` and the operator must
accept and refuse exactly the same jobs. Every problem is collected (pydantic's, the replica
rules', the pod templates', the plugins') and raised together in one `SpecInvalid`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainjobs.api.models import (
    GROUP,
    MAX_REPLICAS,
    Job,
    JobSpec,
    ObjectMeta,
    ReplicaSpec,
    RestartPolicy,
)
from trainjobs.api.podtemplate import validate_pod_template
from trainjobs.convert.documents import is_old_job
from trainjobs.core.failure_rules import policy_errors
from trainjobs.core.progress import ProgressEndpoint
from trainjobs.core.refusals import (
    KUBEFLOW_KINDS,
    did_you_mean,
    kubeflow_hint,
    pydantic_errors,
    unknown_field,
)
from trainjobs.core.render import Rendering, named_port, pod_restart_policy
from trainjobs.errors import SpecError, SpecInvalid
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Framework, ReplicaType
from trainjobs.yamlio import describe, load_documents, read_documents

__all__ = ["DNS1035", "MAX_NAME_LENGTH", "JobFile", "ReplicaLimit", "is_job_document",
           "load_job_file", "parse_job", "parse_job_documents", "split_jobs"]

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME_LENGTH = 63
TOP_LEVEL_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})


@dataclass(frozen=True)
class ReplicaLimit:
    """The most replicas one job may have in all, and who set it (named in the refusal)."""

    most: int = MAX_REPLICAS
    set_by: str = "the trainjobs CRDs"


CRD_LIMIT = ReplicaLimit()


@dataclass(frozen=True)
class JobFile:
    """The jobs of a file, and the other objects it holds (named `Kind/name`), left alone."""

    jobs: list[Job]
    ignored: list[str] = field(default_factory=list)


def load_job_file(path: Path, plugins: PluginManager) -> JobFile:
    """Every job in a YAML file (one or more documents), validated; other objects listed."""
    return split_jobs(read_documents(path), plugins, source=str(path))


def parse_job_documents(text: str, plugins: PluginManager, source: str = "") -> JobFile:
    return split_jobs(load_documents(text, source), plugins, source)


def is_job_document(doc: Any, plugins: PluginManager) -> bool:
    """A document meant for trainjobs: a trainjobs.io object, an installed kind's, or an old
    operator's job (a TFJob of kubeflow.org) that was meant to be one."""
    if not isinstance(doc, dict):
        return True  # not an object at all: parse_job says what is wrong with it
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if isinstance(api_version, str) and api_version.split("/")[0] == GROUP:
        return True
    if isinstance(kind, str) and plugins.framework_for(kind) is not None:
        return True
    if is_old_job(doc):
        return True  # a Kubeflow job: refused with the way to convert it, not skipped
    return not (isinstance(api_version, str) and isinstance(kind, str))


def split_jobs(docs: list[Any], plugins: PluginManager, source: str = "") -> JobFile:
    """Validates the job documents (every problem of every job at once); names the others.

    Users keep a job together with its ConfigMaps, Services and PVCs in one file that they
    `kubectl apply`; `trainjobs render`/`run` take the jobs and list the rest as ignored."""
    jobs: list[Job] = []
    ignored: list[str] = []
    errors: list[SpecError] = []
    several = len(docs) > 1
    for number, doc in enumerate(docs, 1):
        if not is_job_document(doc, plugins):
            ignored.append(describe(doc))
            continue
        try:
            jobs.append(parse_job(doc, plugins))
        except SpecInvalid as exc:
            where = f"document {number} ({describe(doc)}): " if several else ""
            errors += [SpecError(e.path, f"{where}{e.message}") if not e.path else
                       SpecError(f"{where}{e.path}", e.message) for e in exc.errors]
    if errors:
        raise SpecInvalid(errors, source)
    if not jobs:
        what = "holds only " + ", ".join(ignored) if ignored else "is empty"
        raise SpecInvalid([SpecError("", f"no job found: the file {what}")], source)
    return JobFile(jobs, ignored)


def parse_job(doc: Any, plugins: PluginManager, source: str = "",
              limit: ReplicaLimit = CRD_LIMIT, *,
              controller_config: Mapping[str, Any] | None = None, render: bool = True,
              progress: ProgressEndpoint | None = None) -> Job:
    """Validate one job document; raise `SpecInvalid` with every problem found.

    A job over `limit` is refused before anything is rendered: its cost grows with its
    replicas, so the check must not pay it. The last check renders the job's pods once, with
    `controller_config`: the operator passes its own, so that plugins which read it
    (accelerators, gang scheduling, the PS server's image) are checked on the pods it will
    create, and its progress endpoint (`progress`: its volume must fit the templates).
    `render=False` skips that rendering: reading a job the API server already holds
    (the client's list, watch and wait) must not cost a rendering of every pod."""
    if not isinstance(doc, dict):
        raise SpecInvalid([SpecError("", "a job must be a mapping with apiVersion, kind, "
                                         "metadata and spec")], source)
    kind = doc.get("kind")
    framework = plugins.framework_for(kind) if isinstance(kind, str) else None
    if framework is None:
        known = ", ".join(plugins.frameworks) or "none"
        message = f"unknown kind {kind!r} (installed kinds: {known})"
        if isinstance(kind, str) and kind in KUBEFLOW_KINDS:
            message += f"; {kubeflow_hint(KUBEFLOW_KINDS[kind])}"
        elif isinstance(kind, str):
            message += did_you_mean(kind, plugins.frameworks)
        raise SpecInvalid([SpecError("kind", message)], source)
    errors: list[SpecError] = [unknown_field(key, key, TOP_LEVEL_FIELDS)
                               for key in sorted(map(str, doc)) if key not in TOP_LEVEL_FIELDS]
    if doc.get("apiVersion") != framework.api_version:
        hint = (f" ({kubeflow_hint(framework.kind)})"
                if str(doc.get("apiVersion")).startswith("kubeflow.org/") else "")
        errors.append(SpecError("apiVersion", f"must be {framework.api_version}, got "
                                              f"{doc.get('apiVersion')!r}{hint}"))
    meta = _parse_metadata(doc.get("metadata"), errors)
    spec = _parse_spec(doc.get("spec"), framework, errors)
    if meta is None or spec is None:
        # Still check what can be checked, so that every problem is reported in one pass.
        errors = _check_raw_replicas(doc.get("spec"), framework, errors)
    if meta is None or spec is None:
        raise SpecInvalid(_in_kind_terms(errors, framework), source)
    job = Job(apiVersion=framework.api_version, kind=framework.kind, metadata=meta, spec=spec)
    errors += check_job(job, framework, plugins, limit, controller_config=controller_config,
                        render=render, progress=progress)
    if errors:
        raise SpecInvalid(_in_kind_terms(errors, framework), source)
    return job


def _in_kind_terms(errors: list[SpecError], framework: Framework) -> list[SpecError]:
    """Paths as the kind writes them: the core says spec.replicaSpecs, a kind whose spec model
    names the field otherwise (Kubeflow's tfReplicaSpecs) gets its own name."""
    field_name = framework.replica_specs_field
    if field_name == "replicaSpecs":
        return errors
    return [SpecError(e.path.replace("spec.replicaSpecs", f"spec.{field_name}", 1),
                      e.message.replace("replicaSpecs", field_name)) for e in errors]


def check_job(job: Job, framework: Framework, plugins: PluginManager,
              limit: ReplicaLimit = CRD_LIMIT, *,
              controller_config: Mapping[str, Any] | None = None,
              render: bool = True, progress: ProgressEndpoint | None = None
              ) -> list[SpecError]:
    """The checks beyond the models: replica rules, names, pod templates, plugins, and (when
    `render`) the rendered pods' environment and names, rendered with `controller_config`."""
    errors = _check_replicas(job.spec, framework)
    over = _check_limit(job.spec, limit)
    if over:
        return errors + over  # (rendering a job of a million replicas is what it prevents)
    errors += _check_names(job, framework)
    errors += _check_failure_policy(job, framework)
    for key, rspec in job.spec.replica_specs.items():
        path = f"spec.replicaSpecs.{key}.template"
        rtype = framework.replica_type(key)
        if not rspec.template:
            if rtype is not None and not rtype.container_optional:
                errors.append(SpecError(path, "required field is missing"))
            continue  # (a plugin supplies the container: checked on the rendered pods)
        template_errors = validate_pod_template(rspec.template, path)
        errors += template_errors
        if not template_errors:
            errors += _check_template_restart_policy(key, rspec, framework)
            errors += _check_host_network_port(key, rspec, framework, rtype)
        if template_errors or rtype is None or rtype.container_optional:
            continue
        names = [c.get("name") for c in rspec.template["spec"]["containers"]]
        if not names:
            errors.append(SpecError(f"{path}.spec.containers", "at least one container is "
                                    "required"))
        elif not framework.env_in_all_containers and framework.container_name not in names:
            errors.append(SpecError(f"{path}.spec.containers", f"needs a container named "
                                    f"{framework.container_name!r} (it receives the "
                                    f"{framework.name} environment); found {names}"))
    if errors:
        return errors
    errors += plugins.validate(job, framework)
    if errors or not render:
        return errors
    # Render once with placeholder addresses: collisions between injected and user-set
    # environment variables, or between plugins, surface here, before anything runs.
    # One pod at a time, each dropped once seen: a job's rendered objects can be large.
    rendering = Rendering(job, framework, plugins, backend="kubernetes",
                          controller_config=controller_config, progress=progress)
    owned: list[str] = []
    bare: set[str] = set()  # replica types whose pods got no container
    try:
        for _, replica, pod, service in rendering.replicas():
            owned += (pod["metadata"]["name"], service["metadata"]["name"])
            if not pod["spec"].get("containers"):
                bare.add(replica.type)
    except SpecInvalid as exc:
        return errors + exc.errors
    owned += [o["metadata"]["name"] for o in rendering.extras()]
    return errors + _check_supplied_containers(bare, framework) + \
        _check_derived_names(job, owned)


def _check_supplied_containers(bare: set[str], framework: Framework) -> list[SpecError]:
    """A replica spec without a template relies on a plugin for its container (the default
    PS server); without that plugin loaded, its pods would have none."""
    return [SpecError(f"spec.replicaSpecs.{key}.template", f"required: no installed plugin "
                      f"supplies a {framework.container_name!r} container for these pods "
                      "(is the default PS server plugin, tf_ps_server, disabled?)")
            for key in sorted(bare)]


def _check_template_restart_policy(key: str, rspec: ReplicaSpec,
                                   framework: Framework) -> list[SpecError]:
    """A template's restartPolicy is never silently replaced: it must be what trainjobs sets.

    The seeds' manifests (tf-operator, caffe2-operator) write `restartPolicy: OnFailure` in
    the template; here the replica's `restartPolicy` decides, and it says more (ExitCode)."""
    declared = rspec.template.get("spec", {}).get("restartPolicy")
    rendered = pod_restart_policy(rspec.restart_policy, framework)
    if declared is None or declared == rendered:
        return []
    path = f"spec.replicaSpecs.{key}.template.spec.restartPolicy"
    if declared in (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS) and \
            rspec.restart_policy != declared:
        return [SpecError(path, f"{declared} would be replaced by {rendered}: trainjobs sets "
                          f"the pods' restartPolicy from spec.replicaSpecs.{key}.restartPolicy; "
                          f"set replicaSpecs.{key}.restartPolicy: {declared} instead, and "
                          "remove it from the template")]
    why = (f"{framework.kind}'s replicas restart together, so their pods never restart in "
           "place" if framework.replicas_restart_together else
           f"from spec.replicaSpecs.{key}.restartPolicy: {rspec.restart_policy.value}")
    return [SpecError(path, f"{declared} would be replaced by {rendered} ({why}); remove it "
                      f"from the template: spec.replicaSpecs.{key}.restartPolicy decides")]


def _check_host_network_port(key: str, rspec: ReplicaSpec, framework: Framework,
                             rtype: ReplicaType | None) -> list[SpecError]:
    """Under hostNetwork a container port is a port of the node: trainjobs never picks one.

    Two jobs whose pods got the same default port (2222) could never share a node (the
    scheduler's NodePorts filter), and their programs would fight over it; the user names
    the port where the framework listens, or nothing is added (replicas that do not listen)."""
    spec = rspec.template.get("spec", {})
    if not spec.get("hostNetwork") or rtype is None or not rtype.listens or \
            rspec.replicas == 0 or named_port(rspec.template, framework) is not None:
        return []
    return [SpecError(f"spec.replicaSpecs.{key}.template.spec.hostNetwork", f"with hostNetwork "
                      f"the {framework.container_name} container's port is a port of the node:"
                      f" name it (a containerPort named {framework.port_name!r} in the "
                      f"{framework.container_name!r} container); trainjobs does not choose a "
                      f"node port (the default {framework.default_port} would keep two jobs' "
                      "pods off the same node)")]


def _parse_metadata(raw: Any, errors: list[SpecError]) -> ObjectMeta | None:
    if not isinstance(raw, dict) or not raw.get("name"):
        errors.append(SpecError("metadata.name", "required: the job needs a name"))
        return None
    try:
        return ObjectMeta.model_validate(raw)
    except ValidationError as exc:
        errors += pydantic_errors(exc, "metadata", ObjectMeta)
        return None


def _check_failure_policy(job: Job, framework: Framework) -> list[SpecError]:
    """A failurePolicy that cannot mean anything for this job (core/failure_rules.py)."""
    rules = getattr(job.spec.run_policy, "failure_policy", None)
    if not rules:
        return []
    in_place = [key for key, rspec in job.spec.replica_specs.items()
                if pod_restart_policy(rspec.restart_policy, framework) != "Never"]
    return [SpecError(f"spec.runPolicy.failurePolicy{path}", message) for path, message in
            policy_errors(rules, list(job.spec.replica_specs),
                          framework.replicas_restart_together, framework.kind, in_place)]


def _parse_spec(raw: Any, framework: Framework, errors: list[SpecError]) -> JobSpec | None:
    if not isinstance(raw, dict):
        errors.append(SpecError("spec", "required: a mapping with replicaSpecs"))
        return None
    try:
        return framework.spec_model.model_validate(raw)
    except ValidationError as exc:
        errors += pydantic_errors(exc, "spec", framework.spec_model, framework.kind)
        return None


def _check_raw_replicas(raw: Any, framework: Framework,
                        errors: list[SpecError]) -> list[SpecError]:
    """`errors` and the replica types' and pod templates' problems of a spec its model
    refused (for one-pass reports)."""
    specs = raw.get(framework.replica_specs_field) if isinstance(raw, dict) else None
    if not isinstance(specs, dict):
        return errors
    if "template" in specs and framework.replica_type("template") is None:
        # One replica spec where a mapping of them belongs (caffe2-operator's form): say
        # that once, rather than each of its fields as an unknown replica type.
        inner = [e for e in errors if not e.path.startswith("spec.replicaSpecs.")]
        first = framework.replica_types[0].name
        hint = f" ({kubeflow_hint(framework.kind)})" if "backendSpecs" in raw else ""
        return [*inner, SpecError("spec.replicaSpecs", "expected a mapping of replica type to "
                                  "replica spec, got one replica spec: put it under a type, "
                                  f"e.g. replicaSpecs.{first}{hint}")]
    errors = errors + [_unknown_replica_type(str(key), framework) for key in specs
                       if framework.replica_type(str(key)) is None]
    for key, rspec in specs.items():
        template = rspec.get("template") if isinstance(rspec, dict) else None
        if isinstance(template, dict):
            errors += validate_pod_template(template, f"spec.replicaSpecs.{key}.template")
    return errors


def _unknown_replica_type(key: str, framework: Framework) -> SpecError:
    allowed = [n for t in framework.replica_types for n in t.names]
    return SpecError(f"spec.replicaSpecs.{key}", f"unknown replica type for {framework.kind}; "
                     f"allowed: {', '.join(allowed)}{did_you_mean(key, allowed)}")


def _check_replicas(spec: JobSpec, framework: Framework) -> list[SpecError]:
    errors: list[SpecError] = []
    by_type: dict[str, list[str]] = {}
    for key in spec.replica_specs:
        rtype = framework.replica_type(key)
        if rtype is None:
            errors.append(_unknown_replica_type(key, framework))
            continue
        by_type.setdefault(rtype.name, []).append(key)
        errors += _check_elastic(key, spec.replica_specs[key], rtype, framework)
    for rtype in framework.replica_types:
        keys = by_type.get(rtype.name, [])
        if len(keys) > 1:
            errors.append(SpecError(f"spec.replicaSpecs.{keys[1]}", f"{' and '.join(keys)} name "
                                    f"the same replica type; use only one"))
            continue
        if not keys:
            if rtype.min_replicas > 0:
                errors.append(SpecError(f"spec.replicaSpecs.{rtype.name}", f"required: "
                                        f"{framework.kind} needs at least {rtype.min_replicas} "
                                        f"{rtype.name}"))
            continue
        count = spec.replica_specs[keys[0]].replicas
        path = f"spec.replicaSpecs.{keys[0]}.replicas"
        if count < rtype.min_replicas:
            errors.append(SpecError(path, f"must be at least {rtype.min_replicas}, got {count}"))
        if rtype.max_replicas is not None and count > rtype.max_replicas:
            errors.append(SpecError(path, f"must be at most {rtype.max_replicas}, got {count}"))
    if not any(r.replicas for r in spec.replica_specs.values()) and not errors:
        errors.append(SpecError("spec.replicaSpecs", "the job has no replicas to run"))
    return errors


def _check_limit(spec: JobSpec, limit: ReplicaLimit) -> list[SpecError]:
    errors: list[SpecError] = []
    total = sum(r.replicas for r in spec.replica_specs.values())
    if total > limit.most:
        errors.append(SpecError("spec.replicaSpecs", f"the job has {total} replicas in all, "
                                f"more than the maximum of {limit.most} per job set by "
                                f"{limit.set_by}"))
    return errors


def elastic_refusal(framework: Framework) -> str:
    """What is said of an elasticPolicy on a type the kind does not allow it on (here and in
    the CRD's CEL rule)."""
    allowed = [t.name for t in framework.replica_types if t.elastic]
    if not allowed:
        return (f"elasticPolicy is not supported by a {framework.kind} "
                "(none of its replica types is elastic)")
    return f"a {framework.kind} allows elasticPolicy only on {', '.join(allowed)}"


def _check_elastic(key: str, rspec: ReplicaSpec, rtype: ReplicaType, framework: Framework
                   ) -> list[SpecError]:
    """elasticPolicy only where the kind allows it, and replicas within its bounds (the CRD's
    CEL rules say the same; this is for `trainjobs run` and objects the API server let by)."""
    policy = rspec.elastic_policy
    if policy is None:
        return []
    path = f"spec.replicaSpecs.{key}"
    if not rtype.elastic:
        return [SpecError(f"{path}.elasticPolicy", elastic_refusal(framework))]
    if policy.min_replicas > policy.max_replicas:
        return [SpecError(f"{path}.elasticPolicy.minReplicas", f"must be at most maxReplicas "
                          f"({policy.max_replicas}), got {policy.min_replicas}")]
    if not policy.min_replicas <= rspec.replicas <= policy.max_replicas:
        return [SpecError(f"{path}.replicas", f"must be within elasticPolicy bounds "
                          f"{policy.min_replicas}..{policy.max_replicas}, got {rspec.replicas}")]
    return []


def _check_names(job: Job, framework: Framework) -> list[SpecError]:
    name = job.metadata.name
    if not DNS1035.match(name):
        return [SpecError("metadata.name", f"{name!r} must be a DNS-1035 label: lowercase "
                                           "letters, digits and '-', starting with a letter "
                                           "and ending with a letter or digit")]
    return []


def _check_derived_names(job: Job, names: list[str]) -> list[SpecError]:
    """Every object the job would own must have a valid name (pods, Services, extras)."""
    longest = max(names, key=len, default="")
    if len(longest) <= MAX_NAME_LENGTH:
        return []
    excess = len(longest) - MAX_NAME_LENGTH
    fit = len(job.metadata.name) - excess
    return [SpecError("metadata.name", f"{job.metadata.name!r} is too long: the derived name "
                      f"'{longest}' has {len(longest)} characters, more than "
                      f"{MAX_NAME_LENGTH}; use at most {fit} characters")]
