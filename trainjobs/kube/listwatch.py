"""List-then-watch: the one loop that follows a resource, for the informer, the client and the
benchmarks' watcher.

Why one loop (client-go's Reflector): listing, then watching from the list's resourceVersion
with bookmarks, resuming a dropped watch from the last resourceVersion seen, listing again
only on 410 Gone (or an event it cannot read), and backing off briefly while the API server
does not answer, are easy to get subtly wrong; written once, they are fixed once. What to do
with the objects (cache them, yield them, time them) is the caller's; which errors are worth
retrying is the caller's `retry` (the CLI gives up when the cluster is unreachable, the
operator never does).

It reads through any `Source` with `Kube`'s `list_pages` and `watch` (the benchmarks' thin
aiohttp client is one), so the loop does not depend on the HTTP stack under it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainjobs.kube.errors import ApiError, ApiGone, WatchDropped, api_error
from trainjobs.kube.resources import Resource

__all__ = ["LISTED", "LISTING", "SYNCED", "Backoff", "ListWatch", "Source", "WatchEvent"]

log = logging.getLogger(__name__)

#: A (re-)list begins: what the previous list gave is to be replaced by what follows.
LISTING = "LISTING"
#: One object of the list.
LISTED = "LISTED"
#: The list is complete (the watch starts from its resourceVersion).
SYNCED = "SYNCED"


class Source(Protocol):
    """What the loop reads through: `Kube`'s paged list and watch."""

    def list_pages(self, resource: Resource, namespace: str | None, *,
                   label_selector: str = "", field_selector: str = ""
                   ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]: ...

    def watch(self, resource: Resource, namespace: str | None, resource_version: str, *,
              label_selector: str = "", field_selector: str = "", timeout_seconds: int = 300,
              on_open: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]: ...


@dataclass(frozen=True)
class WatchEvent:
    """`type`: LISTING, LISTED, SYNCED (from a list) or ADDED, MODIFIED, DELETED (from the
    watch); `object`: the object (empty for LISTING and SYNCED)."""

    type: str
    object: dict[str, Any] = field(default_factory=dict)


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


def _retry_all(_: ApiError) -> bool:
    return True


class ListWatch:
    """Follows `resource` in `namespace` (None: all namespaces) forever; `events()` yields
    what it sees. `resource_version`: watch from there instead of listing first.

    `retry(error)` says whether an API error other than a dropped watch or 410 Gone is
    retried (after a back-off) or raised to the caller (default: retried).
    """

    def __init__(self, source: Source, resource: Resource, namespace: str | None, *,
                 label_selector: str = "", field_selector: str = "",
                 resource_version: str = "", watch_timeout: int = 300,
                 retry: Callable[[ApiError], bool] = _retry_all,
                 backoff: Backoff | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.source = source
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resource_version = resource_version
        self.watch_timeout = watch_timeout
        self.retry = retry
        self.backoff = backoff or Backoff()
        self._clock = clock
        self._sleep = sleep
        self._opened = 0.0

    def __repr__(self) -> str:
        return f"ListWatch({self.resource.plural}, ns={self.namespace or '*'})"

    async def events(self) -> AsyncGenerator[WatchEvent, None]:
        """List (unless a resourceVersion is known), then watch; forever."""
        while True:
            try:
                if not self.resource_version:
                    async for event in self._list():
                        yield event
                async for event in self._watch():
                    yield event
            except WatchDropped as exc:
                # Watch again from where it was; back off only when drops come in quick
                # succession (a flapping connection), not after a watch that worked a while.
                log.info("%r: %s; watching again", self, exc)
                if self._clock() - self._opened < 1.0:
                    await self._sleep(self.backoff.next())
            except ApiGone:
                log.info("%r: resourceVersion expired, listing again", self)
                self.resource_version = ""
            except ApiError as exc:
                if not self.retry(exc):
                    raise
                delay = self.backoff.next()
                log.warning("%r: %s; retrying in %.1fs", self, exc, delay)
                await self._sleep(delay)
            except (ValueError, KeyError) as exc:  # a malformed event: list again to be safe
                log.warning("%r: bad watch event (%s); listing again", self, exc)
                self.resource_version = ""

    async def _list(self) -> AsyncIterator[WatchEvent]:
        yield WatchEvent(LISTING)
        rv = ""
        # Page by page: whole objects are never all in memory at once.
        async for items, page_rv in self.source.list_pages(
                self.resource, self.namespace, label_selector=self.label_selector,
                field_selector=self.field_selector):
            rv = page_rv
            for obj in items:
                yield WatchEvent(LISTED, obj)
        self.resource_version = rv
        self.backoff.reset()
        yield WatchEvent(SYNCED)

    async def _watch(self) -> AsyncIterator[WatchEvent]:
        async for event in self.source.watch(
                self.resource, self.namespace, self.resource_version,
                label_selector=self.label_selector, field_selector=self.field_selector,
                timeout_seconds=self.watch_timeout, on_open=self._on_open):
            etype = event.get("type")
            obj = event.get("object") or {}
            if etype == "ERROR":
                # The object is a Status (410 Expired for a too old resourceVersion).
                raise api_error(int(obj.get("code", 500)), str(obj.get("reason", "")),
                                json.dumps(obj))
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if etype in ("ADDED", "MODIFIED", "DELETED"):
                yield WatchEvent(etype, obj)
            if rv:
                self.resource_version = str(rv)

    def _on_open(self) -> None:
        """The API server accepted the watch: it answers again, so the next failure starts
        backing off from the shortest delay."""
        self._opened = self._clock()
        self.backoff.reset()
