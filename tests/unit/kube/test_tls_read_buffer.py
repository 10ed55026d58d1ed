"""The operator's TLS read buffer (`limit_tls_read_buffer`): each connection's buffer is the
size set, and a response many times that size still arrives whole, over a real TLS server."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from trainjobs.kube.api import limit_tls_read_buffer
from trainjobs.testing._pki import make_serving_cert

BODY = bytes(range(256)) * 8192  # 2 MiB, not one repeated byte


async def test_connections_read_into_the_smaller_buffer_and_lose_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size",
                        asyncio.sslproto.SSLProtocol.max_size)  # restored after the test
    limit_tls_read_buffer(16 * 1024)
    ca = make_serving_cert(tmp_path / "ca", subject="/CN=test-ca")
    cert = make_serving_cert(tmp_path / "tls", subject="/CN=localhost", ca_cert=ca.cert,
                             ca_key=ca.key)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert.cert, cert.key)
    app = web.Application()

    async def big(_: web.Request) -> web.Response:
        return web.Response(body=BODY)

    app.router.add_get("/big", big)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    trusted = ssl.create_default_context(cafile=str(cert.ca_cert))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as s, \
                s.get(f"https://127.0.0.1:{port}/big") as resp:
            assert resp.connection is not None
            protocol = resp.connection.transport._ssl_protocol  # type: ignore[union-attr]
            assert len(protocol._ssl_buffer) == 16 * 1024
            assert await resp.read() == BODY
    finally:
        await runner.cleanup()


def test_a_python_without_the_attribute_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(asyncio.sslproto.SSLProtocol, "max_size")
    with pytest.raises(RuntimeError, match="no integer max_size"):
        limit_tls_read_buffer()
