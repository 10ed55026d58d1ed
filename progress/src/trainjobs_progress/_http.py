"""Sending one report over HTTP(S): the URL, the token, the CA (the environment's).

Why the token is read on every send: on a cluster it is a projected service-account token
the kubelet rewrites before it expires (about hourly), so a copy read once at start would
stop working; reading a small file every few seconds costs nothing next to the POST.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any, Callable, Dict

from trainjobs_progress._wire import VERSION

__all__ = ["Refused", "Sender", "Unsendable", "http_sender"]

# Sends one body; returns the reply's JSON object. Raises on any failure.
Sender = Callable[[bytes, float], Dict[str, Any]]
MAX_RETRY_AFTER = 300.0


class Refused(Exception):
    """The receiver answered with an error status (its message is the reason).

    `status` is the HTTP status; `retry_after` the seconds it asked to wait (429, 503)."""

    def __init__(self, message: str, status: int = 0,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class Unsendable(Exception):
    """This process cannot send at all for now (its token file is unreadable)."""


def _context(ca: str, ca_file: str) -> ssl.SSLContext:
    """Verify the receiver with the given CA (PEM text or file), else the system's."""
    if ca:
        return ssl.create_default_context(cadata=ca)
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    return ssl.create_default_context()


def http_sender(url: str, token_file: str = "", ca: str = "", ca_file: str = "") -> Sender:
    """POST to `url` with no proxy (the receiver is always a direct address: 127.0.0.1
    locally, the operator's Service in a cluster); with `token_file`, as a bearer token."""
    handlers: list[Any] = [urllib.request.ProxyHandler({})]
    if url.lower().startswith("https:"):
        handlers.append(urllib.request.HTTPSHandler(context=_context(ca, ca_file)))
    opener = urllib.request.build_opener(*handlers)

    def send(body: bytes, timeout: float) -> dict[str, Any]:
        headers = {"Content-Type": "application/json",
                   "User-Agent": f"trainjobs-progress/{VERSION}"}
        if token_file:
            try:
                with open(token_file, encoding="utf-8") as f:
                    token = f.read().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise Unsendable(f"cannot read the token file {token_file}: {exc}") \
                    from None
            headers["Authorization"] = "Bearer " + token
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        try:
            with opener.open(request, timeout=timeout) as reply:
                data = reply.read(65536)
        except urllib.error.HTTPError as exc:
            raise Refused(f"HTTP {exc.code}: {_error_text(exc)}", exc.code,
                          _retry_after(exc)) from None
        try:
            parsed = json.loads(data.decode("utf-8")) if data else {}
        except ValueError:
            parsed = {}
        return parsed if isinstance(parsed, dict) else {}

    return send


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    """The Retry-After seconds of a 429 or 503 (at most 5 minutes), else None."""
    if exc.code not in (429, 503):
        return None
    try:
        value = float(exc.headers.get("Retry-After", "") if exc.headers else "")
    except (TypeError, ValueError):
        return 1.0  # asked to come back later, without saying when (HTTP dates unsupported)
    return min(max(value, 0.0), MAX_RETRY_AFTER)


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read(4096).decode("utf-8"))
        return str(body.get("error", exc.reason))
    except Exception:
        return str(exc.reason)
