"""How the controller is set up: one frozen value built once at start (operator/settings.py).

Why a module of its own: the gates (operator/gates) read it as the controller does, and the
controller imports the gates; neither may import the other's module for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainjobs.api.models import DEFAULT_MAX_REPLICAS_PER_JOB
from trainjobs.core.planner import PlannerSettings
from trainjobs.core.progress import ProgressEndpoint
from trainjobs.kueue.reconcile import KueueSettings

if TYPE_CHECKING:
    from trainjobs.operator.progress_store import ProgressStore

__all__ = ["ControllerSettings"]


@dataclass(frozen=True)
class ControllerSettings:
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    concurrency: int = 16
    # Status changes that only update counts are written at most this often per job.
    status_coalesce_seconds: float = 1.0
    # A change of status.progress alone is written at most this often per job, and only
    # within a budget of progress writes per second for all jobs together (burst: one
    # second's worth): 5,000 reporting jobs cannot flood the API server (docs/progress.md).
    progress_status_interval: float = 30.0
    progress_status_writes_per_second: float = 20.0
    expectation_timeout: float = 120.0
    create_parallelism: int = 16
    # The plugins' sections (settings.py builds it once: file, overrides, checked).
    controller_config: Mapping[str, Any] = field(default_factory=dict)
    # Most replicas one job may have in all (--max-replicas-per-job); at most the CRDs' own.
    max_replicas_per_job: int = DEFAULT_MAX_REPLICAS_PER_JOB
    planner: PlannerSettings = field(default_factory=PlannerSettings)
    # A MultiKueue manager cluster (--multikueue-manager): no job runs here; only MultiKueue's
    # jobs get their Workload. Why: a job created here without managedBy would run in the
    # manager, whose nodes are not meant for training (docs/multikueue.md).
    multikueue_manager: bool = False
    # Kueue admission (operator/gates/kueue.py): manageJobsWithoutQueueName and its selector.
    kueue: KueueSettings = field(default_factory=KueueSettings)
    # Progress reports (--progress-listen; docs/progress.md): what every replica is told (None:
    # pods exactly as without it), and the leader's reports, which the progress gate reads.
    progress_endpoint: ProgressEndpoint | None = None
    progress: ProgressStore | None = None
