"""The benchmarks' own API client: aiohttp with the admin certificate, JSON in and out.

Why not the operator's `Kube`: the ceiling must cost as little as possible and must not share
the request code of the operator under test, so "the ceiling" really
is the same objects created by the thinnest client there is. What it shares is everything
above HTTP: failures are the transport's typed errors (`trainjobs.kube.errors`, one mapping
from a response to an error), streams are split into lines by the transport's `split_lines`,
and `list_pages`/`watch` have `Kube`'s signatures so the watcher follows resources with the
transport's one list-then-watch loop (`trainjobs.kube.listwatch`).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import aiohttp

from trainjobs.kube import (
    LIST_PAGE_SIZE,
    ApiConnectionError,
    ApiError,
    Resource,
    WatchDropped,
    api_error,
    split_lines,
)
from trainjobs.testing import ControlPlane

BENCH_UA = "trainjobs-bench"
CEILING_UA = "trainjobs-bench-ceiling"


class Api:
    """A thin aiohttp client with the admin certificate; JSON in, JSON out. Raises the
    transport's `ApiError`s (`ApiConnectionError` when no response came)."""

    def __init__(self, plane: ControlPlane, user_agent: str = BENCH_UA, pool: int = 128) -> None:
        ctx = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
        ctx.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
        self.server = plane.server
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool, ssl=ctx),
            headers={"User-Agent": user_agent, "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(self, verb: str, path: str, body: Any = None, *,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None, timeout: float = 60.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        try:
            async with self.session.request(
                    verb, self.server + path, data=data, headers=headers, params=params,
                    timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                raw = await resp.read()
                if resp.status >= 300:
                    raise _refused(resp, raw)
                return json.loads(raw) if raw else None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiConnectionError(f"{type(exc).__name__}: {exc}") from None

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("POST", path, body)

    async def create_ok(self, path: str, body: dict[str, Any], retries: int = 20) -> None:
        """POST; 409 counts as done; 429/5xx/connection errors retried with back-off."""
        delay = 0.05
        for attempt in range(retries):
            try:
                await self.request("POST", path, body)
                return
            except ApiError as exc:
                if exc.status == 409:
                    return
                again = exc.status in (0, 429) or exc.status >= 500
                if not again or attempt == retries - 1:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("PATCH", path, body,
                                  content_type="application/merge-patch+json")

    async def metrics(self) -> str:
        async with self.session.get(self.server + "/metrics") as resp:
            return await resp.text()

    async def ensure_namespace(self, name: str) -> None:
        await self.create_ok("/api/v1/namespaces",
                             {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name}})

    async def list_pages(self, resource: Resource, namespace: str | None, *,
                         label_selector: str = "", field_selector: str = "",
                         limit: int = LIST_PAGE_SIZE
                         ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """As `Kube.list_pages`: each page's objects with the list's resourceVersion."""
        cont = ""
        while True:
            params = {"limit": str(limit), **_selectors(label_selector, field_selector),
                      **({"continue": cont} if cont else {})}
            page = await self.request("GET", resource.url(namespace), params=params,
                                      timeout=300)
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            yield page.get("items") or [], str(meta.get("resourceVersion", ""))
            if not cont:
                return

    async def watch(self, resource: Resource, namespace: str | None, resource_version: str, *,
                    label_selector: str = "", field_selector: str = "",
                    timeout_seconds: int = 3600, on_open: Callable[[], None] | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        """As `Kube.watch`: events from `resource_version`, with bookmarks."""
        query = {"watch": "true", "allowWatchBookmarks": "true",
                 "resourceVersion": resource_version, "timeoutSeconds": str(timeout_seconds),
                 **_selectors(label_selector, field_selector)}
        opened = False
        try:
            async with self.session.get(self.server + resource.url(namespace), params=query,
                                        timeout=aiohttp.ClientTimeout(total=None)) as resp:
                if resp.status >= 300:
                    raise _refused(resp, await resp.read())
                opened = True
                if on_open is not None:
                    on_open()
                async for line in split_lines(resp.content.iter_any()):
                    if line.strip():
                        yield json.loads(line)
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Broken after it began: resumed from the last resourceVersion seen.
            error = WatchDropped if opened else ApiConnectionError
            raise error(f"{type(exc).__name__}: {exc}") from None


def _refused(resp: aiohttp.ClientResponse, body: bytes) -> ApiError:
    return api_error(resp.status, str(resp.reason or ""), body.decode(errors="replace"),
                     {str(k): str(v) for k, v in resp.headers.items()})


def _selectors(label_selector: str, field_selector: str) -> dict[str, str]:
    out = {}
    if label_selector:
        out["labelSelector"] = label_selector
    if field_selector:
        out["fieldSelector"] = field_selector
    return out


async def gather_bounded(limit: int, aws: Iterable[Any]) -> list[Any]:
    """Run the awaitables with at most `limit` in flight (a pool of workers on one iterator,
    so 20,000 creates are not 20,000 pending tasks); the first exception is raised. Not the
    transport's `gather_limited`, on purpose: that one (the controller's writes) returns each
    call's error as its result, for the controller to act on each; a benchmark stops at the
    first."""
    it = iter(enumerate(aws))
    results: dict[int, Any] = {}

    async def worker() -> None:
        for i, aw in it:
            results[i] = await aw

    await asyncio.gather(*(worker() for _ in range(limit)))
    return [results[i] for i in sorted(results)]
