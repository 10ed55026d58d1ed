"""bench.progress's arithmetic: a report's latency runs from its send until the job's status
first shows its step or a later one; a report no status showed by the end is counted apart,
never as 0; the CDF it keeps ends at 100 %."""

from __future__ import annotations

from bench.progress import cdf, latencies


def test_a_report_waits_for_the_first_status_that_shows_its_step() -> None:
    sent = [(0, 1, 10.0), (0, 2, 15.0), (0, 3, 20.0), (1, 1, 11.0)]
    seen = {0: [(10.5, 1), (30.0, 3)], 1: []}
    found, missing = latencies(sent, seen, until=40.0)
    # step 2 was never shown itself: step 3's status (at 30) shows it.
    assert found == [0.5, 15.0, 10.0] and missing == 1


def test_a_status_after_the_end_does_not_count() -> None:
    found, missing = latencies([(0, 1, 10.0)], {0: [(50.0, 1)]}, until=40.0)
    assert found == [] and missing == 1


def test_a_status_seen_before_the_send_does_not_count() -> None:
    # (the same step shown again later: only a status after the send answers it)
    found, _ = latencies([(0, 5, 10.0)], {0: [(9.0, 5), (12.0, 5)]}, until=40.0)
    assert found == [2.0]


def test_cdf_is_ordered_and_ends_at_one() -> None:
    points = cdf([float(v) for v in range(1000, 0, -1)], points=10)
    assert points[-1] == (1000.0, 1.0)
    assert [p[0] for p in points] == sorted(p[0] for p in points)
    assert len(points) == 10 and cdf([]) == []
