"""`trainjobs operator`: wires the client, plugins, controller, leader election and HTTP.

Shutdown is clean on SIGTERM/SIGINT: the controller stops taking work, the lease is released
(so a standby takes over at once), the HTTP server and the API client close, exit code 0. A
lost lease exits with code 1: a fresh process re-syncs from scratch, which is always safe.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from dataclasses import replace
from typing import Any

from trainjobs.errors import TrainjobsError
from trainjobs.kube import Kube, connect
from trainjobs.kube.api import limit_tls_read_buffer
from trainjobs.operator import metrics
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.operator.controller import Controller, watches
from trainjobs.operator.gcfreeze import install_gc_freeze
from trainjobs.operator.gcmetrics import install_gc_metrics
from trainjobs.operator.http import start_http
from trainjobs.operator.leader import LeaderElector
from trainjobs.operator.logs import setup_logging
from trainjobs.operator.looplag import probe_loop_lag
from trainjobs.operator.progress_server import ProgressServer, tls_context
from trainjobs.operator.progress_store import ProgressStore
from trainjobs.operator.settings import OperatorSettings, ProgressSettings, build_settings
from trainjobs.operator.token_review import TokenReviewer
from trainjobs.plugin.manager import PluginManager, load_plugins

__all__ = ["run_operator"]

log = logging.getLogger("trainjobs.operator")


def run_operator(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, args.log_level)
    install_gc_metrics()
    plugins = load_plugins(enable=args.enable_plugins)
    return asyncio.run(_run(build_settings(args, plugins), plugins))


async def _run(settings: OperatorSettings, plugins: PluginManager) -> int:
    clock = SYSTEM_CLOCK  # every timing decision of the operator reads this one clock
    # (after the imports and plugins it would walk)
    install_gc_freeze(settings.gc_thaw_interval, clock.monotonic)
    limit_tls_read_buffer()  # before the first connection
    api = await connect(settings.kubeconfig, watches=watches(plugins, settings.controller))
    kube = Kube(api, request_timeout=settings.request_timeout, on_error=metrics.count_api_error)
    store = ProgressStore(clock) if settings.progress is not None else None
    controller = Controller(kube, plugins, replace(settings.controller, progress=store), clock)
    elector = LeaderElector(kube, settings.lease, clock) if settings.lease else None
    http = settings.http
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def ready() -> str | None:
        silent = kube.reachability.unreachable_for()
        if http.ready_api_timeout and silent > http.ready_api_timeout:
            # Its caches may be stale and it can change nothing: say so (liveness stays, a
            # restart would not bring the API server back; it recovers by itself).
            return f"the API server has not answered for {silent:.0f}s"
        if elector is not None and not elector.leading.is_set():
            return None  # a standby is ready: it is doing what it should
        return None if controller.synced else "caches not synced"

    runner = await start_http(http.host, http.port, ready)
    progress = None
    if settings.progress is not None and store is not None:
        # For the whole process, a standby's too: it answers 503 until its store is active.
        progress = _progress_server(settings.progress, store, TokenReviewer(kube, clock),
                                    plugins, clock)
        try:
            await progress.start()
        except OSError as exc:  # the port is taken, the address not ours: one line, exit 1
            await runner.cleanup()
            await api.close()
            raise TrainjobsError(f"--progress-listen {settings.progress.host}:"
                                 f"{settings.progress.port}: {exc}") from None
    lag_probe = asyncio.create_task(probe_loop_lag(), name="loop-lag")
    log.info("trainjobs operator: kinds %s, namespaces %s, http %s:%d",
             ", ".join(plugins.frameworks), ", ".join(settings.controller.namespaces) or "all",
             http.host, http.port)
    tasks: list[asyncio.Task[Any]] = []
    code = 0
    try:
        if elector is not None:
            tasks.append(asyncio.create_task(elector.run(), name="leader-election"))
            waiters = [asyncio.create_task(elector.leading.wait()),
                       asyncio.create_task(stop.wait())]
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()
        if not stop.is_set():
            tasks.append(asyncio.create_task(controller.run(), name="controller"))
            watched = [asyncio.create_task(stop.wait()), *tasks]
            if elector is not None:
                watched.append(asyncio.create_task(elector.lost.wait()))
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if elector is not None and elector.lost.is_set():
                log.error("leadership lost; exiting")
                code = 1
            for task in done:
                if task in tasks and task.exception() is not None:
                    log.error("%s stopped: %s", task.get_name(), task.exception())
                    code = 1
            for w in watched:
                if w not in tasks:
                    w.cancel()
    finally:
        lag_probe.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(lag_probe, *tasks, return_exceptions=True)
        if elector is not None and code == 0:
            await elector.release()
        if store is not None:
            store.deactivate()
        if progress is not None:
            await progress.stop()
        await runner.cleanup()
        await api.close()
        log.info("trainjobs operator stopped")
    return code


def _progress_server(settings: ProgressSettings, store: ProgressStore,
                     reviewer: TokenReviewer, plugins: PluginManager,
                     clock: Clock) -> ProgressServer:
    kinds = {(fw.api_version, fw.kind): fw.kind for fw in plugins.frameworks.values()}
    context = None
    if settings.tls_cert and settings.tls_key:
        context = tls_context(settings.tls_cert, settings.tls_key)
    return ProgressServer(store, reviewer, kinds, settings.host, settings.port,
                          ssl_context=context, interval=settings.interval, clock=clock)
