"""What `trainjobs run` leaves aside: the fields of a job that only mean something on a cluster.

Why say it: a user who runs the job they will `kubectl apply` should not believe that its
volumes were mounted, its resources limited or its host network used. The local runtime
runs each replica's framework container's command, args, env and workingDir under the pod's
restart policy; everything else in the template is listed once at start, by field, with the
replica types that set it.
"""

from __future__ import annotations

from trainjobs.api.models import Job
from trainjobs.plugin.types import Framework

__all__ = ["ignored_fields", "ignored_fields_note"]

# What the local runtime honours; every other field present is listed as ignored.
USED_POD_FIELDS = frozenset({"containers", "restartPolicy"})
USED_CONTAINER_FIELDS = frozenset({"name", "image", "command", "args", "env", "workingDir"})
# runPolicy fields without a local meaning (processes always stop with the job).
IGNORED_RUN_POLICY = ("cleanPodPolicy", "ttlSecondsAfterFinished", "schedulingPolicy")


def ignored_fields(job: Job, framework: Framework) -> dict[str, list[str]]:
    """Field name -> the replica types whose template sets it (or `runPolicy`)."""
    found: dict[str, list[str]] = {}

    def note(field: str, where: str) -> None:
        found.setdefault(field, [])
        if where not in found[field]:
            found[field].append(where)

    for key, rspec in job.spec.replica_specs.items():
        spec = rspec.template.get("spec") or {}
        for field in sorted(set(spec) - USED_POD_FIELDS):
            note(field, key)
        containers = spec.get("containers") or []
        ran = next((c for c in containers if c.get("name") == framework.container_name),
                   containers[0] if containers else None)
        for container in containers:
            if ran is None or container is not ran:
                note("containers other than the one run (sidecars)", key)
                continue
            for field in sorted(set(container) - USED_CONTAINER_FIELDS):
                note(field if field != "ports" else "ports (local ports are free ones)", key)
            if any("valueFrom" in v and "fieldRef" not in v["valueFrom"]
                   for v in container.get("env", [])):
                note("env valueFrom other than fieldRef (secrets, config maps)", key)
    policy = job.spec.run_policy
    set_fields = policy.model_dump(by_alias=True, exclude_defaults=True)
    for field in IGNORED_RUN_POLICY:
        if field in set_fields:
            note(field, "runPolicy")
    return found


def ignored_fields_note(job: Job, framework: Framework) -> str | None:
    """The one line `trainjobs run` prints at start, or None when nothing is ignored."""
    found = ignored_fields(job, framework)
    if not found:
        return None
    parts = [f"{field} ({', '.join(where)})" for field, where in sorted(found.items())]
    return "ignored locally (Kubernetes only): " + "; ".join(parts)
