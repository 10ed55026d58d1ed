"""The status write budget: a burst at once, then turns spread at the rate, on a fake clock."""

from __future__ import annotations

import pytest

from tests.unit.controller_harness import FakeClock
from trainjobs.operator.write_budget import WriteBudget


def test_a_burst_at_once_then_turns_spread_at_the_rate() -> None:
    clock = FakeClock()
    budget = WriteBudget(4.0, clock)
    now = clock.monotonic()
    assert [budget.reserve() for _ in range(4)] == [now] * 4  # one second's worth
    turns = [budget.reserve() - now for _ in range(4)]
    assert turns == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert budget.available() == pytest.approx(-4.0)


def test_refills_with_time_up_to_the_burst() -> None:
    clock = FakeClock()
    budget = WriteBudget(2.0, clock)
    for _ in range(2):
        budget.reserve()
    clock.advance(0.5)
    assert budget.available() == pytest.approx(1.0)
    clock.advance(60)
    assert budget.available() == pytest.approx(2.0)  # not more than the burst
    assert budget.reserve() == clock.monotonic()


def test_writes_over_a_long_while_never_exceed_the_rate() -> None:
    """5,000 askers each reserving once: their turns keep to `rate` per second after the
    burst, however they ask."""
    clock = FakeClock()
    budget = WriteBudget(20.0, clock)
    start = clock.monotonic()
    turns = []
    for i in range(5000):
        if i % 100 == 0:
            clock.advance(0.01)
        turns.append(budget.reserve())
    for window in range(0, 250):
        lo = start + window
        assert sum(lo <= t < lo + 1 for t in turns) <= 20 + 20  # burst + rate
    assert max(turns) - start == pytest.approx((5000 - 20) / 20.0, abs=0.1)


def test_a_small_rate_still_has_a_burst_of_one() -> None:
    clock = FakeClock()
    budget = WriteBudget(0.5, clock)
    assert budget.reserve() == clock.monotonic()
    assert budget.reserve() == pytest.approx(clock.monotonic() + 2.0)


def test_a_rate_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="above 0"):
        WriteBudget(0, FakeClock())
