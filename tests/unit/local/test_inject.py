"""`trainjobs run --inject`'s language (trainjobs/local/inject.py): what parses, the one-line
refusals, the replica names a user may give, and when an injection is due (times passed in,
as the injector's clock would)."""

from __future__ import annotations

import pytest

from trainjobs.errors import InjectInvalid
from trainjobs.local.inject import (
    Action,
    Injection,
    Sighting,
    Trigger,
    arm,
    parse_duration,
    parse_injection,
    resolve_replica,
)
from trainjobs.plugin.types import Replica

MXNET = [Replica("Scheduler", 0), Replica("Server", 0), Replica("Server", 1),
         Replica("Worker", 0), Replica("Worker", 1), Replica("Worker", 2)]


def test_the_forms_parse() -> None:
    assert parse_injection("kill Worker-1 at-step=200") == Injection(
        "kill Worker-1 at-step=200", Action.KILL, "Worker-1", at_step=200)
    assert parse_injection("  exit=3   PS after=1m30s  ") == Injection(
        "exit=3 PS after=1m30s", Action.EXIT, "PS", code=3, after=90.0)
    assert parse_injection("HANG worker-0 after=500ms for=10s attempt=1 restart=2 times=3") \
        == Injection("HANG worker-0 after=500ms for=10s attempt=1 restart=2 times=3",
                     Action.HANG, "worker-0", after=0.5, hold=10.0, attempt=1, restart=2,
                     times=3)
    assert parse_injection("exit=0 Worker-0").code == 0
    assert parse_injection("kill Scheduler").after is None  # due as soon as it runs


@pytest.mark.parametrize(("value", "seconds"), [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0),
                                                ("1h", 3600.0), ("1.5s", 1.5),
                                                ("1m30s", 90.0)])
def test_durations(value: str, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(("text", "problem"), [
    ("", "empty; expected ACTION REPLICA [CONDITION ...]"),
    ("stop Worker-1", "unknown action 'stop' (kill, hang or exit=CODE"),
    ("kill=3 Worker-1", "unknown action 'kill=3'"),
    ("exit Worker-1", "'exit': exit needs a code 0..255"),
    ("exit=256 Worker-1", "exit needs a code 0..255"),
    ("exit=-1 Worker-1", "exit needs a code 0..255"),
    ("kill", "no replica named after 'kill'"),
    ("kill after=3s", "no replica named after 'kill'"),
    ("kill Worker-1 30s", "'30s': expected CONDITION=VALUE after the replica"),
    ("kill Worker-1 after=", "'after=': expected CONDITION=VALUE"),
    ("kill Worker-1 when=3", "unknown condition 'when' (after, at-step, attempt, restart, "
                             "times, for)"),
    ("kill Worker-1 after=3s after=4s", "after given twice"),
    ("kill Worker-1 after=30", "after=30: a duration needs a unit (30s, 500ms, 2m, 1m30s)"),
    ("kill Worker-1 after=soon", "after=soon: not a duration"),
    ("kill Worker-1 at-step=-5", "at-step=-5: must be a whole number of at least 0"),
    ("kill Worker-1 attempt=x", "attempt=x: must be a whole number"),
    ("kill Worker-1 times=0", "times=0: must be a whole number of at least 1"),
    ("kill Worker-1 for=3s", "for= is for hang only"),
])
def test_a_bad_injection_is_one_line_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(InjectInvalid) as caught:
        parse_injection(text)
    message = str(caught.value)
    assert message.startswith(f"--inject {text!r}: ")
    assert problem in message
    assert "\n" not in message


@pytest.mark.parametrize(("name", "pod"), [
    ("Worker-1", "mx-worker-1"), ("worker-1", "mx-worker-1"), ("WORKER-2", "mx-worker-2"),
    ("Scheduler", "mx-scheduler-0"), ("scheduler", "mx-scheduler-0"),
    ("Scheduler-0", "mx-scheduler-0"), ("mx-server-1", "mx-server-1"),
    ("MX-Server-1", "mx-server-1"),
])
def test_replica_names_as_users_see_them(name: str, pod: str) -> None:
    assert resolve_replica(parse_injection(f"kill {name}"), "mx", MXNET) == pod


@pytest.mark.parametrize(("name", "problem"), [
    ("Worker", "Worker has 3 replicas: name one (Worker-0..2)"),
    ("Worker-3", "no replica 'Worker-3' in job mx (it has Scheduler, Server-0..1, "
                 "Worker-0..2)"),
    ("Wroker-1", "no replica 'Wroker-1'"),
    ("Worker1", "no replica 'Worker1'"),
    ("Worker-01", "no replica 'Worker-01'"),
    ("other-worker-1", "no replica 'other-worker-1'"),
])
def test_a_replica_the_job_lacks_is_refused(name: str, problem: str) -> None:
    with pytest.raises(InjectInvalid) as caught:
        arm([parse_injection(f"kill {name} after=1s")], "mx", MXNET)
    assert str(caught.value).startswith(f"--inject 'kill {name} after=1s': ")
    assert problem in str(caught.value)
    assert "\n" not in str(caught.value)


def _seen(process: str = "p1", since: float = 100.0, attempt: int = 0, restarts: int = 0,
          step: int | None = None) -> Sighting:
    return Sighting(process, since, attempt, restarts, step)


def _trigger(text: str) -> Trigger:
    return Trigger(parse_injection(text), "mx-worker-1")


def test_after_counts_from_when_the_process_was_first_seen() -> None:
    trigger = _trigger("kill Worker-1 after=30s")
    assert trigger.due(_seen(), 129.9) is None
    assert trigger.due(_seen(), 130.0) == "after 30.0s, attempt 0, restarts 0"


def test_at_step_waits_for_a_report_of_that_step() -> None:
    trigger = _trigger("kill Worker-1 at-step=200")
    assert trigger.due(_seen(step=None), 500.0) is None
    assert trigger.due(_seen(step=199), 500.0) is None
    assert trigger.due(_seen(step=205, attempt=1), 101.0) == "at step 205, attempt 1, restarts 0"


def test_after_and_at_step_both_hold() -> None:
    trigger = _trigger("kill Worker-1 at-step=10 after=5s")
    assert trigger.due(_seen(step=50), 104.0) is None
    assert trigger.due(_seen(step=9), 200.0) is None
    assert trigger.due(_seen(step=10), 105.0) == "at step 10 after 5.0s, attempt 0, restarts 0"


def test_no_condition_fires_at_once() -> None:
    assert _trigger("exit=3 Worker-1").due(_seen(), 100.0) == \
        "after 0.0s, attempt 0, restarts 0"


def test_attempt_and_restart_restrict_the_process() -> None:
    trigger = _trigger("kill Worker-1 attempt=1")
    assert trigger.due(_seen(attempt=0), 100.0) is None
    assert trigger.due(_seen(attempt=1), 100.0) is not None
    trigger = _trigger("kill Worker-1 restart=2")
    assert trigger.due(_seen(restarts=1), 100.0) is None
    assert trigger.due(_seen(restarts=2), 100.0) is not None


def test_it_fires_once_unless_times_says_otherwise_never_twice_on_one_process() -> None:
    once = _trigger("kill Worker-1 after=1s")
    assert once.fire(_seen("p1")) == "1 of 1"
    assert once.due(_seen("p2", since=200.0), 300.0) is None
    assert once.unfired() is None

    twice = _trigger("kill Worker-1 after=1s times=2")
    assert twice.fire(_seen("p1")) == "1 of 2"
    assert twice.due(_seen("p1"), 300.0) is None  # the same process: not again
    assert twice.unfired() == ("inject (kill Worker-1 after=1s times=2): fired 1 of 2 times: "
                               "its conditions did not come true on a running mx-worker-1 "
                               "before the run ended")
    assert twice.due(_seen("p2", since=200.0), 200.5) is None
    assert twice.due(_seen("p2", since=200.0), 201.0) is not None
    assert twice.fire(_seen("p2")) == "2 of 2"
    assert twice.due(_seen("p3", since=300.0), 400.0) is None


def test_one_that_never_fired_says_so() -> None:
    assert _trigger("hang Worker-1 at-step=9").unfired() == (
        "inject (hang Worker-1 at-step=9): never fired: its conditions did not come true on "
        "a running mx-worker-1 before the run ended")
