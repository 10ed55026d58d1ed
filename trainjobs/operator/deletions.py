"""Deletions of pods a job still wants, said in the info log and counted, with the planner's
reason (`Plan.deletions`).

Why: a live replica of the job's current attempt deleted is a restart of the job's work (for
replicas that restart together, of every replica): issue 36's spurious attempt deleted fresh
pods and the log said nothing of why. Each such deletion is now one log line per reason and
job pass, naming the pods, and one increment of trainjobs_wanted_pod_deletions_total.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from trainjobs.api.models import Job
from trainjobs.core.deletions import PodDeletion
from trainjobs.core.planner import Plan
from trainjobs.operator import metrics

__all__ = ["report_wanted_deletions"]

log = logging.getLogger("trainjobs.operator.controller")

#: Pods named per log line; a 2,000-replica attempt is not 2,000 names.
NAMES_SHOWN = 10


def report_wanted_deletions(job: Job, plan: Plan) -> int:
    """Log and count the pods `plan` deletes that `job` still wants; returns how many."""
    groups: dict[PodDeletion, list[str]] = defaultdict(list)
    for name in plan.delete_pods:
        why = plan.deletions.get(name)
        if why is not None and why.wanted:
            groups[why].append(name)
    for why, names in groups.items():
        metrics.WANTED_POD_DELETIONS.labels(kind=job.kind, reason=why.reason.value).inc(
            len(names))
        more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
        log.info("%s %s: deleting %d pod%s it still wants (%s%s): %s%s", job.kind, job.key,
                 len(names), "" if len(names) == 1 else "s", why.reason.value,
                 f": {why.detail}" if why.detail else "", ", ".join(names[:NAMES_SHOWN]), more)
    return sum(len(names) for names in groups.values())
