"""The client's reads: `AsyncClient.list` over many jobs, parsed without rendering their pods
(issue 24.6), against the same list with every job rendered as `job_from_api` did before.

One control plane, no operator: the jobs are created once (Chief + --workers Workers each),
then the two ways are timed alternately, --repeats times each, over the same API responses'
worth of jobs. Both list through the real API server; they differ only in what each job costs
once it arrives.

    python -m bench.client_read                        # 500 jobs x 4 replicas, 100 x 51
    python -m bench.client_read --sizes 200x3 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.api import Api, gather_bounded
from bench.cluster import Cluster
from bench.jobs import tfjob, tfjob_path
from bench.report import (
    RESULTS_DIR,
    arguments,
    install_signal_handlers,
    log,
    machine,
    stats,
    workdir,
    write_result,
)
from trainjobs.api.models import Job, JobSpec, JobStatus, ObjectMeta
from trainjobs.client import aio
from trainjobs.client.aio import AsyncClient
from trainjobs.core.validation import parse_job
from trainjobs.errors import SpecInvalid
from trainjobs.plugin.manager import PluginManager


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = arguments("client_read", __doc__)
    p.add_argument("--sizes", default="500x3,100x50",
                   help="comma-separated JOBSxWORKERS, one namespace each (default 500x3,100x50)")
    p.add_argument("--repeats", type=int, default=5, help="timed lists per way and size")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "client_read.json")
    return p.parse_args(argv)


def rendering_job_from_api(raw: dict[str, Any], plugins: PluginManager) -> Job:
    """`job_from_api` as it was: the spec validated by rendering every pod of the job."""
    meta = ObjectMeta.model_validate(raw.get("metadata") or {})
    status = JobStatus.model_validate(raw.get("status") or {})
    try:
        spec = parse_job({k: v for k, v in raw.items() if k != "status"}, plugins).spec
    except SpecInvalid:
        spec = JobSpec.model_construct(replica_specs={})
    return Job(kind=str(raw.get("kind", "")), metadata=meta, spec=spec, status=status)


PARSING = aio.job_from_api


@contextlib.contextmanager
def reading_with(fn: Callable[[dict[str, Any], PluginManager], Job]) -> Iterator[None]:
    original, name = aio.job_from_api, "job_from_api"
    setattr(aio, name, fn)
    try:
        yield
    finally:
        setattr(aio, name, original)


async def measure(args: argparse.Namespace, cluster: Cluster) -> dict[str, Any]:
    api = Api(cluster.plane)
    out: dict[str, Any] = {}
    try:
        sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
        for jobs, workers in sizes:
            ns = f"read-{jobs}x{workers}"
            await api.ensure_namespace(ns)
            await gather_bounded(16, (api.create_ok(tfjob_path(ns), tfjob(
                f"job-{i:04d}", ns, workers=workers, chief_run=None, worker_run=None))
                for i in range(jobs)))
            log(f"{ns}: {jobs} TfJobs of 1 Chief + {workers} Workers created")
            async with AsyncClient(str(cluster.plane.kubeconfig), ns) as client:
                await client.list("TfJob")  # connect, warm the plugins
                times: dict[str, list[float]] = {"parse": [], "render": []}
                for _ in range(args.repeats):
                    for way, fn in (("parse", PARSING),
                                    ("render", rendering_job_from_api)):
                        with reading_with(fn):
                            t0 = time.perf_counter()
                            listed = await client.list("TfJob")
                            times[way].append(time.perf_counter() - t0)
                        if len(listed) != jobs:
                            raise RuntimeError(f"listed {len(listed)} of {jobs} jobs")
            out[f"{jobs}x{workers}"] = {
                "jobs": jobs, "replicas_per_job": workers + 1,
                **{way: stats(v) for way, v in times.items()},
                "ratio_median": stats(times["render"])["median"] / stats(times["parse"])["median"],
            }
            r = out[f"{jobs}x{workers}"]
            log(f"{ns}: list {r['parse']['median']:.3f} s parsing, {r['render']['median']:.3f} s "
                f"rendering (x{r['ratio_median']:.1f})")
    finally:
        await api.close()
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    result: dict[str, Any] = {"machine": machine(), "args": vars(args)}
    with workdir("client_read", args.workdir) as root:
        cluster = Cluster.start(root, nodes=1, node_pods=110, audit=False)
        try:
            result["sizes"] = asyncio.run(measure(args, cluster))
        finally:
            cluster.stop()
    write_result("client_read", result, args.out)
    for size, r in result["sizes"].items():
        print(f"{size}: parse {r['parse']['median']:.3f} s, render {r['render']['median']:.3f} s"
              f" (render/parse x{r['ratio_median']:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
