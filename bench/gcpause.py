"""Garbage-collector pauses while a large cache grows and then turns over: CPython's default
collector against the operator's freeze policy (trainjobs/operator/gcfreeze.py), measured in
the same run.

Each variant runs in a fresh interpreter. The watch traffic is prepared first, as JSON text:
--jobs TfJobs and their pods and Services. Then, with every collection timed through
gc.callbacks (the event loop would be stalled for each), two phases:

- growth: the caches fill from nothing, as in the first sync or a restart's LIST - each object
  decoded and reduced into the operator's own structures (JobEntry; the validated Job model
  and PackedRender of the --active ones; an OwnedEntry per pod and Service);
- churn: --events watch events replayed, each a pod or job decoded and reduced into the cache,
  replacing the entry it had.

At the end each variant thaws (the policy's variant) and collects once: what that finds is
the garbage the variant left for later - for the freeze policy, cycles that died frozen.

    python -m bench.gcpause                      # 5,000 jobs, 20,000 pods and Services
    python -m bench.gcpause --jobs 1000
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, arguments, machine, stats, write_result

VARIANTS = ("cpython-default", "trainjobs-freeze")
PHASES = ("growth", "churn")


def _page(texts: list[str]) -> str:
    return '{"kind": "List", "metadata": {}, "items": [' + ", ".join(texts) + "]}"


def run_variant(variant: str, jobs: int, active: int, events: int,
                thaw_seconds: float) -> dict[str, Any]:
    import trainjobs.operator.main  # noqa: F401 - the operator's own heap: client, models
    from bench.memory import api_job, api_object, tfjob_framework
    from trainjobs.core.render import render_job
    from trainjobs.core.validation import parse_job
    from trainjobs.kube import LIST_PAGE_SIZE as PAGE
    from trainjobs.operator.cache import PackedRender, reduce_job, reduce_owned
    from trainjobs.operator.gcfreeze import install_gc_freeze

    plugins, framework, containers = tfjob_framework()

    # What the API server will deliver, as JSON text: LIST pages of the informers' page size
    # for the growth, single objects for the watch events.
    jobs_raw = [api_job(i, 3) for i in range(jobs)]
    job_wire = [json.dumps(raw) for raw in jobs_raw]
    wire: list[tuple[str, str]] = []
    for i, raw in enumerate(jobs_raw):
        rendered = render_job(parse_job(raw, plugins, f"TfJob/bench/job-{i}"), framework,
                              plugins, backend="kubernetes", controller_config={})
        objs = [("Pod", m) for m in rendered.pods.values()]
        objs += [("Service", m) for m in rendered.services.values()]
        wire += [(kind, json.dumps(api_object(m, len(wire) + k)))
                 for k, (kind, m) in enumerate(objs)]
    del jobs_raw, rendered, objs
    wire.sort(key=lambda item: item[0] != "Pod")  # pods, then Services: the LIST order
    pages = [("TfJob", _page(job_wire[p:p + PAGE])) for p in range(0, jobs, PAGE)]
    for kind in ("Pod", "Service"):
        texts = [text for k, text in wire if k == kind]
        pages += [(kind, _page(texts[p:p + PAGE])) for p in range(0, len(texts), PAGE)]
    gc.collect()

    phase = [PHASES[0]]
    pauses: list[tuple[str, int, float]] = []
    started = [0.0]

    def on_gc(gc_phase: str, info: dict[str, Any]) -> None:
        if gc_phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((phase[0], info["generation"], time.perf_counter() - started[0]))

    policy = install_gc_freeze(thaw_seconds) if variant == "trainjobs-freeze" else None
    gc.callbacks.append(on_gc)
    walls: dict[str, float] = {}
    t0 = time.perf_counter()
    entries: list[Any] = []
    models: dict[int, Any] = {}
    packed: dict[int, Any] = {}
    owned: list[Any] = []
    for kind, text in pages:  # the informers' initial LIST, page by page
        items = json.loads(text)["items"]
        if kind != "TfJob":
            owned += [reduce_owned(item, kind, containers) for item in items]
            continue
        for item in items:
            i = len(entries)
            entries.append(reduce_job(item))
            if i < active:
                models[i] = parse_job(entries[i].raw, plugins, f"TfJob/bench/job-{i}")
                packed[i] = PackedRender.pack(render_job(
                    models[i], framework, plugins, backend="kubernetes", controller_config={}))
        del items
    walls["growth"] = time.perf_counter() - t0

    phase[0] = "churn"
    t0 = time.perf_counter()
    for e in range(events):
        k = (e * 7919) % len(wire)  # a deterministic walk over every object
        kind, text = wire[k]
        owned[k] = reduce_owned(json.loads(text), kind, containers)
        if e % 4 == 0:
            j = (e * 104729) % jobs
            entries[j] = reduce_job(json.loads(job_wire[j]))
    walls["churn"] = time.perf_counter() - t0
    gc.callbacks.remove(on_gc)

    frozen = gc.get_freeze_count()
    if policy is not None:
        install_gc_freeze(0)  # removes the policy and thaws
    t0 = time.perf_counter()
    left_garbage = gc.collect()
    full_collection = time.perf_counter() - t0
    tracked = len(gc.get_objects())
    result: dict[str, Any] = {
        "variant": variant, "tracked_objects": tracked, "events": events,
        "full_collection_seconds": full_collection,
        "frozen_objects_at_end": frozen, "garbage_left_at_end": left_garbage,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "phases": {},
    }
    for name in PHASES:
        mine = [(g, p) for ph, g, p in pauses if ph == name]
        by_gen = {g: [p for gen, p in mine if gen == g] for g in (0, 1, 2)}
        result["phases"][name] = {
            "wall_seconds": walls[name], "gc_seconds": sum(p for _, p in mine),
            "max_pause": max((p for _, p in mine), default=0.0),
            "collections": {str(g): len(v) for g, v in by_gen.items()},
            "pauses": {str(g): stats(v) for g, v in by_gen.items()},
            "full_over_50ms": sum(1 for p in by_gen[2] if p > 0.05),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    p = arguments("gcpause", __doc__)
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--active", type=int, default=250, help="jobs with a model and render")
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--thaw-seconds", type=float, default=3600.0,
                   help="the freeze policy's thaw interval (the operator's default)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "gcpause.json")
    args = p.parse_args(argv)
    if args.variant:  # the child
        print(json.dumps(run_variant(args.variant, args.jobs, args.active, args.events,
                                     args.thaw_seconds)))
        return 0
    runs = []
    for r in range(args.repeats):
        for variant in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            out = subprocess.run(
                [sys.executable, "-m", "bench.gcpause", "--variant", variant,
                 "--jobs", str(args.jobs), "--active", str(args.active),
                 "--events", str(args.events), "--thaw-seconds", str(args.thaw_seconds)],
                check=True, capture_output=True, text=True).stdout
            res = json.loads(out.splitlines()[-1])
            res["repeat"] = r
            runs.append(res)
            g, c = res["phases"]["growth"], res["phases"]["churn"]
            print(f"repeat {r + 1} {variant:<16} {res['tracked_objects']} objects "
                  f"(one full collection: {res['full_collection_seconds'] * 1000:.0f} ms, "
                  f"RSS {res['max_rss_mb']:.0f} MB): growth {g['wall_seconds']:.1f}s, "
                  f"{g['collections']['2']} full collections, longest pause "
                  f"{g['max_pause'] * 1000:.0f} ms, gc {g['gc_seconds']:.2f}s; churn "
                  f"{c['collections']['2']} full, longest {c['max_pause'] * 1000:.0f} ms; "
                  f"garbage left {res['garbage_left_at_end']}", flush=True)
    write_result("gcpause", {"benchmark": "gcpause", "machine": machine(),
                             "params": {k: v for k, v in vars(args).items() if k != "variant"},
                             "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
