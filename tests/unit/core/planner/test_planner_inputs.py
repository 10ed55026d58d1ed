"""`PlanInputs` decisions that were the backend's before (issue 24.3): creates held by a
quota's back-off, and the pods a restart-together attempt still owes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.unit.planner_helpers import World, c2_doc, tf_doc
from trainjobs.core.planner import KindRules, Plan, PlanInputs, plan


def _plan(w: World, **changes: Any) -> Plan:
    inputs = PlanInputs(list(w.pods.values()), set(w.services), set(w.extras), now=w.now)
    return plan(w.job, w.desired, replace(inputs, **changes),
                succeeded=lambda o: w.plugins.job_succeeded(w.job, w.framework, o),
                kind=KindRules(w.framework.replicas_restart_together))


def test_held_creates_wait_and_the_status_is_what_it_would_be() -> None:
    w = World.of(tf_doc(chief=1, workers=2, ps=0))
    refused = _plan(w, create_refused="QuotaExceeded: q")
    held = _plan(w, creates_held=4.0, create_refused="QuotaExceeded: q")
    assert refused.create_pods and refused.create_services
    assert held.create_pods == held.create_services == []
    assert held.requeue_after == 4.0
    assert held.status == refused.status  # the job says why; it is not told anything else
    created = next(c for c in held.status.conditions if c.type.value == "Created")
    assert created.reason == "QuotaExceeded"


def test_pods_held_back_are_still_owed_by_an_attempt() -> None:
    w = World.of(c2_doc(workers=3))
    held = _plan(w, creates_held=2.0)
    assert held.create_pods == []
    assert held.owe == frozenset(w.desired.pods)
    free = _plan(w)
    assert free.owe == frozenset(w.desired.pods)


def test_kinds_that_do_not_restart_together_owe_nothing() -> None:
    w = World.of(tf_doc(chief=1, workers=2, ps=0))
    assert _plan(w).owe == frozenset()
