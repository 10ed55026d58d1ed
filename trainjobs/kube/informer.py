"""List-then-watch of one resource into an in-memory cache of reduced objects.

Why (kopf's and client-go's shape): the operator must never LIST per event nor poll per job.
Each informer lists once, then watches from the list's resourceVersion with bookmarks (so a
reconnect resumes where it stopped), and lists again only when the server answers 410 Gone.
A `transform` keeps only the fields the operator needs, which is what keeps 20,000 pods in a
few tens of megabytes. Handlers are called for every change, including the differences a
re-list reveals (objects deleted while the watch was down).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from trainjobs.kube.api import Kube
from trainjobs.kube.errors import ApiError, ApiGone, WatchDropped, api_error
from trainjobs.kube.resources import Resource

__all__ = ["Backoff", "Informer"]

log = logging.getLogger(__name__)
T = TypeVar("T")
Key = tuple[str, str]  # (namespace, name)
Handler = Callable[[str, Key, "Any | None", "Any | None"], None]


@dataclass
class Backoff:
    """Delays between reconnect attempts: doubling from `first`, capped at `most`.

    Why so low a cap: an informer that backs off to 16 s lags an API server that came back by
    up to 16 s (issue 15.7). Retrying once a second at most costs the API server one request
    per informer per second while it is gone, and recovers within a second of its return.
    `reset` after every success (a list, a watch the server accepted).
    """

    first: float = 0.1
    most: float = 1.0
    _next: float = 0.0

    def next(self) -> float:
        delay = self._next or self.first
        self._next = min(delay * 2, self.most)
        return delay

    def reset(self) -> None:
        self._next = 0.0


#: Seconds of event handling after which an informer lets the event loop run other tasks.
YIELD_EVERY = 0.005


class Informer(Generic[T]):
    """Caches `transform(obj)` for every object of `resource` in `namespace` (None: all)."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str | None,
        transform: Callable[[dict[str, Any]], T | None],
        on_change: Callable[[str, Key, T | None, T | None], None],
        label_selector: str = "",
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.transform = transform
        self.on_change = on_change
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.store: dict[Key, T] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.backoff = Backoff()
        self._clock = clock
        self._sleep = sleep
        self._opened = 0.0
        self._yielded = 0.0

    def __repr__(self) -> str:
        return f"Informer({self.resource.plural}, ns={self.namespace or '*'})"

    async def run(self) -> None:
        """List and watch forever; transient errors back off (briefly) and retry."""
        while True:
            try:
                if not self.resource_version:
                    await self._relist()
                    self.backoff.reset()
                await self._watch()
            except WatchDropped as exc:
                # Watch again from where it was; back off only when drops come in quick
                # succession (a flapping connection), not after a watch that worked a while.
                log.info("%r: %s; watching again", self, exc)
                if self._clock() - self._opened < 1.0:
                    await self._sleep(self.backoff.next())
            except ApiGone:
                log.info("%r: resourceVersion expired, listing again", self)
                self.resource_version = ""
                continue
            except ApiError as exc:
                delay = self.backoff.next()
                log.warning("%r: %s; retrying in %.1fs", self, exc, delay)
                await self._sleep(delay)
            except (ValueError, KeyError) as exc:  # a malformed event: re-list to be safe
                log.warning("%r: bad watch event (%s); listing again", self, exc)
                self.resource_version = ""
            except Exception:  # a bug here must not leave the cache silently stale
                delay = self.backoff.next()
                log.exception("%r failed; listing again in %.1fs", self, delay)
                self.resource_version = ""
                await self._sleep(delay)

    def _on_open(self) -> None:
        """The API server accepted the watch: it answers again, so the next failure starts
        backing off from the shortest delay."""
        self._opened = self._clock()
        self.backoff.reset()

    async def _relist(self) -> None:
        fresh: dict[Key, T] = {}
        rv = ""
        # Reduce page by page: whole objects are never all in memory at once.
        async for items, page_rv in self.kube.list_pages(self.resource, self.namespace,
                                                         label_selector=self.label_selector):
            rv = page_rv
            for obj in items:
                value = self.transform(obj)
                if value is not None:
                    fresh[_key(obj)] = value
        old = self.store
        self.store = fresh
        self.resource_version = rv
        for key in old.keys() - fresh.keys():
            self.on_change("DELETED", key, None, old[key])
        for key, value in fresh.items():
            if old.get(key) != value:
                self.on_change("ADDED" if key not in old else "MODIFIED", key, value,
                               old.get(key))
        self.synced.set()

    async def _watch(self) -> None:
        async for event in self.kube.watch(self.resource, self.namespace, self.resource_version,
                                           label_selector=self.label_selector,
                                           timeout_seconds=self.watch_timeout,
                                           on_open=self._on_open):
            if self._clock() - self._yielded > YIELD_EVERY:
                # A burst of events (a chunk of the stream holds many, and a pod with a large
                # environment costs a fraction of a millisecond to decode) is handled without
                # an await in between: let the other tasks run every few milliseconds.
                await asyncio.sleep(0)
                self._yielded = self._clock()
            etype = event.get("type")
            obj = event.get("object") or {}
            if etype == "ERROR":
                # The object is a Status (410 Expired for a too old resourceVersion).
                raise api_error(int(obj.get("code", 500)), str(obj.get("reason", "")),
                                json.dumps(obj))
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if etype == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
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
            if rv:
                self.resource_version = rv
            if new != old:
                # (An object the transform drops, e.g. a labelled pod no job of ours owns,
                # changes nothing cached: no handler runs for it.)
                self.on_change(str(etype), key, new, old)


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))
