"""`trainjobs run --inject`'s live side: watches the replicas' processes and the progress
board, and fires the injections (trainjobs/local/inject.py) when they are due.

Why apart from the runner: the runner is the reconcile loop and knows nothing of rehearsals;
it only hands this its processes, its restart counts and its board, and lets it wrap the
command of a replica an `exit=CODE` targets (trainjobs/local/exit_wrapper.py). What fired is
said on the console, one line each, so a run's output tells what was rehearsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import trainjobs.local.exit_wrapper as exit_wrapper
from trainjobs.core.progress import ProgressBoard
from trainjobs.local.inject import Action, Sighting, Trigger
from trainjobs.local.process import ProcessSpec, ReplicaProcess
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock

__all__ = ["Injector", "report_interval"]

TICK_SECONDS = 0.1
# With an at-step injection the replicas report this often (1 s otherwise), so that it fires
# close to the step it names: reports are the only way the runner learns a step.
AT_STEP_INTERVAL = 0.2
WRAPPER = Path(exit_wrapper.__file__)


def report_interval(triggers: Sequence[Trigger], usual: float) -> float:
    """The reporting interval to give the replicas: shorter when a trigger waits on a step."""
    waits = any(t.injection.at_step is not None for t in triggers)
    return min(usual, AT_STEP_INTERVAL) if waits else usual


@dataclass(frozen=True)
class _Held:
    """A process stopped by `hang ... for=`: resumed at `until` if it is still that one."""

    until: float
    pod: str
    process: str
    text: str


class Injector:
    """Fires `triggers` on the runner's processes; `note` writes a console line."""

    def __init__(self, triggers: Sequence[Trigger], note: Callable[[str], None],
                 work_dir: Path, clock: Clock = SYSTEM_CLOCK,
                 kill_group: Callable[[int], None] | None = None) -> None:
        self.triggers = list(triggers)
        self.kill_group = kill_group or _kill_group
        self.note = note
        self.clock = clock
        self.order_dir = work_dir / "inject"
        self._since: dict[str, float] = {}  # process -> when first seen running
        self._held: list[_Held] = []
        self._exiting: list[int] = []  # wrappers told to exit: their group goes after them

    def wrap(self, pod: str, spec: ProcessSpec) -> ProcessSpec:
        """`spec` run under the exit wrapper when an `exit=CODE` targets `pod`, else as is."""
        if not any(t.pod == pod and t.injection.action is Action.EXIT for t in self.triggers):
            return spec
        self.order_dir.mkdir(parents=True, exist_ok=True)
        return replace(spec, argv=[sys.executable, "-I", "-S", str(WRAPPER),
                                   str(self.order_dir), "--", *spec.argv])

    def _sighting(self, proc: ReplicaProcess, pid: int, restarts: int,
                  board: ProgressBoard, now: float) -> Sighting:
        key = f"{proc.uid}/{pid}"
        since = self._since.setdefault(key, now)
        step = max((r.step for r in board.replicas.values() if r.at >= since), default=None)
        return Sighting(key, since, proc.attempt or 0, restarts, step)

    def tick(self, processes: Mapping[str, ReplicaProcess], restarts: Mapping[str, int],
             board: ProgressBoard) -> None:
        """Fire what is due now, resume what was held long enough, and reap the groups of
        wrappers that have exited as told."""
        now = self.clock.monotonic()
        self._reap(processes)
        self._resume(processes, now)
        for trigger in self.triggers:
            proc = processes.get(trigger.pod)
            pid = proc.pid if proc is not None else None
            if proc is None or pid is None or proc.deleting:  # being stopped: leave it be
                continue
            seen = self._sighting(proc, pid, proc.restarts + restarts.get(proc.name, 0),
                                  board, now)
            why = trigger.due(seen, now)
            if why is not None:
                self._fire(trigger, proc, pid, seen, why, now)

    def _fire(self, trigger: Trigger, proc: ReplicaProcess, pid: int, seen: Sighting,
              why: str, now: float) -> None:
        inj = trigger.injection
        count = trigger.fire(seen)
        if inj.action is Action.KILL:
            proc.signal_group(signal.SIGKILL)
            did = f"SIGKILL to {proc.name}"
        elif inj.action is Action.HANG:
            proc.signal_group(signal.SIGSTOP)
            did = f"SIGSTOP to {proc.name}"
            if inj.hold is not None:
                self._held.append(_Held(now + inj.hold, proc.name, seen.process, inj.text))
                did += f" (SIGCONT in {inj.hold:g}s)"
        else:
            order = self.order_dir / f"exit-{pid}"
            partial = order.with_suffix(".part")
            partial.write_text(f"{inj.code}\n")
            partial.replace(order)  # whole or absent: the wrapper never reads half of it
            self._exiting.append(pid)
            did = f"{proc.name} told to exit with code {inj.code}"
        self.note(f"inject ({inj.text}): {did} {why} ({count})")

    def _resume(self, processes: Mapping[str, ReplicaProcess], now: float) -> None:
        for held in [h for h in self._held if h.until <= now]:
            self._held.remove(held)
            proc = processes.get(held.pod)
            pid = proc.pid if proc is not None else None
            if proc is not None and pid is not None and f"{proc.uid}/{pid}" == held.process:
                proc.signal_group(signal.SIGCONT)
                self.note(f"inject ({held.text}): SIGCONT to {held.pod}")

    def _reap(self, processes: Mapping[str, ReplicaProcess]) -> None:
        """Once a wrapper has exited with its code, what its child left in the group goes,
        as a container's processes go with its main one."""
        running = {p.pid for p in processes.values()}
        for pid in [p for p in self._exiting if p not in running]:
            self._exiting.remove(pid)
            (self.order_dir / f"exit-{pid}").unlink(missing_ok=True)
            self.kill_group(pid)

    async def watch(self, processes: Callable[[], Mapping[str, ReplicaProcess]],
                    restarts: Mapping[str, int], board: ProgressBoard) -> None:
        """Tick until cancelled (the run's end)."""
        while True:
            self.tick(processes(), restarts, board)
            await asyncio.sleep(TICK_SECONDS)

    def unfired(self) -> list[str]:
        """Lines for the injections that fired fewer times than asked."""
        return [line for t in self.triggers if (line := t.unfired()) is not None]


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
