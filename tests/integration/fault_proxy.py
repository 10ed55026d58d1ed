"""A fault-injecting HTTPS proxy in front of the test API server.

Why a proxy and not a mocked client: the operator under test is the real process with its
real HTTP stack; only the network between it and the real API server misbehaves, the way a
busy or restarting API server, a load balancer or a flaky link does:

* ``error_ratio``: a request is answered 500, 503 or 429 (a Status body, as the API server
  sends) without reaching the API server;
* ``lose_ratio``: a write reaches the API server and takes effect, but its response is lost
  (504): the client must not assume it failed - a create retried gets 409, a delete 404;
* ``stall_ratio``: a write reaches the API server and takes effect, but its response comes
  ``stall_seconds`` late, after the client's request timeout;
* ``watch_cut_after``: every watch is cut after that many seconds by closing the connection in
  the middle of the stream (not a clean end), so the client must watch again from where it
  was;
* ``go_down()`` / ``come_up()``: an API server that is gone (restarting, or its node lost):
  open watches are cut, and every request meanwhile has its connection reset unanswered.
* ``delay(method, name_prefix, seconds)``: writes of objects so named reach the API server
  that much later (a slow, loaded API server); ``hold(method, name_prefix)``: they wait
  until the test ``release()``s them (forwarded, even when their client has gone: an API
  server may finish a request its client gave up on) or ``drop_held()``s them (never).

It terminates TLS with the API server's own serving certificate (valid for 127.0.0.1), so a
kubeconfig that differs from the admin one only in its port reaches it, and forwards with the
admin client certificate. It runs its own event loop in a thread; counters say what it did.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from trainjobs.testing import ControlPlane

WRITES = ("POST", "PUT", "PATCH", "DELETE")
FORWARDED_HEADERS = ("Content-Type", "Accept", "User-Agent")


class FaultProxy:
    def __init__(self, plane: ControlPlane, *, log: Path | None = None, seed: int = 7) -> None:
        self.plane = plane
        self.log = log
        self.error_ratio = 0.0
        self.lose_ratio = 0.0
        self.stall_ratio = 0.0
        self.stall_seconds = 0.0
        self.watch_cut_after: float | None = None
        self.down = False
        self.counts: Counter[str] = Counter()
        self.port = 0
        self._random = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy",
                                        daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._lock = threading.Lock()
        self._streams: set[asyncio.Transport] = set()  # open watch connections
        self._owed: set[str] = set()
        # (method, object name prefix) -> seconds to wait before forwarding; None: held.
        self._slow: dict[tuple[str, str], float | None] = {}
        self._held: dict[str, tuple[asyncio.Future[bool], dict[str, Any]]] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        print(f"fault proxy: {dict(self.snapshot())}; log {self.log}")
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, path: Path) -> Path:
        """The admin kubeconfig with the proxy as its server."""
        text = self.plane.kubeconfig.read_text()
        server = self.plane.server
        assert server in text, f"{server} not in {self.plane.kubeconfig}"
        path.write_text(text.replace(server, f"https://127.0.0.1:{self.port}"))
        return path

    def set(self, *, error_ratio: float = 0.0, lose_ratio: float = 0.0,
            stall_ratio: float = 0.0, stall_seconds: float = 0.0,
            watch_cut_after: float | None = None) -> None:
        with self._lock:
            self.error_ratio = error_ratio
            self.lose_ratio = lose_ratio
            self.stall_ratio = stall_ratio
            self.stall_seconds = stall_seconds
            self.watch_cut_after = watch_cut_after
            # Each kind of fault asked for happens at least once, at its first chance, so a
            # test never depends on the dice: the first requests are answered 500, 503 and
            # 429, the first create loses its response, the first status write is stalled.
            self._owed = ({"500", "503", "429"} if error_ratio else set()) | \
                ({"lose POST"} if lose_ratio else set()) | \
                ({"stall PATCH"} if stall_ratio else set())

    def delay(self, method: str, name_prefix: str, seconds: float) -> None:
        with self._lock:
            self._slow[(method, name_prefix)] = seconds

    def hold(self, method: str, name_prefix: str) -> None:
        """Hold the pod writes whose object name starts with `name_prefix` (pods only: a
        job's Service has its pod's name, and two held requests of one name would collide)."""
        with self._lock:
            self._slow[(method, name_prefix)] = None

    def held(self) -> dict[str, dict[str, Any]]:
        """The requests held now: object name -> the request's body (decoded JSON)."""
        with self._lock:
            return {name: body for name, (_, body) in self._held.items()}

    def release(self, *names: str) -> None:
        """Forward these held requests now."""
        self._settle(names, forward=True)

    def drop_held(self) -> None:
        """Never forward the requests held now (answered 503 if anyone still listens)."""
        self._settle(None, forward=False)

    def _settle(self, names: tuple[str, ...] | None, forward: bool) -> None:
        with self._lock:
            chosen = [n for n in self._held if names is None or n in names]
            futures = [self._held.pop(n)[0] for n in chosen]
            if names is None:
                self._slow.clear()
        for future in futures:
            self._loop.call_soon_threadsafe(future.set_result, forward)

    def go_down(self) -> None:
        """From now on nothing answers: open watches are cut, new requests reset."""
        with self._lock:
            self.down = True
        asyncio.run_coroutine_threadsafe(self._cut_all(), self._loop).result(timeout=10)

    def come_up(self) -> None:
        with self._lock:
            self.down = False

    async def _cut_all(self) -> None:
        for transport in list(self._streams):
            self._streams.discard(transport)
            transport.abort()

    def _take(self, *owed: str) -> str | None:
        """One of `owed` that is still owed, now paid; None when none is."""
        with self._lock:
            for what in owed:
                if what in self._owed:
                    self._owed.discard(what)
                    return what
        return None

    def count(self, what: str, request: web.Request | None = None) -> None:
        with self._lock:
            self.counts[what] += 1
        if self.log is not None and request is not None:
            with self.log.open("a") as out:
                out.write(f"{time.strftime('%H:%M:%S')} {what}: {request.method} "
                          f"{request.path_qs}\n")

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    # -- the server ------------------------------------------------------------------------

    async def _start(self) -> None:
        pki = self.plane.pki
        upstream = ssl.create_default_context(cafile=str(pki.ca_cert))
        upstream.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=upstream, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(str(pki.serving_cert), str(pki.serving_key))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop(self) -> None:
        for transport in list(self._streams):  # watches would hold the shutdown up
            transport.abort()
        with self._lock:  # a create still held would keep its request handler waiting
            held, self._held = list(self._held.values()), {}
        for future, _ in held:
            if not future.done():
                future.set_result(False)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        # Let the aborted and closed TLS connections finish closing before the loop stops
        # (aiohttp's advice for SSL); otherwise they are reported as unclosed at exit.
        await asyncio.sleep(0.5)
        # A request handler the shutdown did not end (one mid-delay) is ended here, on its
        # loop, not destroyed pending when the loop closes ("Task was destroyed but it is
        # pending!" at the end of the restart-together tests).
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def _roll(self, ratio: float) -> bool:
        with self._lock:
            return ratio > 0 and self._random.random() < ratio

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            down = self.down
        if down:
            self.count("reset while down", request)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)  # (never sent: the connection is gone)
        if request.query.get("watch") in ("true", "1"):
            return await self._watch(request)
        with self._lock:
            error_ratio, lose_ratio = self.error_ratio, self.lose_ratio
            stall_ratio, stall_seconds = self.stall_ratio, self.stall_seconds
        forced = self._take("500", "503", "429")
        if forced or self._roll(error_ratio):
            code = int(forced) if forced else self._random.choice((500, 503, 429))
            self.count(f"injected {code}", request)
            return _status(code, "injected by the fault proxy")
        body = await request.read()
        if not await self._wait_if_slow(request, body):
            self.count(f"dropped held {request.method}", request)
            return _status(503, "held and dropped by the fault proxy")
        assert self._session is not None
        async with self._session.request(
            request.method, f"{self.plane.server}{request.path_qs}", data=body or None,
            headers={h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers},
        ) as upstream:
            data = await upstream.read()
            content_type = upstream.headers.get("Content-Type", "application/json")
            status = upstream.status
        write = request.method in WRITES
        if write and (self._take(f"lose {request.method}") or self._roll(lose_ratio)):
            self.count(f"lost {request.method} response ({status})", request)
            return _status(504, "response lost by the fault proxy")
        if write and (self._take(f"stall {request.method}") or self._roll(stall_ratio)):
            self.count(f"stalled {request.method} response ({status})", request)
            await asyncio.sleep(stall_seconds)
        self.count("forwarded")
        return web.Response(status=status, body=data, headers={"Content-Type": content_type})

    async def _wait_if_slow(self, request: web.Request, body: bytes) -> bool:
        """Delay or hold a write asked for by `delay`/`hold`; False: it is dropped."""
        if request.method not in WRITES or not self._slow:
            return True
        name = request.path.rstrip("/").rsplit("/", 1)[-1]
        decoded: dict[str, Any] = {}
        if body:
            try:
                decoded = json.loads(body)
            except ValueError:
                decoded = {}
        if request.method == "POST":
            name = str((decoded.get("metadata") or {}).get("name", ""))
        with self._lock:
            rule = next(((prefix, wait) for (method, prefix), wait in self._slow.items()
                         if method == request.method and name.startswith(prefix)), None)
            if rule is None:
                return True
            if rule[1] is None and "/pods" not in request.path:
                return True  # holds are for pods (see `hold`)
            if rule[1] is None:
                future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
                self._held[name] = (future, decoded)
        if rule[1] is not None:
            self.count(f"delayed {request.method}", request)
            await asyncio.sleep(rule[1])
            return True
        self.count(f"held {request.method}", request)
        return await future

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        with self._lock:
            cut_after = self.watch_cut_after
        async with self._session.get(
            f"{self.plane.server}{request.path_qs}",
            headers={h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers},
        ) as upstream:
            if upstream.status != 200:
                return web.Response(status=upstream.status, body=await upstream.read(),
                                    headers={"Content-Type": "application/json"})
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            self.count("watches", request)
            if request.transport is not None:
                self._streams.add(request.transport)  # type: ignore[arg-type]
            deadline = None if cut_after is None else asyncio.get_running_loop().time() + \
                cut_after
            while True:
                timeout = None if deadline is None else \
                    max(0.0, deadline - asyncio.get_running_loop().time())
                try:
                    chunk = await asyncio.wait_for(upstream.content.readany(), timeout)
                except TimeoutError:
                    # Mid-stream, no clean end: the client sees a broken response.
                    self.count("watches cut", request)
                    if request.transport is not None:
                        self._streams.discard(request.transport)  # type: ignore[arg-type]
                        request.transport.abort()
                    return response
                if not chunk:
                    self._streams.discard(request.transport)  # type: ignore[arg-type]
                    return response
                await response.write(chunk)


def _status(code: int, message: str) -> web.Response:
    reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
              504: "Timeout"}[code]
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message, "reason": reason,
                            "code": code}
    headers = {"Content-Type": "application/json"}
    if code == 429:
        headers["Retry-After"] = "1"
    return web.Response(status=code, body=json.dumps(body), headers=headers)
