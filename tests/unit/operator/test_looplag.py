"""The loop-lag probe sees a stall of the event loop (issue 15.1c): a callback that holds the
CPU for 200 ms delays every task, and trainjobs_event_loop_lag_seconds must show it."""

from __future__ import annotations

import asyncio
import time

from trainjobs.operator import metrics
from trainjobs.operator.looplag import probe_loop_lag


def _count() -> float:
    return metrics.REGISTRY.get_sample_value("trainjobs_event_loop_lag_seconds_count") or 0.0


def _over(seconds: float) -> float:
    total = _count()
    below = metrics.REGISTRY.get_sample_value("trainjobs_event_loop_lag_seconds_bucket",
                                              {"le": str(seconds)}) or 0.0
    return total - below


async def _stall_beside_the_probe() -> None:
    probe = asyncio.create_task(probe_loop_lag(0.01))
    await asyncio.sleep(0.05)
    time.sleep(0.2)  # a job's CPU work done on the loop: nothing else runs meanwhile
    await asyncio.sleep(0.05)
    probe.cancel()
    await asyncio.gather(probe, return_exceptions=True)


def test_a_stall_shows_in_the_histogram_and_the_maximum() -> None:
    count, over = _count(), _over(0.1)
    asyncio.run(_stall_beside_the_probe())
    assert _count() - count >= 5, "the probe kept observing"
    assert _over(0.1) - over >= 1, "the 200 ms stall is in a bucket above 100 ms"
    worst = metrics.REGISTRY.get_sample_value("trainjobs_event_loop_lag_max_seconds")
    assert worst is not None and 0.15 <= worst < 5.0, worst
