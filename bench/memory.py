"""Memory per cached object: what the operator holds for each job, pod and Service, and what
importing it costs before it holds anything. No cluster: it builds the objects the operator
would receive, passes them through the operator's own cache code, and measures with
tracemalloc (bytes Python allocated and still holds, per object).

Why a program of its own: the scale benchmark reports the operator's RSS at 20,000 pods; this
says where that memory goes, so a change to the caches can be judged in seconds.

    python -m bench.memory                  # 1,000 TfJobs, Chief + 3 Workers
    python -m bench.memory --peak 5000      # RSS with 5,000 active jobs' objects held

An older checkout's operator is measured by the same program with its tree first on the path:
    PYTHONSAFEPATH=1 PYTHONPATH=<dir holding only bench/>:<old checkout> <its venv>/bin/python \
        -m bench.memory
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

from bench.jobs import tfjob
from trainjobs.core.render import render_job
from trainjobs.core.validation import parse_job
from trainjobs.operator import cache
from trainjobs.operator.cache import PackedRender, reduce_job, reduce_owned
from trainjobs.plugin.manager import PluginManager, load_plugins
from trainjobs.plugin.types import Framework

IMPORTS = {
    "python": "pass",
    "aiohttp, pydantic, pluggy, yaml": "import aiohttp, pydantic, pluggy, yaml",
    "the operator (everything it imports)": "import trainjobs.cli, trainjobs.operator.main",
}


def tfjob_framework() -> tuple[PluginManager, Framework, dict[str, str]]:
    """The installed plugins, the TfJob framework, and each kind's main container name (what
    reduce_owned needs): what the operator builds at start."""
    plugins = load_plugins()
    framework = plugins.framework_for("TfJob")
    assert framework is not None
    return plugins, framework, {f.name: f.container_name for f in plugins.frameworks.values()}


def per_object(label: str, n: int, build: Callable[[int], Any]) -> tuple[list[Any], float]:
    """Build n objects; the bytes they still hold, per object."""
    gc.collect()
    tracemalloc.start()
    out = [build(i) for i in range(n)]
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  {label:<58} {held / n / 1024:6.2f} KiB")
    return out, held / n


def import_rss(statement: str) -> float:
    """RSS (MB) of a fresh interpreter that only runs `statement` (VmRSS: ru_maxrss would
    carry this process's peak over the fork)."""
    code = f"{statement}\nprint([l for l in open('/proc/self/status') if l.startswith('VmRSS')]" \
           "[0].split()[1])"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    return int(out.split()[-1]) / 1024


def api_job(i: int, workers: int) -> dict[str, Any]:
    """A TfJob as the API server returns it (metadata filled in, a status)."""
    job = tfjob(f"job-{i}", "bench", workers=workers, chief_run="1s", worker_run="1s")
    job["metadata"].update(uid=f"00000000-0000-0000-0000-{i:012d}", generation=1,
                           resourceVersion=str(1000 + i),
                           creationTimestamp="2026-11-23T10:00:00Z")
    job["status"] = {"state": "Running", "startTime": "2026-11-23T10:00:01Z"}
    decoded: dict[str, Any] = json.loads(json.dumps(job))
    return decoded


def api_object(manifest: dict[str, Any], i: int) -> dict[str, Any]:
    """A rendered pod or Service as the API server returns it: uid, managedFields, status."""
    obj: dict[str, Any] = json.loads(json.dumps(manifest))
    meta = obj["metadata"]
    meta.update(uid=f"11111111-0000-0000-0000-{i:012d}", resourceVersion=str(5000 + i),
                creationTimestamp="2026-11-23T10:00:01Z",
                managedFields=[{"manager": "trainjobs-operator", "operation": "Update",
                                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}])
    if obj["kind"] == "Pod":
        obj["status"] = {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [{
            "name": c["name"], "ready": True, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-11-23T10:00:02Z"}}}
            for c in obj["spec"]["containers"]]}
    return obj


def rss_mb() -> float:
    return int(next(line for line in open("/proc/self/status")
                    if line.startswith("VmRSS")).split()[1]) / 1024


def peak(n: int, workers: int) -> None:
    """The peak of a scale run in one process, no cluster: `n` active TfJobs and their pods
    and Services, each decoded from JSON text as a watch delivers it, reduced, validated and
    packed by the operator's own code, all held at once. Prints RSS after the imports and
    with everything held."""
    import trainjobs.cli
    import trainjobs.operator.main  # noqa: F401  (what the operator imports)
    from trainjobs.kube import api as transport

    loads = getattr(transport, "orjson", json).loads  # the operator's decoder
    print(f"  RSS after the imports {rss_mb():.1f} MB")
    plugins, framework, containers = tfjob_framework()
    held: list[Any] = []
    for i in range(n):
        entry = reduce_job(loads(json.dumps(api_job(i, workers))))
        job = parse_job(entry.raw, plugins, f"TfJob/bench/job-{i}", controller_config={})
        rendered = render_job(job, framework, plugins, backend="kubernetes",
                              controller_config={})
        kept = cache.PackedJob.pack(job) if hasattr(cache, "PackedJob") else job
        held += [entry, kept, PackedRender.pack(rendered)]
        for kind, objs in (("Pod", rendered.pods), ("Service", rendered.services)):
            for k, m in enumerate(objs.values()):
                obj = loads(json.dumps(api_object(m, i * 100 + k)))
                held.append(reduce_owned(obj, kind, containers))
    gc.collect()
    print(f"  RSS with {n} active TfJobs and their {len(held) - 3 * n} pods and Services "
          f"held: {rss_mb():.1f} MB")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=3, help="Workers per job besides the Chief")
    p.add_argument("--peak", type=int, default=0, metavar="N",
                   help="instead: the RSS of N active jobs and their objects held in a fresh "
                        "interpreter (the peak of bench.scale's population, without a cluster)")
    args = p.parse_args(argv)
    if args.peak:
        print(f"Peak, simulated ({args.peak} TfJobs, Chief + {args.workers} Workers):")
        subprocess.run([sys.executable, "-c", "import bench.memory as m; "
                        f"m.peak({args.peak}, {args.workers})"], check=True)
        return 0
    plugins, framework, containers = tfjob_framework()

    print("RSS after import (fresh interpreter):")
    for label, statement in IMPORTS.items():
        print(f"  {label:<58} {import_rss(statement):6.1f} MB")

    n = args.jobs
    print(f"\nHeld per job ({n} TfJobs, Chief + {args.workers} Workers):")
    entries, _ = per_object("JobEntry: metadata, spec, status (kept for every job)", n,
                            lambda i: reduce_job(api_job(i, args.workers)))
    jobs, _ = per_object("validated Job model, as objects", n,
                         lambda i: parse_job(entries[i].raw, plugins, f"TfJob/bench/job-{i}"))
    if hasattr(cache, "PackedJob"):  # (an operator before it kept the model as objects)
        per_object("PackedJob (the model as kept for active jobs)", n,
                   lambda i: cache.PackedJob.pack(jobs[i]))
    rendered, _ = per_object("rendered pods + Services as dicts (before packing)", n,
                             lambda i: render_job(jobs[i], framework, plugins,
                                                  backend="kubernetes", controller_config={}))
    per_object("PackedRender (kept for active jobs)", n,
               lambda i: PackedRender.pack(rendered[i]))

    objects = [(kind, api_object(m, i)) for i, r in enumerate(rendered[:max(1, n // 4)])
               for kind, ms in (("Pod", r.pods), ("Service", r.services)) for m in ms.values()]
    print(f"\nHeld per owned object ({len(objects)} pods and Services):")
    per_object("OwnedEntry (+ ObservedPod for pods), per object", len(objects),
               lambda i: reduce_owned(objects[i][1], objects[i][0], containers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
