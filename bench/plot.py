"""PNG plots of the benchmark results (matplotlib, a bench-only dependency).

    python -m bench.plot        # docs/benchmarks/{fanout,scale,progress,preemption}.json
    python -m bench.plot --fanout F.json --scale S.json --progress P.json \
        --preemption R.json --outdir DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR

COLORS = {"ours": "tab:blue", "ceiling": "tab:gray"}


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("matplotlib is missing: $(scripts/uv.sh) pip install --python "
                         "$(scripts/dev-venv.sh)/bin/python matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_fanout(data: dict[str, Any], out: Path) -> Path:
    plt = _matplotlib()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    params = data["params"]
    labels = list(data["commands"])
    styles = ["-", "--", ":", "-."]
    ceilings = data["repeats"][0]["ceilings"]
    palette = ["tab:gray", "black", "tab:brown"]
    others = ["tab:blue", "tab:orange", "tab:green", "tab:purple"]
    for i, rep in enumerate(data["repeats"]):
        ls = styles[i % len(styles)]
        series = [(f"ceiling{c}", f"ceiling, {c} in flight", palette[j % len(palette)])
                  for j, c in enumerate(ceilings)]
        series += [(lab, lab, others[j % len(others)]) for j, lab in enumerate(labels)]
        for key, name, color in series:
            pts = rep[key]["created_series"]
            run = rep[key]["running_series"]
            label = name if i == 0 else None
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, color=color, label=label,
                    linewidth=1.3)
            ax2.plot([p[0] for p in run], [p[1] for p in run], ls, color=color, label=label,
                     linewidth=1.3)
    n = params["jobs"] * (1 + params["workers"])
    ax.set_title(f"pods + Services created ({params['jobs']} TfJobs x {1 + params['workers']}"
                 f" replicas = {2 * n} objects)")
    ax.set_xlabel("seconds since the first create")
    ax.set_ylabel("objects seen by the watcher")
    ax2.set_title("pods Running (seen by the watcher)")
    ax2.set_xlabel("seconds since the first create")
    ax2.set_ylabel("pods")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        a.legend(loc="lower right", fontsize=8)
    m = data["machine"]
    fig.suptitle(f"fan-out, {len(data['repeats'])} repeats (solid, dashed, dotted: repeat 1, "
                 f"2, 3); {m['nproc']} CPUs, {m['cpu_model']}, shared", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_scale(data: dict[str, Any], out: Path) -> Path:
    plt = _matplotlib()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5))

    def cdf(a: Any, values: list[float], label: str | None, color: str, ls: str) -> None:
        xs = [v * 1000 for v in sorted(values)]
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        a.step(xs, ys, ls, where="post", label=label, color=color)

    f = data["footprint_full"]
    # Runs before --repeats kept one round's figures at the top level.
    rounds = [r for r in data.get("rounds", [data]) if "probes_full" in r]
    curves = [  # (axes, phase, samples, label, colour); a ceiling only where recorded
        (ax, "latency", "values", f"ours: pod ended -> job Succeeded ({f['jobs']} jobs)",
         "tab:blue"),
        (ax, "latency", "ceiling_values", "ceiling: pod ended -> bare reactor's ConfigMap",
         "tab:gray"),
        (ax2, "probes_empty", "values", "ours, no other job", "tab:cyan"),
        (ax2, "probes_full", "values", f"ours, {f['jobs']} jobs, {f['pods']} pods present",
         "tab:blue"),
        (ax2, "probes_empty", "ceiling_values", "ceiling (bench creates the pods), empty",
         "silver"),
        (ax2, "probes_full", "ceiling_values", "ceiling, full", "tab:gray"),
    ]
    styles = ["-", "--", ":", "-."]
    for i, rnd in enumerate(rounds):
        for axes, phase, key, label, color in curves:
            if key in rnd[phase]:
                cdf(axes, rnd[phase][key], label if i == 0 else None, color,
                    styles[i % len(styles)])
    ax.axvline(250, color="tab:red", linestyle=":", label="target p99 250 ms")
    ax.axhline(0.99, color="tab:gray", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds")
    ax.set_ylabel("fraction of changes")
    ax.set_title("reaction latency (watcher to watcher)")
    ax2.axhline(0.99, color="tab:gray", linestyle=":", linewidth=0.8)
    ax2.set_xscale("log")
    ax2.set_xlabel("milliseconds")
    ax2.set_title("new job: create sent -> all pods seen")
    for a in (ax, ax2):
        a.grid(alpha=0.3, which="both")
        a.legend(loc="lower right", fontsize=8)
    if len(rounds) > 1:
        fig.suptitle(f"{len(rounds)} rounds over one population (solid, dashed, dotted: "
                     f"round 1, 2, 3)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    series = data.get("operator_series")
    if series:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot([s[0] for s in series], [s[1] for s in series], color="tab:blue")
        ax.set_xlabel("seconds since the operator started")
        ax.set_ylabel("operator RSS (MB)")
        ax.set_title(f"operator RSS while {f['jobs']} jobs / {f['pods']} pods arrive")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out.with_name(out.stem + "-rss.png"), dpi=110)
        plt.close(fig)
    return out


def plot_progress(data: dict[str, Any], out: Path) -> Path:
    """bench.progress: the report-to-status latency's distribution, and the reports per
    second accepted steadily and at saturation."""
    plt = _matplotlib()
    results, params = data["results"], data["params"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    points = results["steady"]["latency_cdf"]
    ax.plot([p[0] for p in points], [100 * p[1] for p in points], color="tab:blue")
    ax.axvline(params["status_interval"], color="tab:gray", linestyle="--",
               label=f"--progress-status-interval {params['status_interval']:g} s")
    rounds = params["jobs"] / params["status_writes"]
    ax.axvline(rounds, color="tab:red", linestyle=":",
               label=f"{params['jobs']} jobs / {params['status_writes']:g} writes/s = "
                     f"{rounds:g} s")
    ax.set_title(f"report to status.progress ({params['jobs']} jobs, one report each every "
                 f"{params['report_every']:g} s)")
    ax.set_xlabel("seconds from a report's send until the job's status shows its step")
    ax.set_ylabel("% of accepted reports")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    bars = {"steady": results["steady"]["accepted_per_second"],
            "saturation": results["saturation"]["accepted_per_second"]}
    ax2.bar(list(bars), list(bars.values()), color=["tab:blue", "tab:orange"])
    for i, value in enumerate(bars.values()):
        ax2.text(i, value, f"{value:.0f}/s", ha="center", va="bottom")
    busy = results["saturation"]["operator_cpu_busy"]
    ax2.set_title(f"reports accepted / s (operator on one CPU,\n{100 * busy:.0f}% of it busy "
                  "at saturation)")
    ax2.set_ylabel("reports / s")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_preemption(data: dict[str, Any], out: Path) -> Path:
    """bench.preemption: per phase, the median of each step from the high job's creation
    until its pods run (a step's median each, so a bar need not add up to the median total,
    which is written at its end)."""
    plt = _matplotlib()
    summary = data["summary"]
    phases = list(summary)
    fullest = max(phases, key=lambda p: len(summary[p]["steps"]))  # the steps in order
    steps = list(dict.fromkeys([*summary[fullest]["steps"],
                                *(s for p in phases for s in summary[p]["steps"])]))
    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.9 * len(phases)))
    cmap = plt.get_cmap("tab10")
    for j, step in enumerate(steps):
        lefts = [sum(max(summary[p]["steps"][s]["median"], 0.0) for s in steps[:j]
                     if s in summary[p]["steps"]) for p in phases]
        widths = [max(summary[p]["steps"][step]["median"], 0.0)
                  if step in summary[p]["steps"] else 0.0 for p in phases]
        ax.barh(phases, widths, left=lefts, color=cmap(j % 10), label=step)
    for i, p in enumerate(phases):
        total = summary[p]["preemption_to_high_running"]
        ax.text(total["median"], i, f"  {total['median']:.1f} s ({total['min']:.1f}-"
                f"{total['max']:.1f})", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("seconds after the high-priority job's creation (medians)")
    ax.set_title("Kueue preemption until the high-priority job's pods run, checkpointTimeout"
                 f"Seconds {data['args']['checkpoint_timeout']}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plot", description=__doc__)
    p.add_argument("--fanout", type=Path, default=RESULTS_DIR / "fanout.json")
    p.add_argument("--scale", type=Path, default=RESULTS_DIR / "scale.json")
    p.add_argument("--progress", type=Path, default=RESULTS_DIR / "progress.json")
    p.add_argument("--preemption", type=Path, default=RESULTS_DIR / "preemption.json")
    p.add_argument("--outdir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    done = []
    if args.fanout.exists():
        done.append(plot_fanout(json.loads(args.fanout.read_text()),
                                args.outdir / "fanout.png"))
    if args.scale.exists():
        data = json.loads(args.scale.read_text())
        if "probes_full" in data or any("probes_full" in r for r in data.get("rounds", [])):
            done.append(plot_scale(data, args.outdir / "scale.png"))
    if args.progress.exists():
        done.append(plot_progress(json.loads(args.progress.read_text()),
                                  args.outdir / "progress.png"))
    if args.preemption.exists():
        done.append(plot_preemption(json.loads(args.preemption.read_text()),
                                    args.outdir / "preemption.png"))
    for path in done:
        print(path)
    if not done:
        print("no results to plot", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
