"""Where the running operator's memory is: the operator, with a probe it answers on SIGUSR1.

Why: `bench.memory` says what the caches hold per object in a fresh interpreter, but the
operator at 5,000 jobs held ~70 MB more than that simulation. This breaks the RSS of the real
process down while it runs: CPython's small-object allocator (pymalloc: what is in use, what
its arenas hold), glibc's heap (`mallinfo2`: in use, free, mmapped), the TLS connections open
(each holds its read buffer and OpenSSL's state), and the objects the collector tracks by
type, with their shallow sizes. It costs nothing until asked, so the figures are the
operator's own (tracemalloc would double its memory).

    python -m bench.scale --heap-probe ...      # probes when empty and when populated

or by hand, as the operator command of a bench, then `kill -USR1 PID`:

    HEAPPROBE_OUT=/tmp/heap python -m bench.heapprobe operator --kubeconfig ...

Each probe writes `$HEAPPROBE_OUT-N.json` (N = 1, 2, ...).
"""

from __future__ import annotations

import asyncio.sslproto
import collections
import ctypes
import gc
import itertools
import json
import os
import re
import runpy
import signal
import sys
import tempfile
from types import FrameType
from typing import Any

__all__ = ["probe"]

ENV = "HEAPPROBE_OUT"
MB = 1024 * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _glibc_heap() -> dict[str, float] | None:
    """glibc's malloc: bytes in use, free inside its heap, and mmapped (MB); None if the C
    library has no mallinfo2 (glibc < 2.33, musl)."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return {"in_use_mb": info.uordblks / MB, "free_mb": info.fordblks / MB,
            "mmapped_mb": info.hblkhd / MB, "heap_mb": info.arena / MB}


def _pymalloc() -> dict[str, float]:
    """pymalloc's bytes in allocated and in free blocks (MB) and its arenas (1 MiB each), from
    sys._debugmallocstats, which writes to the C-level stderr."""
    with tempfile.TemporaryFile("w+") as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()

    def figure(label: str) -> int:
        found = re.search(rf"^# {label}\s*=\s*([\d,]+)", text, re.M)
        if found is None:
            raise RuntimeError(f"sys._debugmallocstats printed no '{label}'")
        return int(found.group(1).replace(",", ""))

    return {"in_use_mb": figure("bytes in allocated blocks") / MB,
            "free_in_arenas_mb": figure("bytes in available blocks") / MB,
            "arenas": figure("arenas allocated current")}


def _rss() -> dict[str, float]:
    # Not trainjobs.testing's proc_memory: importing that package would add to what is measured.
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    return {key: int(status[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}


def probe() -> dict[str, Any]:
    """The breakdown, as a dict (JSON-ready)."""
    gc.collect()
    # The operator freezes its long-lived heap (gcfreeze): thaw to see it, freeze again after.
    gc.unfreeze()
    try:
        objects = gc.get_objects()
        counts: collections.Counter[str] = collections.Counter()
        sizes: collections.Counter[str] = collections.Counter()
        for obj in objects:
            name = type(obj).__qualname__
            counts[name] += 1
            sizes[name] += sys.getsizeof(obj)
        protocols = [o for o in objects if isinstance(o, asyncio.sslproto.SSLProtocol)]
        tls = len(protocols)
        tls_buffers = sum(len(getattr(p, "_ssl_buffer", b"")) for p in protocols)
        del protocols
        del objects
    finally:
        gc.freeze()
    rss = _rss()
    return {
        "rss_mb": rss["VmRSS"], "hwm_mb": rss["VmHWM"],
        "pymalloc": _pymalloc(), "glibc": _glibc_heap(),
        "tls_connections": tls, "tls_read_buffers_mb": tls_buffers / MB,
        "tracked_objects": sum(counts.values()),
        "by_type": [{"type": name, "count": counts[name], "shallow_mb": size / MB}
                    for name, size in sizes.most_common(25)],
    }


def _on_signal(out: str) -> None:
    numbers = itertools.count(1)

    def handler(_signum: int, _frame: FrameType | None) -> None:
        path = f"{out}-{next(numbers)}.json"
        try:
            found = probe()
        except Exception as exc:  # raised in a signal handler, it would stop the operator
            found = {"error": f"{type(exc).__name__}: {exc}"}
        with open(path + ".tmp", "w") as f:
            json.dump(found, f, indent=1)
        os.replace(path + ".tmp", path)  # whole, or not there
    signal.signal(signal.SIGUSR1, handler)


def main() -> None:
    out = os.environ.get(ENV)
    if not out:
        sys.exit(f"bench.heapprobe: set {ENV} to the path prefix its probes are written to")
    _on_signal(out)
    sys.argv = ["trainjobs", *sys.argv[1:]]
    runpy.run_module("trainjobs.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
