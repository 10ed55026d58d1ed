"""A create refused by a ResourceQuota waits with a growing back-off (per job, on a fake
clock) and the job says why, with standard conditions; it proceeds when the quota allows."""

from __future__ import annotations

from tests.unit.planner_helpers import World, mx_doc
from trainjobs.core.planner import PlanInputs, plan
from trainjobs.operator.backoff import CreateGate

REFUSED = ('QuotaExceeded: pods "mx-worker-1" is forbidden: exceeded quota: team-a, '
           "requested: pods=1, used: pods=3, limited: pods=3")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_back_off_doubles_per_job_up_to_the_maximum() -> None:
    clock = FakeClock()
    gate, other = (CreateGate(base_delay=1.0, max_delay=8.0, clock=clock) for _ in range(2))
    assert gate.wait() == 0.0 and gate.reason == ""
    assert [gate.refuse("QuotaExceeded: x") for _ in range(5)] == [1, 2, 4, 8, 8]
    assert gate.wait() == 8.0 and gate.reason == "QuotaExceeded: x"
    assert other.wait() == 0.0  # one job's back-off never holds another (a gate per job)
    clock.now += 5
    assert gate.wait() == 3.0
    clock.now += 3
    assert gate.wait() == 0.0
    assert gate.reason == "QuotaExceeded: x"  # still waiting until a create succeeds
    # A create that succeeds drops the job's gate; a new episode starts over.
    assert CreateGate(base_delay=1.0, clock=clock).refuse("QuotaExceeded: y") == 1.0


def test_retry_after_is_honoured() -> None:
    gate = CreateGate(base_delay=1.0, clock=FakeClock())
    assert gate.refuse("x", retry_after=30.0) == 30.0


def _plan(w: World, refused: str) -> None:
    job = w.job
    inputs = PlanInputs(list(w.pods.values()), set(w.services), set(w.extras),
                        create_refused=refused, now=w.now)
    w.apply(plan(job, w.desired, inputs,
                 succeeded=lambda o: w.plugins.job_succeeded(job, w.framework, o)))


def test_the_job_says_it_waits_for_quota_and_is_not_failed() -> None:
    w = World.of(mx_doc(workers=2))
    _plan(w, "")
    w.remove("mx-worker-1")  # the backend could not create it: quota
    _plan(w, REFUSED)
    created = next(c for c in w.status.conditions if c.type.value == "Created")
    assert (created.status, created.reason) == ("True", "QuotaExceeded")
    assert "exceeded quota: team-a" in created.message
    assert w.state == "Created"
    worker = w.status.replica_statuses["Worker"]
    assert worker.pending_reason == REFUSED
    assert w.status.replica_statuses["Server"].pending_reason == ""  # its pod exists
    # The quota is raised: the next create goes through and the reason goes back.
    _plan(w, "")
    created = next(c for c in w.status.conditions if c.type.value == "Created")
    assert (created.status, created.reason) == ("True", "JobCreated")
    assert w.status.replica_statuses["Worker"].pending_reason == ""


def test_a_job_that_finishes_while_a_quota_refuses_some_replicas_says_so_no_longer() -> None:
    """Seen in CI: a quota of one pod let the MxJob's Workers in one by one (each freed the
    slot when it ended) while it kept refusing the scheduler and server; the job Succeeded and
    its Created condition went on saying QuotaExceeded, as if it still waited."""
    w = World.of(mx_doc(workers=2))
    _plan(w, "")
    for name in ("mx-scheduler-0", "mx-server-0"):
        w.remove(name)  # never admitted by the quota
    w.succeed("mx-worker-0", "mx-worker-1")
    _plan(w, REFUSED)
    assert w.state == "Succeeded", w.status
    created = next(c for c in w.status.conditions if c.type.value == "Created")
    assert (created.status, created.reason) == ("True", "JobCreated"), created
    assert all(r.pending_reason == "" for r in w.status.replica_statuses.values()), w.status
