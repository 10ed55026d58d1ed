"""What `trainjobs run` prints: prefixed replica logs, status changes and a final summary.

Why separate: the run loop decides, this module only presents, so that the presentation can
change (colours on a terminal, plain in CI logs) without touching the semantics.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

__all__ = ["Console", "ReplicaSummary"]

_COLOURS = [36, 33, 32, 35, 34, 91, 96, 93, 92, 95, 94]


@dataclass(frozen=True)
class ReplicaSummary:
    name: str
    state: str
    exit_code: int | None
    restarts: int


class Console:
    """Writes to one stream; colours only when it is a terminal (and NO_COLOR is unset)."""

    def __init__(self, stream: TextIO | None = None, colour: bool | None = None) -> None:
        import os

        self.stream = stream or sys.stdout
        is_tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.colour = (is_tty and "NO_COLOR" not in os.environ) if colour is None else colour
        self._width = 0
        self._colour_of: dict[str, int] = {}

    def register(self, names: Iterable[str]) -> None:
        for name in names:
            self._width = max(self._width, len(name))
            self._colour_of.setdefault(name, _COLOURS[len(self._colour_of) % len(_COLOURS)])

    def _paint(self, text: str, code: int) -> str:
        return f"\033[{code}m{text}\033[0m" if self.colour else text

    def line(self, name: str, text: str) -> None:
        self.register([name])
        prefix = self._paint(f"{name:<{self._width}} |", self._colour_of[name])
        self.stream.write(f"{prefix} {text}\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        self.stream.write(self._paint(f"[trainjobs] {text}", 1) + "\n")
        self.stream.flush()

    def summary(self, job: str, state: str, seconds: float, message: str,
                replicas: list[ReplicaSummary], log_dir: str) -> None:
        ok = state == "Succeeded"
        self.stream.write("\n")
        self.note(f"{job}: {self._paint(state, 32 if ok else 31)} in {seconds:.1f}s"
                  + (f" - {message}" if message else ""))
        width = max([len(r.name) for r in replicas] + [7])
        self.stream.write(f"  {'REPLICA':<{width}}  {'STATE':<10}  {'EXIT':>4}  RESTARTS\n")
        for r in replicas:
            code = "-" if r.exit_code is None else str(r.exit_code)
            self.stream.write(f"  {r.name:<{width}}  {r.state:<10}  {code:>4}  {r.restarts}\n")
        self.stream.write(f"  logs: {log_dir}\n")
        self.stream.flush()
