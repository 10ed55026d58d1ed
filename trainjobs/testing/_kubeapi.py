"""A minimal synchronous Kubernetes REST client for starting and probing the control plane.

Start-up needs a handful of calls (``/readyz``, create nodes, read a namespace): a stdlib
HTTPS client with the admin certificate does them without spawning ``kubectl`` (~100 ms
each) and without an event loop, so the CLI and a synchronous pytest fixture share it.

Why not the transport's `Kube` (trainjobs/kube): that one is asynchronous (aiohttp), and the
harness is synchronous and starts in a fraction of a second. What it shares with the
transport is what a caller acts on: `call` answers with the transport's typed errors
(`trainjobs.kube.errors`: `ApiNotFound`, `ApiConflict`, ..., `ApiConnectionError` when nothing
answered), chosen by the same `api_error`, so the harness and the operator classify an answer
alike. `request` (the raw status and body) stays for the
tests that assert on a status.
"""

from __future__ import annotations

import functools
import http.client
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainjobs.kube.errors import ApiConnectionError, ApiError, api_error

#: What a call that got no answer raises in the stdlib (refused, reset, timed out, cut off).
NO_ANSWER = (OSError, http.client.HTTPException)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    reason: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


class KubeAPI:
    """HTTPS requests to one API server, authenticated by a client certificate."""

    def __init__(self, server: str, *, ca_cert: Path, client_cert: Path, client_key: Path) -> None:
        parts = urlsplit(server)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"server URL needs a host and port: {server!r}")
        self.server = server
        self._host = parts.hostname
        self._port = parts.port
        self._context = ssl.create_default_context(cafile=str(ca_cert))
        self._context.load_cert_chain(str(client_cert), str(client_key))

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = 5.0
    ) -> Response:
        """One request; connection errors propagate as :class:`OSError` (or
        :class:`http.client.HTTPException`)."""
        conn = http.client.HTTPSConnection(
            self._host, self._port, context=self._context, timeout=timeout
        )
        try:
            headers = {"Accept": "application/json"}
            payload = None
            if body is not None:
                payload = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            return Response(resp.status, resp.read(), resp.reason, dict(resp.getheaders()))
        finally:
            conn.close()

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = 15.0) -> Any:
        """One request answered with its decoded JSON body; an answer of 300 or more raises
        the transport's typed error, no answer :class:`ApiConnectionError`."""
        try:
            resp = self.request(method, path, body, timeout=timeout)
        except NO_ANSWER as exc:
            raise ApiConnectionError(str(exc) or type(exc).__name__) from exc
        if resp.status >= 300:
            raise api_error(resp.status, resp.reason, resp.body.decode(errors="replace"),
                            resp.headers)
        return resp.json() if resp.body else {}

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Response:
        return self.request("POST", path, obj)


def failure(method: str, path: str, exc: ApiError) -> str:
    """What a failed `KubeAPI.call` says in an error message: the status and the API
    server's answer, or why nothing answered."""
    if exc.status == 0:
        return f"{method} {path}: {exc.reason}"
    return f"{method} {path} answered {exc.status}: {exc.body or exc.reason}"


def serving(api: KubeAPI) -> bool:
    """The apiserver answers HTTP (any status): its handlers are installed."""
    try:
        api.get("/readyz")
    except NO_ANSWER:
        return False
    return True


def ok(api: KubeAPI, path: str) -> bool:
    """GET ``path`` answers 200."""
    try:
        return api.get(path).status == 200
    except NO_ANSWER:
        return False


@functools.cache
def _insecure() -> ssl.SSLContext:
    """Made on first use: building a default context reads the system's CA store (0.17 s of
    the harness's import when it was made at import)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def health_ok(port: int, path: str, *, tls: bool = True) -> bool:
    """A component's health endpoint on 127.0.0.1 answers 200: self-signed HTTPS (the
    scheduler, the controller manager, the gang schedulers; health paths allow anonymous
    access) or, with ``tls=False``, plain HTTP (Kueue's probe port)."""
    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=_insecure(), timeout=2)
            if tls else http.client.HTTPConnection("127.0.0.1", port, timeout=2))
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except NO_ANSWER:
        return False
    finally:
        conn.close()
