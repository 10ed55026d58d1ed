"""Validating and rendering a job is linear in its replicas (issue 15.1b).

Every replica's TF_CONFIG (MX_CONFIG, CAFFE2_CONFIG) lists every address, and the plugins built
and serialised that list again for every replica, so validation grew with the square of the
replicas in CPU: 2,000 Workers took 11 s, inside the event loop. The bytes stay quadratic (that
is the frameworks' contract), the CPU must not. CPU time (not wall time) is measured, so a busy
machine does not fail these tests; before the fix they took several CPU seconds.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.unit.helpers import PLUGINS, container, framework_of, job_doc, replica, template
from trainjobs.core.validation import parse_job
from trainjobs.operator.cache import CHUNK_REPLICAS, PackedRender

WORKERS = 2000


def big_job(kind: str, workers: int = WORKERS) -> dict[str, Any]:
    name = {"MxJob": "mxnet", "TfJob": "tensorflow", "Caffe2Job": "caffe2"}[kind]

    def rs(n: int) -> dict[str, Any]:
        return replica(n, template(container(name)))

    specs = {"MxJob": {"Scheduler": rs(1), "Server": rs(2), "Worker": rs(workers)},
             "TfJob": {"Chief": rs(1), "Worker": rs(workers)},
             "Caffe2Job": {"Worker": rs(workers)}}[kind]
    extra = {"backend": {"type": "redis", "redisHost": "redis"}} if kind == "Caffe2Job" else {}
    return job_doc(kind, "big", specs, **extra)


@pytest.mark.parametrize("kind", ["MxJob", "TfJob", "Caffe2Job"])
def test_two_thousand_workers_validate_in_well_under_a_second(kind: str) -> None:
    doc = big_job(kind)
    started = time.process_time()
    parse_job(doc, PLUGINS)
    spent = time.process_time() - started
    assert spent < 1.0, f"{kind} with {WORKERS} Workers: {spent:.2f} CPU seconds to validate"


def test_validation_cost_grows_linearly() -> None:
    """Four times the Workers, at most about four times the CPU (quadratic was sixteen)."""
    def cost(workers: int) -> float:
        doc = big_job("TfJob", workers)
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            parse_job(doc, PLUGINS)
            best = min(best, time.process_time() - started)
        return best

    small, large = cost(250), cost(1000)
    assert large < 7 * small, f"250 Workers {small:.3f}s, 1000 Workers {large:.3f}s"


def test_an_unpacked_rendering_decodes_only_what_is_read() -> None:
    """A reconcile of a running job reads names only: nothing is decoded. Reading one pod
    (to create it) decodes its chunk alone."""
    from trainjobs.core.render import Rendering

    job = parse_job(big_job("MxJob", 500), PLUGINS)
    rendering = Rendering(job, framework_of("MxJob", PLUGINS), PLUGINS)
    packed = PackedRender.of(rendering.replicas(), rendering.extras())
    assert len(packed.chunks) == -(-503 // CHUNK_REPLICAS)
    desired = packed.unpack()
    assert len(desired.pods) == 503 and "big-worker-499" in desired.pods
    assert list(desired.pods)[:2] == ["big-scheduler-0", "big-server-0"]
    chunks = desired.pods._chunks  # type: ignore[attr-defined]
    assert chunks._decoded == {}
    pod = desired.pods["big-worker-499"]
    assert pod["metadata"]["name"] == "big-worker-499"
    assert list(chunks._decoded) == [len(packed.chunks) - 1]
