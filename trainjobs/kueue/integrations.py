"""Who admits a job of a kind Kueue can integrate itself (Kubeflow's TFJob, ...): Kueue's own
integration or the operator's Workload, never both and never neither.

Why a decision: Kueue v0.19.2 sets up an integration only when its Configuration's
`integrations.frameworks` names it (pkg/controller/jobframework/setup.go; a framework not
named gets a no-op webhook). `kubeflow.org/tfjob` is named neither by its defaults
(apis/config/v1beta2/defaults.go: `batch/job` alone) nor by its shipped configuration and Helm
chart (commented out), and Kueue is dropping its Kubeflow v1 integrations. Where it is named,
Kueue's webhook suspends a labelled TFJob and Kueue's controller makes its Workload, so the
operator must make none; where it is not, nothing holds the TFJob back unless the operator
admits it through a Workload of its own, as it does every other kind.

`--kueue-kubeflow-integration` says which: `kueue` or `operator` outright, or `auto` (the
default), which reads Kueue's Configuration from the ConfigMap its Deployment mounts
(`kueue-system/kueue-manager-config`, key `controller_manager_config.yaml`, as Kueue's
config/default and Helm chart name it). When `auto` cannot read it the operator does not guess:
`undecided_route` keeps a job on the path it is visibly on, and holds a new one (no Workload,
no pod) with a condition saying what to configure. Pure; the reading is
trainjobs/operator/kueue_integrations.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from trainjobs.errors import TrainjobsError

__all__ = [
    "CONFIG_KEY",
    "DEFAULT_CONFIG_MAP",
    "DEFAULT_FRAMEWORKS",
    "KUEUE_FRAMEWORK_NAMES",
    "REASON_UNDECIDED",
    "IntegrationMode",
    "KueueConfigError",
    "KueueIntegrations",
    "Route",
    "enabled_frameworks",
    "parse_config_map",
    "undecided_message",
    "undecided_route",
]

# Kueue's framework name of each kind it integrates itself (pkg/controller/jobs/kubeflow/jobs/*
# and mpijob, v0.19.2: their FrameworkName). MXJob's integration was removed in v0.11.
KUEUE_FRAMEWORK_NAMES: Mapping[tuple[str, str], str] = {
    ("kubeflow.org", "TFJob"): "kubeflow.org/tfjob",
    ("kubeflow.org", "PyTorchJob"): "kubeflow.org/pytorchjob",
    ("kubeflow.org", "PaddleJob"): "kubeflow.org/paddlejob",
    ("kubeflow.org", "XGBoostJob"): "kubeflow.org/xgboostjob",
    ("kubeflow.org", "JAXJob"): "kubeflow.org/jaxjob",
    ("kubeflow.org", "MPIJob"): "kubeflow.org/mpijob",
}
#: Where Kueue's Deployment reads its Configuration (config/default: namespace kueue-system,
#: namePrefix kueue-; its Helm chart: `<fullname>-manager-config`, the same for release kueue).
DEFAULT_CONFIG_MAP = "kueue-system/kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
#: integrations.frameworks when the Configuration names none (defaults.go, v1beta1 and v1beta2).
DEFAULT_FRAMEWORKS = frozenset({"batch/job"})
#: The job's Queued reason while `auto` cannot tell.
REASON_UNDECIDED = "KueueIntegrationUnknown"


class IntegrationMode(StrEnum):
    AUTO = "auto"          # read Kueue's Configuration
    KUEUE = "kueue"        # Kueue's integrations are enabled for every such kind
    OPERATOR = "operator"  # none is: the operator makes the Workload


class Route(StrEnum):
    KUEUE = "kueue"          # Kueue's own integration admits it; the operator makes no Workload
    OPERATOR = "operator"    # the operator's Workload, as for every other kind
    UNDECIDED = "undecided"  # `auto` could not read Kueue's Configuration


class KueueConfigError(TrainjobsError):
    """Kueue's Configuration cannot be read as one (not YAML, not a mapping, frameworks not
    a list of strings)."""


def parse_config_map(text: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` of Kueue's ConfigMap (the `--kueue-config-map` flag)."""
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise TrainjobsError(f"--kueue-config-map {text!r}: expected NAMESPACE/NAME, e.g. "
                             f"{DEFAULT_CONFIG_MAP}")
    return namespace, name


def enabled_frameworks(text: str) -> frozenset[str]:
    """The frameworks Kueue enables by the Configuration `text` (integrations.frameworks, or
    Kueue's default when it names none). Frameworks only some other one enables implicitly
    (`pod`) are not among the kinds this decides."""
    try:
        doc: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KueueConfigError(f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, Mapping):
        raise KueueConfigError("not a mapping")
    integrations = doc.get("integrations")
    if integrations is None:
        return DEFAULT_FRAMEWORKS
    if not isinstance(integrations, Mapping):
        raise KueueConfigError("integrations is not a mapping")
    frameworks = integrations.get("frameworks")
    if frameworks is None or frameworks == []:
        return DEFAULT_FRAMEWORKS
    if not isinstance(frameworks, list) or not all(isinstance(f, str) for f in frameworks):
        raise KueueConfigError("integrations.frameworks is not a list of names")
    return frozenset(frameworks)


@dataclass(frozen=True)
class KueueIntegrations:
    """What the operator knows of Kueue's integrations: the enabled frameworks (None: it
    cannot tell) and where that came from, or why it cannot tell."""

    frameworks: frozenset[str] | None
    source: str

    def route(self, mode: IntegrationMode, group: str, kind: str) -> Route:
        name = KUEUE_FRAMEWORK_NAMES.get((group, kind))
        if name is None or mode is IntegrationMode.OPERATOR:
            return Route.OPERATOR
        if mode is IntegrationMode.KUEUE:
            return Route.KUEUE
        if self.frameworks is None:
            return Route.UNDECIDED
        return Route.KUEUE if name in self.frameworks else Route.OPERATOR


def undecided_route(has_own_workload: bool, active: bool, finished: bool) -> Route:
    """An UNDECIDED job's path from what it shows: a Workload of the operator's means it was
    admitted that way (keep it); pods without one, or a finished job, mean Kueue admitted it
    or it ran before (left alone: stopping it on a failed read would be worse). Otherwise the
    job has not started and is held."""
    if has_own_workload:
        return Route.OPERATOR
    if active or finished:
        return Route.KUEUE
    return Route.UNDECIDED


def undecided_message(group: str, kind: str, why: str, config_map: tuple[str, str]) -> str:
    """The held job's Queued message (and its event's): what could not be read, what to set."""
    name = KUEUE_FRAMEWORK_NAMES.get((group, kind), f"{group}/{kind.lower()}")
    return (f"held, with no Workload and no pod: cannot tell whether Kueue's {name} "
            f"integration is enabled ({why}); set --kueue-kubeflow-integration=kueue if "
            f"Kueue's integrations.frameworks names {name}, =operator if it does not (chart "
            f"value kueue.kubeflowIntegration), or let the operator read ConfigMap "
            f"{config_map[0]}/{config_map[1]}")
