"""What a benchmark run records and how: its log lines, the machine it ran on, summary
statistics, time series, the JSON result file, and a clean end on SIGTERM.

Why together: every benchmark writes its figures the same way, so docs/benchmarks.md can say
what each figure was measured on (`machine`) and how it was summarised (`stats`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from trainjobs.testing import K8S_VERSION, KWOK_VERSION

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "docs" / "benchmarks"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def arguments(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of `python -m bench.NAME`: its module docstring, as written, is --help's
    description."""
    return argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


@contextlib.contextmanager
def workdir(name: str, given: Path | None = None, keep: bool = False) -> Iterator[Path]:
    """The run's folder (control plane state, logs, inputs): `given` (--workdir) as it is,
    else a temporary one, removed once the run has succeeded unless `keep`. After a failure
    it stays and its path is logged: its logs say why."""
    root = given or Path(tempfile.mkdtemp(prefix=f"trainjobs-bench-{name}-"))
    try:
        yield root
    except BaseException:
        log(f"logs kept in {root}")
        raise
    if given is None and not keep:
        shutil.rmtree(root, ignore_errors=True)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                                capture_output=True, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "trainjobs"], cwd=REPO,
                               text=True, capture_output=True, check=False).stdout.strip()
        if dirty:
            commit += "+dirty"
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "kubernetes": K8S_VERSION,
        "kwok": KWOK_VERSION,
        "commit": commit,
        "loadavg_at_start": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def write_result(name: str, data: dict[str, Any], out: Path | None = None) -> Path:
    path = out or RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    log(f"results written to {path}")
    return path


def stats(values: Sequence[float]) -> dict[str, float]:
    """min/median/max plus p50/p90/p99 (nearest rank) of `values`."""
    if not values:
        return {"n": 0}
    s = sorted(values)

    def rank(p: float) -> float:
        return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]

    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    return {"n": len(s), "min": s[0], "median": median, "max": s[-1],
            "p50": rank(50), "p90": rank(90), "p99": rank(99)}


def series_since(series: Sequence[tuple[float, int]], t0: float, every: float = 0.1
                 ) -> list[tuple[float, int]]:
    """Downsample a (time, count) series to one point per `every` seconds, times from t0."""
    out: list[tuple[float, int]] = []
    for t, n in series:
        rel = round(t - t0, 3)
        if out and rel - out[-1][0] < every:
            out[-1] = (out[-1][0], n)
        else:
            out.append((rel, n))
    return out


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP end the bench like Ctrl-C, so every `finally` (cluster, operator) runs."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
