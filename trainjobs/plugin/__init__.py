"""The public plugin API of trainjobs: everything a framework or feature plugin may import.

A plugin imports from here and from `trainjobs.api` only; anything else is private and may
change without notice (a test enforces this for the example plugin). `PLUGIN_API_VERSION`
changes, by a deliberate decision recorded in docs/plugins.md, whenever this surface does.
"""

from trainjobs.api.models import Job, JobSpec, ReplicaSpec, SpecModel
from trainjobs.errors import PluginError, SpecError
from trainjobs.plugin.base import FrameworkPlugin
from trainjobs.plugin.hookspecs import hookimpl
from trainjobs.plugin.types import (
    Address,
    ClusterLayout,
    Framework,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
    ReplicaType,
)

PLUGIN_API_VERSION = "1.0"

__all__ = [
    "PLUGIN_API_VERSION",
    "Address",
    "ClusterLayout",
    "Framework",
    "FrameworkPlugin",
    "Job",
    "JobSpec",
    "PluginError",
    "RenderContext",
    "Replica",
    "ReplicaEnv",
    "ReplicaOutcome",
    "ReplicaPhase",
    "ReplicaSpec",
    "ReplicaType",
    "SpecError",
    "SpecModel",
    "hookimpl",
]
