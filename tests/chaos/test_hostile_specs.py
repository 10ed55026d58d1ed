"""Hypothesis-generated hostile specs applied to the API server with the operator running
(tests/chaos/hostile.py says what they are and what each must lead to). 50 specs in
``make test``, 1,000 with ``--chaos``."""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.chaos.harness import ChaosEnv, Figures, StatusWatch, audit_figures, find_orphans
from tests.chaos.hostile import Outcomes, hostile_job, wait_outcomes
from tests.chaos.podwatch import PodWatch
from tests.chaos.scenarios import TRACEBACK, storm_job
from tests.integration.operator_helpers import Operator

pytestmark = pytest.mark.integration

SETTINGS = {
    "deadline": None,
    "database": None,
    "phases": (Phase.generate,),  # a failing batch is reported as it is, never shrunk
    "suppress_health_check": list(HealthCheck),
    "derandomize": True,  # the same specs every run: a failure can be replayed
}
# Replicas above this are refused by the operator (InvalidSpec naming the limit): the API
# server allows 5000, which on this machine's fake nodes would be thousands of pods.
MAX_REPLICAS = "40"


class HostileRun:
    """The state of one test across hypothesis examples (batches)."""

    def __init__(self, env: ChaosEnv, scenario: str, watch: StatusWatch,
                 pods: PodWatch) -> None:
        self.env = env
        self.watch = watch
        self.pods = pods
        self.audit0 = env.plane.audit_offset()
        self.api = env.plane.api()
        self.outcomes = Outcomes()
        self.figures = Figures(scenario)
        self.batches = 0
        self.posted = 0
        self.created: list[tuple[str, str]] = []
        self.sentinel_s: list[float] = []
        self.refusals: list[str] = []
        self.op: Operator | None = None
        self.t0 = time.monotonic()

    def operator(self) -> Operator:
        if self.op is None:
            self.op = self.env.operators.start("--log-level", "info",
                                               "--max-replicas-per-job", MAX_REPLICAS)
        return self.op

    def post(self, manifest: dict[str, Any]) -> int:
        """POST it (retried on 429/5xx/no answer); the status code, 0 when none came."""
        path = self.env.ns.job_path(manifest["kind"]) if manifest["kind"] in (
            "MxJob", "TfJob", "Caffe2Job") else ""
        for _ in range(20):
            try:
                resp = self.api.request("POST", path, manifest, timeout=10)
            except (OSError, http.client.HTTPException):
                time.sleep(0.5)
                continue
            if resp.status >= 500 or resp.status == 429:
                time.sleep(0.5)
                continue
            if resp.status != 201:
                with contextlib.suppress(ValueError):
                    self.refusals.append(str(resp.json().get("message", ""))[:300])
            return resp.status
        return 0

    def status(self, kind: str, name: str) -> dict[str, Any] | None:
        """The job's status; for a job already gone (``ttlSecondsAfterFinished`` 0 deletes
        it as soon as it ends, possibly before a poll reads it), the last version the status
        watch saw."""
        found = self.env.ns.job(kind, name)
        if found is None:
            with self.watch._lock:
                found = self.watch.latest.get((kind, name))
        return None if found is None else found.get("status") or {}

    def add(self, manifest: dict[str, Any]) -> None:
        """POST one spec (its name made unique); refused ones are counted at once."""
        self.operator()
        self.posted += 1
        manifest["metadata"]["name"] = f"{manifest['metadata']['name']}{self.posted}"
        code = self.post(manifest)
        if code == 201:
            self.created.append((manifest["kind"], manifest["metadata"]["name"]))
        elif 400 <= code < 500:
            self.outcomes.refused += 1
        else:
            self.outcomes.unexplained.append(
                f"POST answered {code}: {json.dumps(manifest)[:300]}")

    def flush(self) -> None:
        """End a batch: every created job has an outcome, the operator lives, a sentinel job
        succeeds; then the batch's jobs are deleted."""
        op = self.operator()
        self.batches += 1
        created, self.created = self.created, []
        for (kind, name), seen in wait_outcomes(self.status, created, 60).items():
            if seen == "ran":
                self.outcomes.ran += 1
            elif seen is not None and seen.startswith("reason:"):
                self.outcomes.ended_with_reason += 1
                reason = seen.split(":", 1)[1]
                self.outcomes.reasons[reason] = self.outcomes.reasons.get(reason, 0) + 1
            else:
                self.outcomes.unexplained.append(f"{kind} {name}: {seen or 'no outcome'}; "
                                                 f"status {self.status(kind, name)}")
        assert op.proc.poll() is None, f"the operator exited {op.proc.returncode}:\n{op.tail()}"
        sentinel = f"sentinel-{self.batches}"
        started = time.monotonic()
        self.env.ns.create(storm_job(sentinel, workers=1, run="1s"))
        self.env.ns.wait_condition("MxJob", sentinel, "Succeeded", timeout=60)
        self.sentinel_s.append(time.monotonic() - started)
        self.env.ns.kubectl("delete", "mxjobs,tfjobs,caffe2jobs", "--all", "--wait=false")

    def finish(self) -> Figures:
        op = self.operator()
        bad = [f"{r.get('msg')} {r.get('exception', '')}"[:400] for r in op.records()
               if TRACEBACK.search(f"{r.get('msg', '')} {r.get('exception', '')}")]
        errors = op.problems(allowed=r"429|storage is \(re\)initializing")
        f = self.figures
        f.jobs = self.outcomes.total()
        f.finished = self.outcomes.ended_with_reason + self.outcomes.ran
        f.lost = self.outcomes.unexplained
        f.duration_s = time.monotonic() - self.t0
        f.recovery_s["sentinel create to Succeeded, max"] = max(self.sentinel_s, default=0)
        f.extra.update(refused=self.outcomes.refused,
                       ended_with_reason=f.finished - self.outcomes.ran, ran=self.outcomes.ran,
                       reasons=self.outcomes.reasons, refusal_samples=self.refusals[:8],
                       batches=self.batches, operator_tracebacks=len(bad),
                       operator_error_records=len(errors))
        f.notes.append(f"{f.jobs} specs: {self.outcomes.refused} refused by the API server, "
                       f"{f.finished - self.outcomes.ran} ended with a reason "
                       f"{self.outcomes.reasons}, {self.outcomes.ran} ran; operator exits "
                       f"{int(op.proc.poll() is not None)}, "
                       f"tracebacks {len(bad)}; sentinel succeeded after each of "
                       f"{self.batches} batches")
        if bad:
            f.lost.append(f"operator tracebacks: {bad[:3]}")
        if op.proc.poll() is not None:
            f.lost.append(f"the operator exited {op.proc.returncode}")
        # Measured as in the other scenarios: every batch's jobs were deleted, so the
        # garbage collector must have taken their pods and Services (a longer settle: it
        # has a batch of 100 jobs' objects to delete).
        f.orphans = find_orphans(self.env.ns, ("MxJob", "TfJob", "Caffe2Job"), settle=90)
        audit_figures(f, self.env.plane, self.env.ns.name, self.audit0,
                      self.pods.attempts_by_name())
        f.statuses_seen = self.watch.seen
        f.double_true = list(self.watch.double_true)
        f.finished_flips = list(self.watch.finished_flips)
        return f


def run_hostile(env: ChaosEnv, specs: int, batch: int, scenario: str) -> Figures:
    """``specs`` hostile specs, a batch ended (outcomes, sentinel) every ``batch`` of them;
    a status watch on every kind throughout (two exclusive conditions True, finished flips)
    and a pod watch (the attempts of Caffe2Jobs' pods, for their duplicates)."""
    with StatusWatch(env.plane, env.ns.name) as watch, \
            PodWatch(env.plane, env.ns.name) as pods:
        run = HostileRun(env, scenario, watch, pods)

        @settings(max_examples=specs, **SETTINGS)  # type: ignore[arg-type]
        @given(hostile_job())
        def one_spec(manifest: dict[str, Any]) -> None:
            run.add(manifest)
            if run.posted % batch == 0:
                run.flush()

        one_spec()
        if run.created or run.posted % batch:
            run.flush()
        figures = env.record(run.finish())
    return figures


def test_hostile_specs_small(chaos_env: ChaosEnv) -> None:
    figures = run_hostile(chaos_env, specs=50, batch=25, scenario="hostile specs (50)")
    assert figures.problems() == [], figures.lost[:5]
    assert figures.jobs == 50


@pytest.mark.chaos
@pytest.mark.timeout(1200)
def test_hostile_specs_1000(chaos_env: ChaosEnv) -> None:
    figures = run_hostile(chaos_env, specs=1000, batch=100,
                          scenario="hostile specs (1,000)")
    assert figures.problems() == [], figures.lost[:5]
    assert figures.jobs == 1000
