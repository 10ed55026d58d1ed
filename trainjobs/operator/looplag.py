"""The event loop's lag: how late a task that sleeps a fixed interval wakes up.

Why: everything the operator does shares one event loop, so a callback or a reconcile that
holds the CPU stalls every other job, the watches and /readyz alike. The probe's overshoot is
the delay every ready task suffered meanwhile; the histogram shows how often, the gauge the
worst so far (docs/operator.md; docs/benchmarks.md, "One large job beside small ones").
"""

from __future__ import annotations

import asyncio
import time

from trainjobs.operator import metrics

__all__ = ["PROBE_INTERVAL", "probe_loop_lag"]

#: How often the probe wakes up: short enough to see stalls of a few tens of milliseconds
#: (a stall is seen in full when it starts while the probe sleeps), cheap (50 wakeups/s).
PROBE_INTERVAL = 0.02


async def probe_loop_lag(interval: float = PROBE_INTERVAL) -> None:
    """Observe the loop's lag forever (until cancelled).

    Of each lag, the part the process spent on the CPU (its CPU time over the same window,
    all threads) is what the operator itself caused; the rest it waited for a CPU the machine
    gave to others. The worst of the first kind is kept apart (LOOP_LAG_BUSY_MAX): on a
    crowded machine the plain maximum measures the machine."""
    loop = asyncio.get_running_loop()
    worst = worst_busy = 0.0
    while True:
        started, cpu = loop.time(), time.process_time()
        await asyncio.sleep(interval)
        lag = max(0.0, loop.time() - started - interval)
        busy = min(lag, time.process_time() - cpu)
        metrics.LOOP_LAG.observe(lag)
        if lag > worst:
            worst = lag
            metrics.LOOP_LAG_MAX.set(worst)
        if busy > worst_busy:
            worst_busy = busy
            metrics.LOOP_LAG_BUSY_MAX.set(worst_busy)
