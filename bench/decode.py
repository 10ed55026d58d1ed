"""JSON decoders on the watch path: the standard library's, orjson's and msgspec's, on the
watch events the operator receives (TfJobs, their pods and Services as bench.memory builds
them), for CPU per event and for what the operator's cache then holds per object.

Why: every object the operator caches arrives as one line of a watch (or a LIST page) and is
decoded whole before the informer's transform keeps a part of it; at 20,000 pods a re-list
decodes them all. No cluster: the lines are built here, each decoder runs in this process, the
order of decoders alternates between repeats, and the median CPU time is reported.

    python -m bench.decode       # 250 TfJobs (Chief + 3 Workers), 5 repeats; msgspec is
                                 # measured where installed (not a dependency)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from bench.memory import api_job, api_object, tfjob_framework
from trainjobs.core.render import render_job
from trainjobs.core.validation import parse_job
from trainjobs.operator.cache import reduce_job, reduce_owned

Decoder = Callable[[bytes], Any]


def decoders() -> dict[str, Decoder]:
    """Those installed, by name."""
    out: dict[str, Decoder] = {"json (stdlib)": json.loads}
    try:
        import orjson
        out["orjson"] = orjson.loads
    except ImportError:
        print("orjson: not installed")
    try:
        import msgspec
        out["msgspec"] = msgspec.json.Decoder().decode
    except ImportError:
        print("msgspec: not installed")
    return out


def watch_lines(jobs: int, workers: int) -> dict[str, list[bytes]]:
    """Watch event lines as the API server sends them, by kind."""
    plugins, framework, _ = tfjob_framework()
    out: dict[str, list[bytes]] = {"TfJob": [], "Pod": [], "Service": []}
    for i in range(jobs):
        job = api_job(i, workers)
        out["TfJob"].append(_line(job))
        rendered = render_job(parse_job(job, plugins, f"TfJob/bench/job-{i}"), framework,
                              plugins, backend="kubernetes", controller_config={})
        for kind, objs in (("Pod", rendered.pods), ("Service", rendered.services)):
            for n, m in enumerate(objs.values()):
                out[kind].append(_line(api_object(m, i * 100 + n)))
    return out


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": "MODIFIED", "object": obj}, separators=(",", ":")).encode()


def time_per_event(decode: Decoder, lines: list[bytes]) -> float:
    """CPU microseconds per event, decoding only (this process's CPU time: on a shared
    machine wall time counts the other processes' turns)."""
    start = time.process_time()
    for line in lines:
        decode(line)
    return (time.process_time() - start) / len(lines) * 1e6


def held_per_object(decode: Decoder, lines: list[bytes], kind: str,
                    containers: dict[str, str]) -> float:
    """Bytes the cache holds per object after the decoded event is reduced."""
    reduce: Callable[[dict[str, Any]], Any] = (
        reduce_job if kind == "TfJob" else lambda o: reduce_owned(o, kind, containers))
    gc.collect()
    tracemalloc.start()
    kept = [reduce(decode(line)["object"]) for line in lines]
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return held / len(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=250)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    lines = watch_lines(args.jobs, args.workers)
    _, _, containers = tfjob_framework()
    found = decoders()
    for kind, kind_lines in lines.items():
        size = statistics.mean(map(len, kind_lines))
        print(f"\n{kind}: {len(kind_lines)} events, {size:.0f} bytes each")
        times: dict[str, list[float]] = {name: [] for name in found}
        for r in range(args.repeats):
            order = list(found.items())
            for name, decode in order if r % 2 == 0 else reversed(order):
                times[name].append(time_per_event(decode, kind_lines))
        base = statistics.median(times["json (stdlib)"])
        for name, decode in found.items():
            t = statistics.median(times[name])
            held = held_per_object(decode, kind_lines, kind, containers)
            print(f"  {name:<14} decode {t:7.1f} CPU-us/event ({base / t:4.2f}x stdlib)   "
                  f"cached after reduce {held / 1024:5.2f} KiB/object")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
