"""The operator's HTTP endpoints: /healthz, /readyz and Prometheus /metrics (aiohttp).

/healthz answers 200 while the event loop runs. /readyz answers 200 once the caches have
synced (or while this replica waits as a leader-election standby, which is healthy too), and
503 before. /metrics is prometheus-client's exposition of trainjobs' own registry.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from trainjobs.operator.metrics import REGISTRY

__all__ = ["start_http"]


async def start_http(host: str, port: int, ready: Callable[[], str | None]) -> web.AppRunner:
    """Serve on host:port. `ready()` returns a reason while not ready, else None."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        reason = ready()
        if reason is None:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz),
                    web.get("/metrics", metrics)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
