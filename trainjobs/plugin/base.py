"""`FrameworkPlugin`: the convenient way to write a plugin that adds one job kind.

Why: every framework hook must ignore jobs of other kinds. This base class implements the hooks
once, calls the subclass's methods only for its own kind, and leaves the subclass plain
methods: `validate`, `replica_env`, `succeeded` and (optional) `checkpoint_replica`. A plugin
may still implement the raw hooks of `trainjobs.plugin.hookspecs` instead; the core sees no
difference.

`framework`, `replica_env` and `succeeded` are required (unless the subclass implements the
hook they serve itself): the plugin manager refuses a subclass without them when it loads
(`missing_parts`), rather than at the first job's rendering.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from trainjobs.api.models import Job
from trainjobs.errors import SpecError
from trainjobs.plugin.hookspecs import hookimpl
from trainjobs.plugin.types import Framework, RenderContext, Replica, ReplicaEnv, ReplicaOutcome

__all__ = ["FrameworkPlugin", "missing_parts"]


class FrameworkPlugin:
    """Base of a plugin adding one kind. Subclasses set `framework` and override the methods."""

    framework: ClassVar[Framework]

    def validate(self, job: Job) -> list[SpecError]:
        """Kind-specific problems (beyond replica counts and templates). None by default."""
        return []

    def replica_env(self, job: Job, replica: Replica, ctx: RenderContext) -> ReplicaEnv | None:
        """The framework's environment contract for one replica."""
        raise NotImplementedError

    def succeeded(self, job: Job, outcomes: Sequence[ReplicaOutcome]) -> bool:
        """The kind's success rule."""
        raise NotImplementedError

    def checkpoint_replica(self, job: Job) -> Replica | None:
        """The replica to ask for a checkpoint before the job is stopped (since 1.14). None
        by default: the kind has none, nothing is asked."""
        return None

    # The hooks --------------------------------------------------------------------------

    @hookimpl
    def trainjobs_frameworks(self) -> Sequence[Framework]:
        return [self.framework]

    @hookimpl
    def trainjobs_validate(self, job: Job, framework: Framework) -> Sequence[SpecError] | None:
        return self.validate(job) if job.kind == self.framework.kind else None

    @hookimpl
    def trainjobs_replica_env(
        self, job: Job, replica: Replica, ctx: RenderContext
    ) -> ReplicaEnv | None:
        return self.replica_env(job, replica, ctx) if job.kind == self.framework.kind else None

    @hookimpl
    def trainjobs_job_succeeded(
        self, job: Job, framework: Framework, outcomes: Sequence[ReplicaOutcome]
    ) -> bool | None:
        return self.succeeded(job, outcomes) if job.kind == self.framework.kind else None

    @hookimpl
    def trainjobs_checkpoint_replica(self, job: Job, framework: Framework) -> Replica | None:
        return self.checkpoint_replica(job) if job.kind == self.framework.kind else None


# What a subclass must define: each method with the hook that calls it (a subclass that
# implements that hook itself needs no method).
_REQUIRED_METHODS = {"replica_env": "trainjobs_replica_env",
                     "succeeded": "trainjobs_job_succeeded"}

# The hooks of FrameworkPlugin that read `framework`.
_FRAMEWORK_HOOKS = ("trainjobs_frameworks", "trainjobs_validate", "trainjobs_replica_env",
                    "trainjobs_job_succeeded", "trainjobs_checkpoint_replica")


def missing_parts(plugin: FrameworkPlugin) -> list[str]:
    """What `plugin`'s class leaves undefined that `FrameworkPlugin` needs, as the plugin
    author would name it (empty when complete)."""
    cls = type(plugin)
    inherited = [hook for hook in _FRAMEWORK_HOOKS
                 if getattr(cls, hook) is getattr(FrameworkPlugin, hook)]
    missing = []
    if inherited and not isinstance(getattr(plugin, "framework", None), Framework):
        missing.append("framework (a Framework)")
    for method, hook in _REQUIRED_METHODS.items():
        if getattr(cls, method) is getattr(FrameworkPlugin, method) and \
                getattr(cls, hook) is getattr(FrameworkPlugin, hook):
            missing.append(f"{method}()")
    return missing
