"""The public plugin API of trainjobs: everything a framework or feature plugin may import.

A plugin imports from here only (and its tests from `trainjobs.testing`); anything else is
private and may change without notice (tests/plugins/test_plugin_api.py enforces this for the
example plugin, examples/plugins/trainjobs-pytorch). `PLUGIN_API_VERSION` changes, by a
deliberate decision recorded in docs/plugins.md, whenever this surface does (the same test
pins the surface in a snapshot).
"""

from trainjobs.api.models import (
    Condition,
    Job,
    JobSpec,
    JobStatus,
    ReplicaSpec,
    RunPolicy,
    SpecModel,
)
from trainjobs.errors import PluginError, SpecError
from trainjobs.plugin.base import FrameworkPlugin
from trainjobs.plugin.capabilities import (
    Capability,
    ParameterServers,
    RedisRendezvous,
    TensorBoard,
    TensorBoardSpec,
)
from trainjobs.plugin.cel import CelRule
from trainjobs.plugin.config import ControllerConfig, config_section
from trainjobs.plugin.hookspecs import hookimpl
from trainjobs.plugin.types import (
    Address,
    ClusterLayout,
    Framework,
    ObjectStatus,
    OwnedResource,
    RenderContext,
    Replica,
    ReplicaEnv,
    ReplicaOutcome,
    ReplicaPhase,
    ReplicaType,
)

PLUGIN_API_VERSION = "1.17"

__all__ = [
    "PLUGIN_API_VERSION",
    "Address",
    "Capability",
    "CelRule",
    "ClusterLayout",
    "Condition",
    "ControllerConfig",
    "Framework",
    "FrameworkPlugin",
    "Job",
    "JobSpec",
    "JobStatus",
    "ObjectStatus",
    "OwnedResource",
    "ParameterServers",
    "PluginError",
    "RedisRendezvous",
    "RenderContext",
    "Replica",
    "ReplicaEnv",
    "ReplicaOutcome",
    "ReplicaPhase",
    "ReplicaSpec",
    "ReplicaType",
    "RunPolicy",
    "SpecError",
    "SpecModel",
    "TensorBoard",
    "TensorBoardSpec",
    "config_section",
    "hookimpl",
]
