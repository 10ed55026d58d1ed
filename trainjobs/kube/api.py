"""The one place that talks to the API server: raw JSON over one aiohttp session.

Why one layer (kopf's `_cogs/clients` split): the operator, the client, the CLI, the bench and
the test harness speak plain dicts and the typed error tree of `trainjobs.kube.errors`, so a
failed call is classified once (`ApiNotFound`, `ApiConflict`, `ApiForbidden` with its quota
test, `ApiServerError`, `ApiConnectionError` when no answer came...) and reported once (to
`reachability` and to the owner's `on_error`, the operator's api-errors metric). Responses are
read as raw JSON and never turned into generated model objects: that deserialization is the
largest CPU cost of a Python controller at scale. They are decoded by orjson: 2.7-2.8x less CPU per
watch event than the standard library's decoder (python -m bench.decode).

Why aiohttp directly, not kubernetes-asyncio's ApiClient: the operator only ever sent raw
requests through it, and importing it costs 63 MB of RSS for its generated models
(docs/benchmarks.md, "Memory"); credentials come from `kubeconfig`.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import os
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import orjson

from trainjobs.kube.errors import ApiConnectionError, ApiError, WatchDropped, api_error
from trainjobs.kube.kubeconfig import Credentials, KubeconfigError, in_cluster, load
from trainjobs.kube.reachability import Reachability
from trainjobs.kube.resources import Resource

__all__ = [
    "LIST_PAGE_SIZE", "TLS_READ_BUFFER", "ErrorHook", "Kube", "Query", "Transport", "connect",
    "gather_limited", "limit_tls_read_buffer", "split_lines",
]

#: What a failed call is reported to besides the caller: (verb, error).
ErrorHook = Callable[[str, ApiError], None]

#: Query parameters of a request, in order.
Query = list[tuple[str, Any]]

#: Objects per LIST page: what a re-list holds decoded at once.
LIST_PAGE_SIZE = 500


#: Bytes each TLS connection reads into at once (asyncio's default: 256 KiB).
TLS_READ_BUFFER = 64 * 1024

#: Connections for requests (parallel reconciles' creates, status writes, events), besides
#: one per open watch.
REQUEST_CONNECTIONS = 64


class Transport:
    """One aiohttp session to one API server with one identity; `open` sends a request and
    returns the response unread (the caller reads it whole or streams it, then releases)."""

    def __init__(self, creds: Credentials, pool: int) -> None:
        self.creds = creds
        self.user_agent = "trainjobs"
        # kubernetes-asyncio's session trusted the environment, so aiohttp looked up proxy
        # variables and ~/.netrc on every request, in a thread: a fifth of the operator's CPU
        # in a fan-out (py-spy, bench/fanout.py). Only when one is present does it matter.
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool, ssl=creds.ssl_context()),
            trust_env=_environment_matters(), timeout=aiohttp.ClientTimeout(total=None))

    async def open(self, verb: str, path: str, *, query: Query, headers: dict[str, str],
                   body: Any = None, timeout: float | None = None) -> aiohttp.ClientResponse:
        headers = {**headers, "User-Agent": self.user_agent}
        auth = await self.creds.authorization()
        if auth is not None:
            headers["Authorization"] = auth
        # Impersonate-Group and -Extra-* may repeat: pairs, not a dict (only when given).
        sent = [*headers.items(), *self.creds.impersonate] if self.creds.impersonate \
            else headers
        return await self.session.request(
            verb, self.creds.server + path, params=[(k, str(v)) for k, v in query],
            data=None if body is None else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS),
            headers=sent,
            proxy=self.creds.proxy, server_hostname=self.creds.tls_server_name,
            timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=30))

    async def close(self) -> None:
        await self.session.close()


async def connect(kubeconfig: str | None, watches: int = 0) -> Transport:
    """A transport from a kubeconfig file, else the in-cluster service account, else the
    default kubeconfig ($KUBECONFIG, ~/.kube/config); its pool holds `watches` long watches
    (each keeps a connection for good) besides REQUEST_CONNECTIONS. A pool smaller than the
    watches would leave the last informers' lists waiting forever. Raises `KubeconfigError`."""
    creds = load(kubeconfig) if kubeconfig else (in_cluster() or load(None))
    try:
        await creds.prepare()
        return Transport(creds, REQUEST_CONNECTIONS + watches)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise KubeconfigError(f"credentials for {creds.server}: {exc}") from None


def limit_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Make every TLS connection of this process read into a buffer of `size` bytes.

    Why: asyncio's TLS protocol (3.11+) gives each connection a zero-filled read buffer of
    `SSLProtocol.max_size`, 256 KiB, resident for the connection's life. The operator keeps up
    to REQUEST_CONNECTIONS + one per watch open, 74 of them: 18.5 MB, found by tracemalloc in
    the running operator when it held 167 MB at 5,000 jobs (docs/benchmarks.md, "Memory").
    A TLS record holds at most 16 KiB, so 64 KiB still takes four records per read; a large
    LIST page is read in more, smaller reads. It is a class attribute the protocol reads on
    each connection, so it applies to connections opened after the call.
    """
    if not isinstance(getattr(asyncio.sslproto.SSLProtocol, "max_size", None), int):
        raise RuntimeError("asyncio.sslproto.SSLProtocol has no integer max_size: this Python's "
                           "TLS protocol is not the one limit_tls_read_buffer was written for")
    asyncio.sslproto.SSLProtocol.max_size = size


def _environment_matters() -> bool:
    """Whether aiohttp's trust_env would change a request: a proxy variable or a netrc file."""
    if urllib.request.getproxies_environment():
        return True
    return os.path.exists(os.environ.get("NETRC") or os.path.expanduser("~/.netrc"))


class Kube:
    """Raw-JSON access to the API server's resources."""

    def __init__(self, api: Transport, user_agent: str = "trainjobs-operator",
                 request_timeout: float = 30.0, *, on_error: ErrorHook | None = None) -> None:
        self.api = api
        self.api.user_agent = user_agent
        self.request_timeout = request_timeout
        self.reachability = Reachability()
        self._on_error = on_error

    async def request(self, verb: str, url: str, body: Any = None, *,
                      query: list[tuple[str, Any]] | None = None,
                      content_type: str = "application/json",
                      timeout: float | None = None, decode: bool = True) -> dict[str, Any]:
        """One API call; returns the decoded JSON body ({} unless `decode`). Raises `ApiError`
        (status 0 when no response came, a timeout included)."""
        timeout = self.request_timeout if timeout is None else timeout
        with self._answering(verb):
            resp = await self.api.open(
                verb, url, query=query or [],
                headers={"Content-Type": content_type, "Accept": "application/json"},
                body=body, timeout=timeout)
            raw = await _read(resp)
        if not 200 <= resp.status <= 299:
            raise self._refused(verb, resp, raw)
        self.reachability.answered()
        result: dict[str, Any] = orjson.loads(raw) if raw and decode else {}
        return result

    async def create(self, resource: Resource, namespace: str, body: dict[str, Any]) -> None:
        """The created object is not decoded: nobody reads it (the watch brings it), and a
        2,000-replica TfJob's pods come back as 160 MB of JSON."""
        await self.request("POST", resource.url(namespace), body, decode=False)

    async def delete(self, resource: Resource, namespace: str, name: str,
                     propagation: str = "Background") -> None:
        await self.request("DELETE", resource.url(namespace, name),
                           {"propagationPolicy": propagation})

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        return await self.request("GET", resource.url(namespace, name))

    async def update(self, resource: Resource, namespace: str, name: str,
                     body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", resource.url(namespace, name), body)

    async def merge_patch_status(self, resource: Resource, namespace: str, name: str,
                                 status: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", resource.url(namespace, name, "status"),
                                  {"status": status},
                                  content_type="application/merge-patch+json")

    async def list_pages(self, resource: Resource, namespace: str | None, *,
                         label_selector: str = "", field_selector: str = "",
                         limit: int = LIST_PAGE_SIZE
                         ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """The objects one page at a time, each with the list's resourceVersion. A caller that
        keeps only part of each object never holds more than one page of whole objects (20,000
        pods as decoded JSON would be a few hundred MB)."""
        cont = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", limit),
                                            *_selectors(label_selector, field_selector)]
            if cont:
                query.append(("continue", cont))
            page = await self.request("GET", resource.url(namespace), query=query,
                                      timeout=max(120.0, self.request_timeout))
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            yield page.get("items") or [], str(meta.get("resourceVersion", ""))
            if not cont:
                return

    async def list(self, resource: Resource, namespace: str | None, *,
                   label_selector: str = "", field_selector: str = "",
                   limit: int = LIST_PAGE_SIZE) -> tuple[list[dict[str, Any]], str]:
        """Every object (paged), and the list's resourceVersion to watch from."""
        items: list[dict[str, Any]] = []
        rv = ""
        async for page, page_rv in self.list_pages(resource, namespace,
                                                   label_selector=label_selector,
                                                   field_selector=field_selector, limit=limit):
            items.extend(page)
            rv = page_rv
        return items, rv

    @contextlib.contextmanager
    def _answering(self, verb: str) -> Iterator[None]:
        """Raise the `ApiError` of a call that got no response (status 0) in place of what
        the HTTP stack raised."""
        try:
            yield
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise self._failed(verb, ApiConnectionError(f"{type(exc).__name__}: {exc}")
                               ) from None

    def _refused(self, verb: str, resp: Any, body: bytes) -> ApiError:
        """The error of a response with a status outside 2xx."""
        return self._failed(verb, api_error(resp.status, str(resp.reason),
                                            body.decode(errors="replace"), _headers(resp)))

    def _failed(self, verb: str, error: ApiError) -> ApiError:
        """Report a failed call (to reachability: any status below 500 is an answer; to the
        owner's hook) and return its error to raise."""
        if error.status == 0 or error.status >= 500:
            self.reachability.failed()
        else:
            self.reachability.answered()
        if self._on_error is not None:
            self._on_error(verb, error)
        return error

    async def watch(self, resource: Resource, namespace: str | None, resource_version: str, *,
                    label_selector: str = "", field_selector: str = "",
                    timeout_seconds: int = 300, on_open: Callable[[], None] | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events from `resource_version`, with bookmarks, until the server ends it.
        `on_open` is called once the API server has accepted the watch (before any event:
        a quiet watch may send none for minutes)."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"), ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version), ("timeoutSeconds", timeout_seconds),
            *_selectors(label_selector, field_selector)]
        async for line in self.stream_lines(resource.url(namespace), query, "WATCH",
                                            timeout_seconds + 30, on_open=on_open):
            if line.strip():
                yield orjson.loads(line)

    async def stream_lines(self, url: str, query: Query, verb: str = "GET",
                           timeout: float | None = None, *, unterminated: bool = False,
                           on_open: Callable[[], None] | None = None
                           ) -> AsyncIterator[bytes]:
        """A streamed GET (a watch, a followed pod log) one line at a time, without its
        newline; `unterminated`: also the text after the last newline (a log's last line).
        Raises `ApiError`; `WatchDropped` when the stream breaks after it began."""
        with self._answering(verb):
            resp = await self.api.open(
                "GET", url, query=query, headers={"Accept": "application/json, */*"},
                timeout=timeout)
        if not 200 <= resp.status <= 299:
            raise self._refused(verb, resp, await _read(resp))
        self.reachability.answered()
        if on_open is not None:
            on_open()
        try:
            async for line in split_lines(resp.content.iter_any(), unterminated=unterminated):
                yield line
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            # The stream broke (connection reset, API server restarted, proxy cut it): the
            # caller watches again from the last resourceVersion it saw.
            raise self._failed(verb, WatchDropped(
                f"watch dropped: {type(exc).__name__}: {exc}")) from None
        finally:
            resp.release()


async def split_lines(chunks: AsyncIterator[bytes], *, unterminated: bool = False
                      ) -> AsyncIterator[bytes]:
    """The lines of a byte stream, without their newline; `unterminated`: also the text
    after the last newline.

    Why not aiohttp's line iterator: it refuses lines over 64 KiB, and a job with a large pod
    template is larger. All lines of a chunk are split at once: splitting one line off at a
    time copied the rest of the buffer per line, quadratic in a chunk of many large events (a
    burst of pods with a large TF_CONFIG each), all of it inside the event loop.
    """
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        if b"\n" not in chunk:
            continue
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line
    if buffer and unterminated:
        yield buffer


def _selectors(label_selector: str, field_selector: str) -> list[tuple[str, Any]]:
    query: list[tuple[str, Any]] = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _headers(resp: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(getattr(resp, "headers", None) or {}).items()}


async def _read(resp: Any) -> bytes:
    try:
        data: bytes = await resp.read()
        return data
    finally:
        resp.release()


async def gather_limited(limit: int, *aws: Any) -> list[Any]:
    """asyncio.gather with at most `limit` awaitables in flight; exceptions are returned."""
    sem = asyncio.Semaphore(limit)

    async def one(aw: Any) -> Any:
        async with sem:
            return await aw

    return await asyncio.gather(*(one(a) for a in aws), return_exceptions=True)
