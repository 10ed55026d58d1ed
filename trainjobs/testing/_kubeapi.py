"""A minimal synchronous Kubernetes REST client for starting and probing the control plane.

Start-up needs a handful of calls (``/readyz``, create nodes, read a namespace): a stdlib
HTTPS client with the admin certificate does them without spawning ``kubectl`` (~100 ms
each) and without an event loop, so the CLI and a synchronous pytest fixture share it.
The operator itself talks to the API through kubernetes-asyncio, never through this.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

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
        """One request; connection errors propagate as :class:`OSError`."""
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
            return Response(resp.status, resp.read())
        finally:
            conn.close()

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Response:
        return self.request("POST", path, obj)


def serving(api: KubeAPI) -> bool:
    """The apiserver answers HTTP (any status): its handlers are installed."""
    try:
        api.get("/readyz")
    except (OSError, http.client.HTTPException):
        return False
    return True


def ok(api: KubeAPI, path: str) -> bool:
    """GET ``path`` answers 200."""
    try:
        return api.get(path).status == 200
    except (OSError, http.client.HTTPException):
        return False


_INSECURE = ssl.create_default_context()
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE


def insecure_ok(port: int, path: str) -> bool:
    """A component's self-signed health endpoint on 127.0.0.1 answers 200 (health paths
    allow anonymous access)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=_INSECURE, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
