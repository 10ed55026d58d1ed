"""The planner against every duration the CRD schema allows (issue 15.2).

`activeDeadlineSeconds: 9223372036854775807` made the planner raise OverflowError on every
retry (the job never got a status), and a huge `ttlSecondsAfterFinished` did the same once the
job had finished. The ranges here are read from the generated, checked-in CRD, so the schema
and this test cannot drift apart: whatever the API server accepts, the planner must plan.
Status dates may be anything a date-time holds (a user may patch the status subresource).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.helpers import REPO
from tests.unit.planner_helpers import World, tf_doc
from trainjobs.api.models import Condition, ConditionType, JobStatus


def _run_policy_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "trainjobs.io_tfjobs.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema: dict[str, Any] = spec["properties"]["runPolicy"]["properties"]
    return schema


RUN_POLICY = _run_policy_schema()


def _allowed(field: str) -> st.SearchStrategy[int]:
    """Every integer the CRD accepts for `field` (it must declare both bounds)."""
    node = RUN_POLICY[field]
    assert "minimum" in node and "maximum" in node, f"{field} is unbounded in the CRD: {node}"
    low, high = int(node["minimum"]), int(node["maximum"])
    return st.one_of(st.sampled_from([low, high]), st.integers(low, high))


ANY_DATE = st.one_of(
    st.sampled_from([datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]),
    st.datetimes(timezones=st.just(UTC)))
NOW = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2300, 1, 1),
                   timezones=st.just(UTC))


def _seconds_between(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds()


@settings(max_examples=300, deadline=None)
@given(deadline=_allowed("activeDeadlineSeconds"), started=ANY_DATE, now=NOW)
def test_any_allowed_deadline_is_planned(deadline: int, started: datetime, now: datetime
                                         ) -> None:
    world = World.of(tf_doc(workers=1, ps=0, activeDeadlineSeconds=deadline), now=now)
    world.settle()
    world.run()
    world.job = world.job.model_copy(update={"status": world.status.model_copy(
        update={"start_time": started.replace(microsecond=0)})})
    plan = world.step()
    expired = _seconds_between(started.replace(microsecond=0), now) >= deadline
    assert (world.state == "Failed") == expired, (world.state, deadline, started, now)
    if not expired:
        assert plan.requeue_after is not None and plan.requeue_after > 0


@settings(max_examples=300, deadline=None)
@given(ttl=_allowed("ttlSecondsAfterFinished"), completed=ANY_DATE, now=NOW)
def test_any_allowed_ttl_is_planned(ttl: int, completed: datetime, now: datetime) -> None:
    world = World.of(tf_doc(workers=1, ps=0, ttlSecondsAfterFinished=ttl), now=now)
    completed = completed.replace(microsecond=0)
    world.job = world.job.model_copy(update={"status": JobStatus(
        state="Succeeded", start_time=completed, completion_time=completed,
        conditions=[Condition(type=ConditionType.SUCCEEDED, status="True",
                              reason="JobSucceeded", last_transition_time=completed)])})
    plan = world.step()
    expired = _seconds_between(completed, now) >= ttl
    assert plan.delete_job == expired, (ttl, completed, now)
    if not expired:
        assert plan.requeue_after is not None and plan.requeue_after > 0
