"""Garbage-collector pauses with a large cache: CPython's default collector against freezing
the long-lived heap out of its full walks (gc.freeze, as Instagram and others do), measured in
the same run. It decided that the operator leaves the collector as it is
(trainjobs/operator/gcmetrics.py).

Each variant runs in a fresh interpreter: it fills the operator's own cache structures with
--jobs TfJobs (JobEntry, the validated Job model and PackedRender of the --active ones, an
OwnedEntry per pod and Service), then replays watch traffic for --events events: a pod or job
decoded from JSON and reduced into the cache, replacing the entry it had - the allocations and
promotions of a busy operator. Every collection is timed through gc.callbacks; the event loop
would be stalled for each. The "freeze" variant collects and freezes once after the fill (as
an operator would after its initial sync) and again every --freeze-every events (standing in
for a timer), thawing and collecting everything every 10th time so that frozen cycles are
reclaimed.

    python -m bench.gcpause                      # 5,000 jobs, 40,000 pods and Services
    python -m bench.gcpause --jobs 1000
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import RESULTS_DIR, machine, stats, write_result

VARIANTS = ("cpython-default", "freeze")


def freeze_round(rounds: int) -> None:
    """Collect what is not frozen (everything, every 10th round), then freeze the rest."""
    if rounds % 10 == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def run_variant(variant: str, jobs: int, active: int, events: int,
                freeze_every: int) -> dict[str, Any]:
    from bench.memory import api_job, api_object
    from trainjobs.core.render import render_job
    from trainjobs.core.validation import parse_job
    from trainjobs.operator.cache import PackedRender, reduce_job, reduce_owned
    from trainjobs.plugin.manager import load_plugins

    pauses: list[tuple[int, float]] = []
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - started[0]))

    plugins = load_plugins()
    framework = plugins.framework_for("TfJob")
    assert framework is not None
    containers = {f.name: f.container_name for f in plugins.frameworks.values()}
    entries = [reduce_job(api_job(i, 3)) for i in range(jobs)]
    models = {i: parse_job(entries[i].raw, plugins, f"TfJob/bench/job-{i}")
              for i in range(active)}
    packed = {}
    manifests = []
    for i in range(jobs):
        model = models.get(i) or parse_job(entries[i].raw, plugins, f"TfJob/bench/job-{i}")
        rendered = render_job(model, framework, plugins, backend="kubernetes",
                              controller_config={})
        if i in models:
            packed[i] = PackedRender.pack(rendered)
        manifests += [("Pod", m) for m in rendered.pods.values()]
        manifests += [("Service", m) for m in rendered.services.values()]
    # What a watch delivers: JSON text, decoded per event.
    wire = [(kind, json.dumps(api_object(m, i))) for i, (kind, m) in enumerate(manifests)]
    job_wire = [json.dumps(api_job(i, 3)) for i in range(jobs)]
    owned = [reduce_owned(json.loads(text), kind, containers) for kind, text in wire]
    gc.collect()
    tracked = len(gc.get_objects())
    t0 = time.perf_counter()
    gc.collect()  # what one full collection of this heap stalls the event loop for
    full_collection = time.perf_counter() - t0

    freeze = variant == "freeze"
    rounds = 0
    if freeze:
        rounds += 1
        freeze_round(rounds)
    gc.callbacks.append(on_gc)
    t0 = time.perf_counter()
    for n in range(events):
        k = (n * 7919) % len(wire)  # a deterministic walk over every object
        kind, text = wire[k]
        owned[k] = reduce_owned(json.loads(text), kind, containers)
        if n % 4 == 0:
            j = (n * 104729) % jobs
            entries[j] = reduce_job(json.loads(job_wire[j]))
        if freeze and n and n % freeze_every == 0:
            rounds += 1
            freeze_round(rounds)
    wall = time.perf_counter() - t0
    gc.callbacks.remove(on_gc)
    by_gen = {g: [p for gen, p in pauses if gen == g] for g in (0, 1, 2)}
    return {
        "variant": variant, "tracked_objects": tracked, "events": events,
        "full_collection_seconds": full_collection,
        "wall_seconds": wall, "gc_seconds": sum(p for _, p in pauses),
        "pauses": {str(g): stats(v) for g, v in by_gen.items()},
        "collections": {str(g): len(v) for g, v in by_gen.items()},
        "max_pause": max((p for _, p in pauses), default=0.0),
        "freeze_rounds": rounds,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gcpause", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--active", type=int, default=250, help="jobs with a model and render")
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--freeze-every", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "gcpause.json")
    args = p.parse_args(argv)
    if args.variant:  # the child
        print(json.dumps(run_variant(args.variant, args.jobs, args.active, args.events,
                                     args.freeze_every)))
        return 0
    runs = []
    for r in range(args.repeats):
        for variant in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            out = subprocess.run(
                [sys.executable, "-m", "bench.gcpause", "--variant", variant,
                 "--jobs", str(args.jobs), "--active", str(args.active),
                 "--events", str(args.events), "--freeze-every", str(args.freeze_every)],
                check=True, capture_output=True, text=True).stdout
            res = json.loads(out.splitlines()[-1])
            res["repeat"] = r
            runs.append(res)
            print(f"repeat {r + 1} {variant:<16} {res['tracked_objects']} objects tracked "
                  f"(one full collection: {res['full_collection_seconds'] * 1000:.0f} ms): "
                  f"gen2 collections {res['collections']['2']}, longest pause "
                  f"{res['max_pause'] * 1000:.0f} ms, gc total {res['gc_seconds']:.2f}s of "
                  f"{res['wall_seconds']:.1f}s", flush=True)
    write_result("gcpause", {"benchmark": "gcpause", "machine": machine(),
                             "params": {k: v for k, v in vars(args).items() if k != "variant"},
                             "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
