"""Large jobs: how the controller keeps one job of thousands of replicas from stalling the rest.

Why these numbers: see each constant. A large job is validated and planned in a worker
thread (`on_cpu`), rendered on the loop in slices, and its events are batched
(`BATCH_SECONDS_PER_REPLICA`), as kube-controller-manager's Job controller batches them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from trainjobs.api.models import Job

__all__ = ["BATCH_SECONDS_PER_REPLICA", "MAX_BATCH_SECONDS", "OFFLOAD_REPLICAS", "on_cpu",
           "replica_count", "requested_replicas"]

T = TypeVar("T")

#: A job of more than OFFLOAD_REPLICAS replicas is reconciled at most once per this many
#: seconds a replica (2,000 replicas: 0.2 s). Why: each of its reconciles reads all its pods
#: (milliseconds of CPU per thousand), and its pods change all the time while they start or
#: end, so reconciling it once per event kept a worker thread and the loop busy, stalling
#: every other job's events (issue 28.4, bench.bigjob). Small jobs are never held.
BATCH_SECONDS_PER_REPLICA = 1e-4
#: kube-controller-manager's Job controller batches every Job's pod events for 1 s
#: (syncJobBatchPeriod): no job waits longer here.
MAX_BATCH_SECONDS = 1.0


#: A job with more replicas is validated and planned in a worker thread, and rendered on the
#: loop a chunk at a time (PackedRender.of_sliced): its CPU work (tens of milliseconds per
#: hundred replicas, and a reconcile that creates its pods decodes all their manifests) must
#: not stall the event loop that serves every other job. The GIL lets the loop run every few
#: milliseconds while a thread computes (sys.getswitchinterval()), but makes it wait after
#: each socket call: the longest work, the rendering, stays on the loop in slices.
OFFLOAD_REPLICAS = 100


async def on_cpu(offload: bool, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, in a worker thread when `offload`, else here (a thread hop costs more
    than a small job's whole reconcile)."""
    if offload:
        result: T = await asyncio.to_thread(fn, *args)
        return result
    return fn(*args)


def replica_count(job: Job) -> int:
    """The replicas a validated job asks for."""
    return sum(r.replicas for r in job.spec.replica_specs.values())


def requested_replicas(raw: dict[str, Any], field: str) -> int:
    """The replicas a job not yet validated asks for under its kind's replica-specs `field`
    (`replicaSpecs`, or a plugin kind's alias such as Kubeflow's `tfReplicaSpecs`), counting
    only what is an int: it decides where the validation runs, before the spec is trusted."""
    specs = (raw.get("spec") or {}).get(field)
    if not isinstance(specs, dict):
        return 0
    counts = [s.get("replicas", 1) for s in specs.values() if isinstance(s, dict)]
    return sum(c for c in counts if isinstance(c, int))
