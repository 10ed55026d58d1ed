"""The one list-then-watch loop (`trainjobs.kube.listwatch`) that the informer, the client's
watch and the benchmarks' watcher share: what it yields, where it resumes, when it lists
again, and which errors reach the caller. The source is a scripted stand-in for `Kube`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from trainjobs.kube import ApiConnectionError, ApiForbidden, Resource, WatchDropped
from trainjobs.kube.listwatch import LISTED, LISTING, SYNCED, ListWatch, WatchEvent

PODS = Resource("Pod", "pods")


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class Script:
    """Lists answer `pages`; each watch plays the next entry of `watches`: a list of events,
    then an exception to raise (or None: the watch hangs, as a quiet one does)."""

    def __init__(self, pages: list[list[dict[str, Any]]],
                 watches: list[tuple[list[dict[str, Any]], BaseException | None]]) -> None:
        self.pages = pages
        self.watches = watches
        self.lists = 0
        self.watched_from: list[str] = []

    async def list_pages(self, resource: Resource, namespace: str | None, *,
                         label_selector: str = "", field_selector: str = ""
                         ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        self.lists += 1
        for page in self.pages:
            yield page, "10"

    async def watch(self, resource: Resource, namespace: str | None, resource_version: str,
                    *, label_selector: str = "", field_selector: str = "",
                    timeout_seconds: int = 300, on_open: Callable[[], None] | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        self.watched_from.append(resource_version)
        if not self.watches:
            await asyncio.Event().wait()
        events, error = self.watches.pop(0)
        for event in events:
            yield event
        if error is not None:
            raise error
        await asyncio.Event().wait()


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0)


async def collect(follow: ListWatch, count: int) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    async for event in follow.events():
        out.append(event)
        if len(out) == count:
            break
    return out


def test_it_lists_then_watches_from_the_lists_version_and_resumes_after_a_drop() -> None:
    source = Script(
        pages=[[pod("a", "5")], [pod("b", "6")]],
        watches=[([{"type": "MODIFIED", "object": pod("a", "11")},
                   {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
                  WatchDropped("watch dropped: reset")),
                 ([{"type": "DELETED", "object": pod("b", "16")}], None)])
    follow = ListWatch(source, PODS, "ns", sleep=_no_sleep)
    events = asyncio.run(collect(follow, 6))
    assert [(e.type, e.object.get("metadata", {}).get("name")) for e in events] == [
        (LISTING, None), (LISTED, "a"), (LISTED, "b"), (SYNCED, None),
        ("MODIFIED", "a"), ("DELETED", "b")]
    # Watched from the list's version, then resumed from the bookmark's: no second list.
    assert source.watched_from == ["10", "15"]
    assert source.lists == 1


def test_an_expired_version_lists_again() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    source = Script(pages=[[pod("a", "5")]], watches=[([gone], None)])
    follow = ListWatch(source, PODS, "ns", sleep=_no_sleep)
    events = asyncio.run(collect(follow, 6))
    assert [e.type for e in events] == [LISTING, LISTED, SYNCED, LISTING, LISTED, SYNCED]
    assert source.lists == 2


def test_retry_decides_which_errors_reach_the_caller() -> None:
    source = Script(pages=[[]], watches=[([], ApiConnectionError("refused"))])
    follow = ListWatch(source, PODS, "ns", sleep=_no_sleep,
                       retry=lambda e: not isinstance(e, ApiConnectionError))
    with pytest.raises(ApiConnectionError):
        asyncio.run(collect(follow, 10))

    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    source = Script(pages=[[]], watches=[([], ApiForbidden(403, "Forbidden")),
                                         ([{"type": "ADDED", "object": pod("c", "12")}], None)])
    follow = ListWatch(source, PODS, "ns", sleep=sleep)
    events = asyncio.run(collect(follow, 3))
    assert events[-1].type == "ADDED"
    assert sleeps == [0.1]  # retried after the shortest back-off, from the same version
    assert source.watched_from == ["10", "10"]
