"""An in-memory cache of reduced objects of one resource, kept by list-then-watch.

Why (kopf's and client-go's shape): the operator must never LIST per event nor poll per job.
Each informer follows its resource with the one list-then-watch loop (`listwatch.ListWatch`:
list once, watch from the list's resourceVersion with bookmarks, list again only on 410
Gone). A `transform` keeps only the fields the operator needs, which is what keeps 20,000
pods in a few tens of megabytes. Handlers are called for every change, including the
differences a re-list reveals (objects deleted while the watch was down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from trainjobs.kube.listwatch import LISTED, LISTING, SYNCED, Backoff, ListWatch, Source
from trainjobs.kube.resources import Resource

__all__ = ["Backoff", "Informer"]

log = logging.getLogger(__name__)
T = TypeVar("T")
Key = tuple[str, str]  # (namespace, name)


#: Seconds of event handling after which an informer lets the event loop run other tasks.
YIELD_EVERY = 0.005


class Informer(Generic[T]):
    """Caches `transform(obj)` for every object of `resource` in `namespace` (None: all)."""

    def __init__(
        self,
        kube: Source,
        resource: Resource,
        namespace: str | None,
        transform: Callable[[dict[str, Any]], T | None],
        on_change: Callable[[str, Key, T | None, T | None], None],
        label_selector: str = "",
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.transform = transform
        self.on_change = on_change
        self.store: dict[Key, T] = {}
        self.synced = asyncio.Event()
        self.listwatch = ListWatch(kube, resource, namespace, label_selector=label_selector,
                                   watch_timeout=watch_timeout, clock=clock, sleep=sleep)
        self._clock = clock
        self._sleep = sleep
        self._yielded = 0.0

    def __repr__(self) -> str:
        return f"Informer({self.resource.plural}, ns={self.namespace or '*'})"

    async def run(self) -> None:
        """List and watch forever; transient errors back off (briefly) and retry."""
        while True:
            try:
                await self._follow()
            except Exception:  # a bug here must not leave the cache silently stale
                delay = self.listwatch.backoff.next()
                log.exception("%r failed; listing again in %.1fs", self, delay)
                self.listwatch.resource_version = ""
                await self._sleep(delay)

    async def _follow(self) -> None:
        fresh: dict[Key, T] = {}
        async with contextlib.aclosing(self.listwatch.events()) as events:
            async for event in events:
                if event.type == LISTING:
                    fresh = {}
                elif event.type == LISTED:
                    # Reduced as each page comes: whole objects are never all in memory at once.
                    value = self.transform(event.object)
                    if value is not None:
                        fresh[_key(event.object)] = value
                elif event.type == SYNCED:
                    self._replace(fresh)
                    fresh = {}
                else:
                    if self._clock() - self._yielded > YIELD_EVERY:
                        # A burst of events (a chunk of the stream holds many, and a pod with a
                        # large environment costs a fraction of a millisecond to decode) is
                        # handled without an await in between: let the other tasks run every few
                        # milliseconds.
                        await asyncio.sleep(0)
                        self._yielded = self._clock()
                    self._apply(event.type, event.object)

    def _replace(self, fresh: dict[Key, T]) -> None:
        """A (re-)list completed: its objects replace the cache; handlers see the difference."""
        old = self.store
        self.store = fresh
        for key in old.keys() - fresh.keys():
            self.on_change("DELETED", key, None, old[key])
        for key, value in fresh.items():
            if old.get(key) != value:
                self.on_change("ADDED" if key not in old else "MODIFIED", key, value,
                               old.get(key))
        self.synced.set()

    def _apply(self, etype: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        old = self.store.get(key)
        if etype == "DELETED":
            self.store.pop(key, None)
            new = None
        else:
            new = self.transform(obj)
            if new is None:
                self.store.pop(key, None)
            else:
                self.store[key] = new
        if new != old:
            # (An object the transform drops, e.g. a labelled pod no job of ours owns,
            # changes nothing cached: no handler runs for it.)
            self.on_change(etype, key, new, old)


def _key(obj: dict[str, Any]) -> Key:
    """(namespace, name); the namespace interned: one string for every object cached in it,
    not one per object."""
    meta = obj.get("metadata") or {}
    return (sys.intern(str(meta.get("namespace", ""))), str(meta.get("name", "")))
