"""A de-duplicating work queue of job keys, serialized per key, with per-key back-off.

Why this shape (client-go's workqueue): many events for one job collapse into one reconcile;
one job is never reconciled by two workers at once (events for it are handled in order), while
different jobs run in parallel up to the configured concurrency; a job that keeps failing
backs off exponentially without delaying any other. A key may be held for a while after it
was handled (`hold`): what asks for it meanwhile is batched into one pass when the hold ends,
as the Job controller of kube-controller-manager batches a Job's pod events
(`syncJobBatchPeriod`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from trainjobs.operator import metrics

__all__ = ["WorkQueue"]


class WorkQueue:
    def __init__(self, base_delay: float = 0.05, max_delay: float = 60.0) -> None:
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._held: dict[str, float] = {}  # key -> loop time its hold ends
        self._ready = asyncio.Condition()
        self._base, self._max = base_delay, max_delay
        self._closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str, *, now: bool = False) -> None:
        """Queue `key` unless it is queued already; if it is being processed, once more after;
        if it is held (`hold`), when the hold ends, unless `now`."""
        if self._closed:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        until = None if now else self._held.get(key)
        if until is not None:
            wait = until - asyncio.get_running_loop().time()
            if wait > 0:
                self.add_after(key, wait)
                return
            del self._held[key]
        self._queued.add(key)
        self._queue.append(key)
        metrics.QUEUE_DEPTH.set(len(self._queue))
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._ready:
            self._ready.notify()

    def add_after(self, key: str, delay: float) -> None:
        """Queue `key` after `delay` seconds (an earlier request wins over a later one)."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        timer = self._timers.get(key)
        when = loop.time() + delay
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key, now=True)  # a requested time, a retry's or a hold's end: it has come

    def hold(self, key: str, seconds: float) -> None:
        """Batch what asks for `key` in the next `seconds` into one pass at their end; timers
        set for it (a retry, a requested time) still fire when set. For a key just handled: a
        job whose pods change all the time is then reconciled once per hold, not per event."""
        if seconds > 0:
            self._held[key] = asyncio.get_running_loop().time() + seconds

    def retry(self, key: str, delay: float | None = None) -> float:
        """Queue `key` again after an error, backing off exponentially; returns the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        backoff = min(self._base * (2.0 ** failures), self._max)
        wait = max(delay or 0.0, backoff)
        self.add_after(key, wait)
        return wait

    def forget(self, key: str) -> None:
        """The key was handled well: reset its back-off."""
        self._failures.pop(key, None)

    def drop(self, key: str) -> None:
        """The key's object is gone: forget its back-off and hold."""
        self._failures.pop(key, None)
        self._held.pop(key, None)

    async def _get(self) -> str | None:
        async with self._ready:
            while not self._queue and not self._closed:
                await self._ready.wait()
            if self._closed and not self._queue:
                return None
            key = self._queue.popleft()
            self._queued.discard(key)
            self._processing.add(key)
            metrics.QUEUE_DEPTH.set(len(self._queue))
            return key

    def _done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    async def run(self, handler: Callable[[str], Awaitable[None]], workers: int) -> None:
        """Process keys with `workers` concurrent workers until `close()`."""
        async def worker() -> None:
            while (key := await self._get()) is not None:
                try:
                    await handler(key)
                finally:
                    self._done(key)
                # Neither `_get` nor a reconcile that writes nothing suspends: without this,
                # one worker would run key after key while watch events, timers and the
                # other workers wait (bench.bigjob saw 30-60 ms chains of them).
                await asyncio.sleep(0)

        await asyncio.gather(*(worker() for _ in range(workers)))

    async def close(self) -> None:
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        async with self._ready:
            self._ready.notify_all()
