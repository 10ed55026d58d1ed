"""`trainjobs render` and `trainjobs convert` of large MxJobs: libyaml's C emitter and parser
(now) against PyYAML's pure-Python ones (before), in the same run (issue 28.5).

Each measurement is the command as a user runs it, in a fresh process, stdout to a file:
`python -m trainjobs.cli render FILE`, and the same with `trainjobs.yamlio.LIBYAML` set false
before it starts (everything pure: what the commands did before). The two outputs are
compared byte for byte. Inputs, per --workers size: an MxJob of a Scheduler, 2 Servers and
N Workers (render: every pod's MX_CONFIG lists every peer, so the output grows with N^2);
for convert, the same job as a Kubeflow MXJob (a few KB whatever N), and a bundle of it with
the N-Worker rendering as pass-through objects (convert reads and rewrites every document;
up to --bundle-max Workers).

    python -m bench.cli_yaml                       # 500 and 2,000 Workers
    python -m bench.cli_yaml --workers 200 --repeats 1
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.report import (
    REPO,
    RESULTS_DIR,
    arguments,
    install_signal_handlers,
    log,
    machine,
    stats,
    workdir,
    write_result,
)

PURE = ("import sys, trainjobs.yamlio as y; y.LIBYAML = False; "
        "from trainjobs.cli import main; sys.exit(main(sys.argv[1:]))")
FAST = "import sys; from trainjobs.cli import main; sys.exit(main(sys.argv[1:]))"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arguments("cli_yaml", __doc__)
    p.add_argument("--workers", default="500,2000", help="comma-separated Worker counts")
    p.add_argument("--repeats", type=int, default=3, help="runs of the C path per command")
    p.add_argument("--pure-repeats", type=int, default=1,
                   help="runs of the pure path per command (minutes each at 2,000 Workers)")
    p.add_argument("--bundle-max", type=int, default=500,
                   help="convert the rendering bundle only up to this many Workers (the pure "
                        "parser takes many minutes on the 2,000-Worker one's ~160 MB)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "cli_yaml.json")
    return p.parse_args(argv)


def mxjob(workers: int, api_version: str = "trainjobs.io/v1alpha1", kind: str = "MxJob",
          field: str = "replicaSpecs") -> dict[str, Any]:
    tmpl = {"spec": {"containers": [{
        "name": "mxnet", "image": "example.invalid/mxnet:1",
        "command": ["python", "train.py", "--kv-store", "dist_sync"]}]}}
    specs = {t: {"replicas": n, "restartPolicy": "Never", "template": tmpl}
             for t, n in (("Scheduler", 1), ("Server", 2), ("Worker", workers))}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "big"},
            "spec": {field: specs}}


def run(code: str, args: list[str], out: Path) -> tuple[float, str, int]:
    """Wall seconds, sha256 of stdout, bytes of stdout."""
    t0 = time.perf_counter()
    with out.open("wb") as stdout:
        proc = subprocess.run([sys.executable, "-c", code, *args], stdout=stdout,
                              stderr=subprocess.PIPE, cwd=REPO, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{args} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    digest = hashlib.sha256()
    with out.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return seconds, digest.hexdigest(), out.stat().st_size


def measure(name: str, args: list[str], repeats: int, pure_repeats: int, tmp: Path
            ) -> dict[str, Any]:
    times: dict[str, list[float]] = {"c": [], "pure": []}
    digests: dict[str, set[str]] = {"c": set(), "pure": set()}
    size = 0
    # Alternated, the pure path first in each pair (it warms nothing the C path uses).
    for i in range(max(repeats, pure_repeats)):
        for way, code, wanted in (("pure", PURE, pure_repeats), ("c", FAST, repeats)):
            if i >= wanted:
                continue
            seconds, digest, size = run(code, args, tmp / f"{name}.{way}.out")
            times[way].append(seconds)
            digests[way].add(digest)
            log(f"{name}: {way} {seconds:.2f} s, {size / 1e6:.1f} MB")
    same = digests["c"] == digests["pure"] and len(digests["c"]) == 1
    if not same:
        raise RuntimeError(f"{name}: the C and pure outputs differ: {digests}")
    c, pure = stats(times["c"]), stats(times["pure"])
    return {"output_bytes": size, "same_output": same, "c": c, "pure": pure,
            "speedup_median": pure["median"] / c["median"]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    result: dict[str, Any] = {"machine": machine(), "args": vars(args), "runs": {}}
    with workdir("cli_yaml") as tmp:
        for workers in (int(w) for w in args.workers.split(",")):
            job = tmp / f"mxjob-{workers}.yaml"
            job.write_text(yaml.safe_dump(mxjob(workers), sort_keys=False))
            kubeflow = tmp / f"kubeflow-mxjob-{workers}.yaml"
            kubeflow.write_text(yaml.safe_dump(mxjob(workers, "kubeflow.org/v1", "MXJob",
                                                     "mxReplicaSpecs"), sort_keys=False))
            runs = result["runs"]
            runs[f"render {workers}"] = measure(f"render-{workers}", ["render", str(job)],
                                                args.repeats, args.pure_repeats, tmp)
            runs[f"convert {workers}"] = measure(f"convert-{workers}",
                                                 ["convert", str(kubeflow)],
                                                 args.repeats, args.pure_repeats, tmp)
            if workers > args.bundle_max:
                continue
            bundle = tmp / f"bundle-{workers}.yaml"
            with bundle.open("w") as f:
                f.write(kubeflow.read_text() + "---\n")
                with (tmp / f"render-{workers}.c.out").open() as rendered:
                    shutil.copyfileobj(rendered, f)
            runs[f"convert bundle {workers}"] = measure(
                f"convert-bundle-{workers}", ["convert", str(bundle)], args.repeats,
                args.pure_repeats, tmp)
            write_result("cli_yaml", result, args.out)
    write_result("cli_yaml", result, args.out)
    for name, r in result["runs"].items():
        print(f"{name:<22} {r['output_bytes'] / 1e6:8.1f} MB  C {r['c']['median']:7.2f} s  "
              f"pure {r['pure']['median']:7.2f} s  x{r['speedup_median']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
