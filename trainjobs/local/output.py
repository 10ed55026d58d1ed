"""What `trainjobs run` prints: prefixed replica logs, status changes, the job's progress and
a final summary.

Why separate: the run loop decides, this module only presents, so that the presentation can
change (colours on a terminal, plain in CI logs) without touching the semantics.

Progress on a terminal is one live line kept below the logs (erased before each log line and
drawn again after it); elsewhere (a pipe, a CI log) it is a plain line at most every
PLAIN_PROGRESS_EVERY seconds, and always for the first report and for the last step.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TextIO

from trainjobs.core.progress import JobProgress
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock

__all__ = ["Console", "ReplicaSummary", "format_duration", "format_progress"]

PLAIN_PROGRESS_EVERY = 5.0
LIVE_METRICS = 6
_ERASE = "\r\033[K"

_COLOURS = [36, 33, 32, 35, 34, 91, 96, 93, 92, 95, 94]


@dataclass(frozen=True)
class ReplicaSummary:
    name: str
    state: str
    exit_code: int | None
    restarts: int


def format_duration(seconds: float) -> str:
    """3s, 4m05s, 2h03m: short enough for a progress line."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_metrics(metrics: Mapping[str, float], limit: int | None = None) -> str:
    names = list(metrics)[:limit] if limit is not None else list(metrics)
    more = len(metrics) - len(names)
    text = " ".join(f"{n}={metrics[n]:.4g}" for n in names)
    return text + (f" (+{more} more)" if more > 0 else "")


def format_progress(view: JobProgress, metrics_limit: int | None = LIVE_METRICS) -> str:
    """step 120/400 (30%), epoch 2, ETA 1m05s, loss=0.312 acc=0.91 [from mnist-worker-0]"""
    parts = [f"step {view.step}" + (f"/{view.total}" if view.total else "")
             + (f" ({view.percent:.0f}%)" if view.percent is not None else "")]
    if view.epoch is not None:
        parts.append(f"epoch {view.epoch}")
    if view.eta_seconds is not None and view.total and view.step < view.total:
        parts.append(f"ETA {format_duration(view.eta_seconds)}")
    if view.metrics:
        parts.append(format_metrics(view.metrics, metrics_limit))
    return ", ".join(parts) + f" [from {view.replica}]"


class Console:
    """Writes to one stream; colours only when it is a terminal (and NO_COLOR is unset); the
    live progress line only on a terminal (`live`)."""

    def __init__(self, stream: TextIO | None = None, colour: bool | None = None,
                 live: bool | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        import os

        self.stream = stream or sys.stdout
        is_tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.colour = (is_tty and "NO_COLOR" not in os.environ) if colour is None else colour
        self.live = is_tty if live is None else live
        self.clock = clock
        self._width = 0
        self._colour_of: dict[str, int] = {}
        self._status = ""  # the live line now on screen ("" when none)
        self._last_plain: float | None = None
        self._last_plain_step = -1

    def _erase(self) -> None:
        if self._status:
            self.stream.write(_ERASE)

    def _redraw(self) -> None:
        if self._status:
            self.stream.write(self._status)
        self.stream.flush()

    def progress(self, view: JobProgress) -> None:
        """Show the job's progress: the live line, or a plain line now and then."""
        text = format_progress(view)
        if self.live:
            columns = shutil.get_terminal_size((100, 24)).columns
            line = f"[trainjobs] {text}"
            line = line if len(line) < columns else line[:max(columns - 2, 10)] + "…"
            self._erase()
            self._status = self._paint(line, 1)
            self._redraw()
            return
        now = self.clock.monotonic()
        last_step = view.total is not None and view.step >= view.total \
            and view.step != self._last_plain_step
        if self._last_plain is None or last_step or \
                now - self._last_plain >= PLAIN_PROGRESS_EVERY:
            self._last_plain, self._last_plain_step = now, view.step
            self.note(f"progress: {text}")

    def register(self, names: Iterable[str]) -> None:
        for name in names:
            self._width = max(self._width, len(name))
            self._colour_of.setdefault(name, _COLOURS[len(self._colour_of) % len(_COLOURS)])

    def _paint(self, text: str, code: int) -> str:
        return f"\033[{code}m{text}\033[0m" if self.colour else text

    def line(self, name: str, text: str) -> None:
        self.register([name])
        prefix = self._paint(f"{name:<{self._width}} |", self._colour_of[name])
        self._erase()
        self.stream.write(f"{prefix} {text}\n")
        self._redraw()

    def note(self, text: str) -> None:
        self._erase()
        self.stream.write(self._paint(f"[trainjobs] {text}", 1) + "\n")
        self._redraw()

    def summary(self, job: str, state: str, seconds: float, message: str,
                replicas: list[ReplicaSummary], log_dir: str,
                progress: JobProgress | None = None) -> None:
        ok = state == "Succeeded"
        self._erase()
        self._status = ""
        self.stream.write("\n")
        self.note(f"{job}: {self._paint(state, 32 if ok else 31)} in {seconds:.1f}s"
                  + (f" - {message}" if message else ""))
        width = max([len(r.name) for r in replicas] + [7])
        self.stream.write(f"  {'REPLICA':<{width}}  {'STATE':<10}  {'EXIT':>4}  RESTARTS\n")
        for r in replicas:
            code = "-" if r.exit_code is None else str(r.exit_code)
            self.stream.write(f"  {r.name:<{width}}  {r.state:<10}  {code:>4}  {r.restarts}\n")
        if progress is not None:
            where = f"{progress.step}/{progress.total}" if progress.total else str(progress.step)
            epoch = f", epoch {progress.epoch}" if progress.epoch is not None else ""
            self.stream.write(f"  progress: step {where}{epoch}, {progress.reports} reports, "
                              f"last from {progress.replica}\n")
            if progress.metrics:
                self.stream.write(f"  last metrics: {format_metrics(progress.metrics)}\n")
        self.stream.write(f"  logs: {log_dir}\n")
        self.stream.flush()
