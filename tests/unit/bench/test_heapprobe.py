"""bench.heapprobe: the breakdown a running operator writes on SIGUSR1."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import json
import os
import signal
import ssl
from pathlib import Path

from bench.heapprobe import _on_signal, probe


async def test_the_probe_counts_tls_connections_and_their_buffers() -> None:
    before = probe()
    loop = asyncio.get_running_loop()
    held = [asyncio.sslproto.SSLProtocol(loop, asyncio.Protocol(), ssl.create_default_context(),
                                         None) for _ in range(3)]
    after = probe()
    assert after["tls_connections"] == before["tls_connections"] + 3
    grown = after["tls_read_buffers_mb"] - before["tls_read_buffers_mb"]
    expected = 3 * asyncio.sslproto.SSLProtocol.max_size / 2**20
    assert abs(grown - expected) < 1e-9, (grown, expected)
    assert after["pymalloc"]["in_use_mb"] > 0 and after["pymalloc"]["arenas"] > 0
    assert after["rss_mb"] > 0 and after["tracked_objects"] > len(held)
    # Each protocol made its app transport: closed here, or collecting it later (in whatever
    # test runs a full collection next, e.g. test_gcfreeze's) warns "unclosed transport".
    for protocol in held:
        protocol._app_transport.close()
    del held


def test_sigusr1_writes_numbered_probes(tmp_path: Path) -> None:
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        _on_signal(str(tmp_path / "heap"))
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        first = json.loads((tmp_path / "heap-1.json").read_text())
        second = json.loads((tmp_path / "heap-2.json").read_text())
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert "error" not in first and "error" not in second
    assert first["rss_mb"] > 0 and second["glibc"] is not None
