"""Start and stop the control plane's daemons: free ports, process groups, no leftovers.

Each daemon runs in its own session (so its own process group), with stdout and stderr in a
log file. A stopped daemon is identified by pid *and* start time (from ``/proc``), so a
``down`` run long after ``up`` never signals an unrelated process that reused the pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (all held open at once)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start_daemon(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str],
    cwd: Path,
    die_with_parent: bool,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, logging to ``log_path``.

    ``die_with_parent`` makes the kernel SIGKILL the daemon when the starting thread dies (a
    test session killed hard leaves nothing behind); ``up`` from the CLI turns it off.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )


@dataclass(frozen=True)
class ProcessRef:
    """A daemon as recorded in the state file: pid plus kernel start time."""

    name: str
    pid: int
    start_time: int

    @classmethod
    def of(cls, name: str, pid: int) -> ProcessRef:
        return cls(name=name, pid=pid, start_time=start_time_of(pid) or 0)

    def alive(self) -> bool:
        """Running (not a zombie) and still the same process that was started."""
        stat = proc_stat(self.pid)
        return stat is not None and stat.state != "Z" and stat.start_time == self.start_time


def start_time_of(pid: int) -> int | None:
    stat = proc_stat(pid)
    return None if stat is None else stat.start_time


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/PID/stat`` says of a process: what the harness needs to know it is the
    same process, and what the benchmarks sample (its session, its CPU time)."""

    state: str
    session: int
    cpu_s: float  # utime + stime
    start_time: int  # clock ticks after boot


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> ProcStat | None:
    """``pid``'s stat line, None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) may contain spaces and parentheses: split after its closing paren.
    fields = raw[raw.rfind(")") + 2 :].split()
    return ProcStat(state=fields[0], session=int(fields[3]),
                    cpu_s=(int(fields[11]) + int(fields[12])) / _CLK_TCK,
                    start_time=int(fields[19]))


def proc_memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB; (0, 0) when it is gone."""
    rss = hwm = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def stop_processes(
    refs: Sequence[ProcessRef],
    *,
    grace: float = 5.0,
    popens: Mapping[int, subprocess.Popen[bytes]] | None = None,
) -> list[str]:
    """SIGTERM each daemon's process group, SIGKILL what is left after ``grace`` seconds.

    Returns the names of daemons that were still running after SIGKILL (normally none).
    ``popens`` are the caller's own children: they are waited for (reaped), not just seen to
    die. A Go program's main thread shows as a zombie while its other threads still exit, so
    ``/proc`` alone is not enough to know a child is gone.
    """
    children = popens or {}

    def running(ref: ProcessRef) -> bool:
        proc = children.get(ref.pid)
        return proc.poll() is None if proc is not None else ref.alive()

    live = [r for r in refs if running(r)]
    for ref in live:
        _signal_group(ref.pid, signal.SIGTERM)
    for sig, wait in ((signal.SIGKILL, grace), (None, 5.0)):
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            time.sleep(0.02)
            live = [r for r in live if running(r)]
        if sig is None:
            break
        for ref in live:
            _signal_group(ref.pid, sig)
    return [r.name for r in live]


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
