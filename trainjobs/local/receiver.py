"""`trainjobs run`'s progress receiver: an HTTP endpoint on 127.0.0.1 for the job's replicas.

Why its own small server: the replicas report through `trainjobs_progress` exactly as they
will on a cluster (same library, same environment contract, same wire format); locally the
receiver is this process, on a port of its own, and applies reports to a `ProgressBoard`.
A refused report gets a 4xx with a one-line JSON reason and changes nothing.

Checkpoint, then stop (issue 38): while the desk holds a request, the reply to the
checkpointing replica's reports carries it; a report acknowledging it ends it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from aiohttp import web

from trainjobs.core.checkpoint import CheckpointDesk, SavedCheckpoint
from trainjobs.core.progress import (
    MAX_BODY_BYTES,
    ProgressBoard,
    ProgressEndpoint,
    ReportRefused,
)
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.progress_wire import read_report, reply

__all__ = ["LOCAL_INTERVAL", "PATH", "ProgressReceiver"]

PATH = "/v1/progress"
# Locally the display is the only reader: one report a second per process is plenty.
LOCAL_INTERVAL = 1.0


class ProgressReceiver:
    """Receives one job's reports. The socket is bound at construction (so the URL can go
    into the replicas' environment before anything starts); serving starts with `start()`."""

    def __init__(self, board: ProgressBoard, on_report: Callable[[], None],
                 clock: Clock = SYSTEM_CLOCK, interval: float = LOCAL_INTERVAL,
                 on_checkpoint: Callable[[SavedCheckpoint], None] | None = None) -> None:
        self.board = board
        self.on_report = on_report
        self.desk = CheckpointDesk()
        self.on_checkpoint = on_checkpoint
        self.clock = clock
        self.interval = interval
        self.refused = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self._runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> ProgressEndpoint:
        return ProgressEndpoint(f"http://127.0.0.1:{self.port}{PATH}", self.interval)

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(PATH, self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.sock.close()

    async def handle(self, request: web.Request) -> web.Response:
        try:
            report = await read_report(request)
            self.board.check_job(report)
            self.desk.check(report)  # before anything changes: a refusal changes nothing
            self.board.apply(report, self.clock.monotonic())
        except ReportRefused as refused:
            self.refused += 1
            return reply(refused.status, {"accepted": False, "error": refused.message})
        saved = self.desk.accept(report, self.clock.now())
        self.on_report()
        if saved is not None and self.on_checkpoint is not None:
            self.on_checkpoint(saved)
        answer: dict[str, object] = {"accepted": True, "interval": self.interval}
        ask = self.desk.ask_for(report)
        if ask is not None:
            answer["checkpoint"] = ask
        return reply(200, answer)
