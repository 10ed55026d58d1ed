"""The operator under test, as a child process in its own session: started, awaited until
ready, sampled (RSS, CPU) every second, asked for its GC pauses, stopped.

Why its own session: the footprint covers every process of it (a wrapper shell included),
and stopping it signals the whole group. Processes are started and read through the test
harness's process helpers (`trainjobs.testing._process`), the same that run the control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.report import REPO, log
from trainjobs.testing._process import free_ports, proc_memory, proc_stat, start_daemon

DEFAULT_OPERATOR_CMD = (
    "{python} -m trainjobs.cli operator --kubeconfig {kubeconfig} "
    "--http-address 127.0.0.1:{port} --log-level warning --concurrency {concurrency} "
    "--namespace {namespace}"
)


def operator_phases(commands: list[str], labels: list[str]) -> list[tuple[str, str]]:
    """(label, command) per operator under test, from repeated --operator-cmd and --label:
    our default operator when none is given; labels default to ours, other1, ..."""
    commands = commands or [DEFAULT_OPERATOR_CMD]
    labels = labels or ["ours"] + [f"other{i}" for i in range(1, len(commands))]
    if len(labels) != len(commands):
        raise SystemExit("give one --label per --operator-cmd")
    return list(zip(labels, commands, strict=True))


class OperatorProcess:
    """The operator under test, as a child process in its own session.

    `command` is a template: {python} {kubeconfig} {port} {namespace} {concurrency} are filled
    in. Footprint figures cover every process of its session (a wrapper shell included).
    """

    def __init__(self, command: str, *, kubeconfig: Path, namespace: str, concurrency: int,
                 log_path: Path, ready_path: str | None = "/readyz",
                 python: str = sys.executable) -> None:
        self.port = free_ports(1)[0]
        self.argv = shlex.split(command.format(
            python=python, kubeconfig=kubeconfig, port=self.port, namespace=namespace,
            concurrency=concurrency))
        self.log_path = log_path
        self.ready_path = ready_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.samples: list[tuple[float, int, float]] = []  # (time, rss KiB, cpu s)
        self._sampler: asyncio.Task[None] | None = None
        self.peak_hwm_kb = 0
        self.cpu_at_stop = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _pids(self) -> list[int]:
        sid = self.pid
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = proc_stat(int(entry))
                if st is not None and st.session == sid:
                    pids.append(int(entry))
        return pids or [sid]

    def footprint(self) -> dict[str, float]:
        """rss_mb (now), hwm_mb (peak, summed over the session's processes), cpu_s."""
        rss = hwm = 0
        cpu = 0.0
        for pid in self._pids():
            r, h = proc_memory(pid)
            rss += r
            hwm += h
            st = proc_stat(pid)
            cpu += st.cpu_s if st else 0.0
        self.peak_hwm_kb = max(self.peak_hwm_kb, hwm)
        return {"rss_mb": rss / 1024, "hwm_mb": hwm / 1024, "cpu_s": cpu}

    async def start(self, timeout: float = 300.0) -> float:
        """Start it and wait until ready; returns the seconds that took."""
        t0 = time.perf_counter()
        self.proc = start_daemon(self.argv, self.log_path, env=os.environ, cwd=REPO,
                                 die_with_parent=True)
        log(f"operator pid {self.proc.pid}: {' '.join(self.argv)}")
        await self.wait_ready(timeout)
        self._sampler = asyncio.create_task(self._sample())
        return time.perf_counter() - t0

    async def wait_ready(self, timeout: float) -> None:
        if self.ready_path is None:
            await asyncio.sleep(5)
            return
        url = f"http://127.0.0.1:{self.port}{self.ready_path}"
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as s:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"operator exited with {self.proc.returncode}; log "
                                       f"{self.log_path}:\n{self.log_tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"operator not ready after {timeout}s; log "
                                       f"{self.log_path}:\n{self.log_tail()}")
                await asyncio.sleep(0.05)

    async def _sample(self) -> None:
        t0 = time.perf_counter()
        while True:
            fp = self.footprint()
            self.samples.append((time.perf_counter() - t0, int(fp["rss_mb"] * 1024),
                                 fp["cpu_s"]))
            await asyncio.sleep(1.0)

    async def gc_pauses(self) -> dict[str, Any]:
        """Its garbage-collector pauses since it started, by generation, from its /metrics
        (trainjobs_gc_pause_seconds); {} for an operator without that metric."""
        try:
            async with aiohttp.ClientSession() as session, session.get(
                    f"http://127.0.0.1:{self.port}/metrics",
                    timeout=aiohttp.ClientTimeout(total=10)) as resp:
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return {}
        out: dict[str, Any] = {}
        for family in text_string_to_metric_families(text):
            if family.name != "trainjobs_gc_pause_seconds":
                continue
            for sample in family.samples:
                gen = sample.labels.get("generation", "")
                entry = out.setdefault(gen, {"buckets": {}})
                if sample.name.endswith("_bucket"):
                    entry["buckets"][sample.labels["le"]] = sample.value
                elif sample.name.endswith("_count"):
                    entry["count"] = sample.value
                elif sample.name.endswith("_sum"):
                    entry["sum_seconds"] = sample.value
        return out

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self) -> int | None:
        """SIGTERM its session, SIGKILL after 15 s; returns its exit code."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        with contextlib.suppress(Exception):
            fp = self.footprint()
            self.cpu_at_stop = fp["cpu_s"]
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + wait
            while self.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if self.proc.poll() is not None:
                break
        return self.proc.poll()

    def kill_now(self) -> None:
        """Synchronous last resort (used from `finally` when the loop is gone)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)

