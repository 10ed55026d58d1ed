"""The work queue's scheduling: a worker hands the loop back between keys, so that a run of
reconciles that never suspend (nothing to write) cannot hold the event loop while watch
events and timers wait (issue 28.4, bench.bigjob); keys are de-duplicated and one key is
never handled twice at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from trainjobs.operator.workqueue import WorkQueue


@asynccontextmanager
async def _working(queue: WorkQueue, handler: Callable[[str], Awaitable[None]],
                   workers: int = 1) -> AsyncIterator[None]:
    """The queue's workers run `handler` inside the block; closed and awaited after it."""
    runner = asyncio.create_task(queue.run(handler, workers=workers))
    try:
        yield
    finally:
        await queue.close()
        await asyncio.wait_for(runner, 5)


async def _run_until(queue: WorkQueue, handler: Callable[[str], Awaitable[None]],
                     done: asyncio.Event) -> None:
    async with _working(queue, handler):
        await asyncio.wait_for(done.wait(), 5)


async def test_a_worker_lets_ready_callbacks_run_between_keys() -> None:
    queue = WorkQueue()
    seen: list[str] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def handler(key: str) -> None:  # never suspends, as a reconcile with nothing to do
        seen.append(key)
        if key == "a":
            loop.call_soon(seen.append, "watch event")
        if key == "c":
            done.set()

    for key in "abc":
        queue.add(key)
    await _run_until(queue, handler, done)
    assert seen == ["a", "watch event", "b", "c"]


async def test_a_key_added_while_handled_is_handled_once_more_after() -> None:
    queue = WorkQueue()
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(key: str) -> None:
        seen.append(key)
        if len(seen) == 1:
            queue.add("a")  # an event for the job while it is reconciled
            queue.add("a")  # and another: collapsed with it
        else:
            done.set()

    queue.add("a")
    queue.add("a")
    await _run_until(queue, handler, done)
    assert seen == ["a", "a"]


class _LoopClock:
    """The running loop's clock, moved by hand: timers fire when the test says time passed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.now = 1000.0
        self._loop = loop
        loop.time = lambda: self.now  # type: ignore[method-assign]

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for _ in range(20):  # due timers run, then what they queued
            await asyncio.sleep(0)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_events_for_a_held_key_are_batched_into_one_pass_when_the_hold_ends() -> None:
    clock = _LoopClock(asyncio.get_running_loop())
    queue = WorkQueue()
    seen: list[tuple[str, float]] = []

    async def handler(key: str) -> None:
        seen.append((key, round(clock.now - 1000.0, 3)))
        if key == "big":
            queue.hold(key, 0.2)  # as the controller holds a large job after its reconcile

    async with _working(queue, handler, workers=2):
        queue.add("big")
        await _settle()
        assert seen == [("big", 0.0)]
        for _ in range(3):  # its pods' events
            await clock.advance(0.05)
            queue.add("big")
            await _settle()
        queue.add("small")  # another job is not held
        await _settle()
        assert seen == [("big", 0.0), ("small", 0.15)]
        await clock.advance(0.049)
        assert len(seen) == 2
        await clock.advance(0.002)  # the hold ends: one pass for the three events
        assert seen[2:] == [("big", 0.201)]
        await clock.advance(1.0)
        assert len(seen) == 3


async def test_a_timer_set_for_a_held_key_still_fires_when_set() -> None:
    clock = _LoopClock(asyncio.get_running_loop())
    queue = WorkQueue()
    seen: list[float] = []

    async def handler(key: str) -> None:
        seen.append(round(clock.now - 1000.0, 3))
        if len(seen) == 1:
            queue.hold(key, 0.5)
            queue.add_after(key, 0.1)  # a requeue the plan asked for

    async with _working(queue, handler):
        queue.add("big")
        await _settle()
        await clock.advance(0.1)
        assert seen == [0.0, 0.1]


async def test_a_dropped_key_is_no_longer_held() -> None:
    clock = _LoopClock(asyncio.get_running_loop())
    queue = WorkQueue()
    seen: list[float] = []

    async def handler(key: str) -> None:
        seen.append(clock.now)
        queue.hold(key, 0.5)

    async with _working(queue, handler):
        queue.add("job")
        await _settle()
        queue.drop("job")  # the job was deleted: its last pass is not delayed
        queue.add("job")
        await _settle()
        assert seen == [1000.0, 1000.0]
