"""API faults on the real control plane: the operator talks to the API server through a proxy
that answers some requests 500/503/429, loses the responses of some writes that did take effect,
and cuts every watch in the middle of its stream. Jobs still converge to exactly the right
pods and the right status, nothing is created twice, and the process never crashes."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.fault_proxy import FaultProxy
from tests.integration.operator_helpers import (
    Namespace,
    Operators,
    condition,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import ControlPlane

pytestmark = pytest.mark.integration


def _scheduled(ns: Namespace) -> Counter[str]:
    """How many times each pod was scheduled: once per pod object the operator created."""
    return Counter(e["involvedObject"]["name"] for e in ns.events()
                   if e["reason"] == "Scheduled" and e["involvedObject"]["kind"] == "Pod")


def _api_errors(metrics_text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        match = re.match(r"trainjobs_api_errors_total\{(.*)\} (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            counts[labels["code"]] += int(float(match.group(2)))
    return counts


def test_jobs_converge_through_errors_lost_responses_and_cut_watches(
    kube_cluster: ControlPlane, bare_ns: Namespace, operators: Operators, tmp_path: Path
) -> None:
    ns = bare_ns
    with FaultProxy(kube_cluster, log=tmp_path / "fault-proxy.log") as proxy:
        kubeconfig = proxy.kubeconfig(tmp_path / "through-proxy.kubeconfig")
        proxy.set(error_ratio=0.15, lose_ratio=0.2, watch_cut_after=2.0)
        op = operators.start("--kubeconfig", str(kubeconfig), name="behind-faults", timeout=90)

        ns.create(job("MxJob", "mx", {
            "Scheduler": replica("MxJob"),
            "Server": replica("MxJob"),
            "Worker": replica("MxJob", 2, exit_code=0, run="4s"),
        }))
        ns.create(job("TfJob", "tf", {
            "Chief": replica("TfJob", exit_code=0, run="6s"),
            "Worker": replica("TfJob", 2, exit_code=0, run="4s"),
        }))
        # 137 is retryable under ExitCode: the Worker is recreated twice, then the third
        # failure exceeds backoffLimit 2. Counting must survive lost and failed status writes.
        ns.create(job("TfJob", "retry", {
            "Chief": replica("TfJob"),
            "Worker": replica("TfJob", exit_code=137, run="1s", restart_policy="ExitCode"),
        }, runPolicy={"backoffLimit": 2}))

        for kind, name in (("MxJob", "mx"), ("TfJob", "tf")):
            ns.wait_condition(kind, name, "Succeeded", timeout=120)
        ns.wait_condition("TfJob", "retry", "Failed", timeout=120)
        faults = proxy.snapshot()
        metrics = op.http("/metrics")
        assert op.ready(), "the operator is not ready after the faults"

        # The faults happened, of every kind (the proxy counts what it did).
        for what in ("injected 500", "injected 503", "injected 429", "watches cut"):
            assert faults[what] >= 1, faults
        assert faults["lost POST response (201)"] >= 1, faults
        assert faults["watches cut"] >= 3, faults
        # ... and the operator saw them as API errors (its /metrics), which it retried.
        errors = _api_errors(metrics[1])
        assert errors["500"] + errors["503"] + errors["429"] + errors["504"] >= 3, errors
        assert errors["0"] >= 1, errors  # the cut watches

        # Now without faults: a new job goes through at once (nothing is stuck in backoff).
        proxy.set()
        started = time.monotonic()
        ns.create(job("TfJob", "after", {"Worker": replica("TfJob", 2, exit_code=0)}))
        ns.wait_condition("TfJob", "after", "Succeeded", timeout=30)
        assert time.monotonic() - started < 20

    # Exactly the right objects, each created once: no pod deleted and created again except
    # the retried Worker, recreated exactly twice.
    scheduled = _scheduled(ns)
    once = {"mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1", "tf-chief-0",
            "tf-worker-0", "tf-worker-1", "retry-chief-0", "after-worker-0", "after-worker-1"}
    assert {n: c for n, c in scheduled.items() if n in once} == dict.fromkeys(once, 1), scheduled
    assert scheduled["retry-worker-0"] == 3, scheduled
    assert set(scheduled) == once | {"retry-worker-0"}, scheduled
    # Each pod left has its Service (cleanPodPolicy Running deleted the Scheduler's and the
    # Server's pods, with their Services, when mx ended).
    for name, pods in (("mx", {"mx-worker-0", "mx-worker-1"}),
                       ("tf", {"tf-chief-0", "tf-worker-0", "tf-worker-1"}),
                       ("after", {"after-worker-0", "after-worker-1"})):
        wait_for(lambda name=name, pods=pods: {p["metadata"]["name"] for p in ns.pods(name)}
                 == pods, lambda name=name, pods=pods: f"pods of {name} to be {pods}: "
                 f"{ns.pod_summary(name)}", timeout=30)
        assert {s["metadata"]["name"] for s in ns.services(name)} == pods, name

    status = ns.status("TfJob", "retry")
    failed = condition(status, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded", status
    assert status["replicaStatuses"]["Worker"]["restarts"] == 3, status
    assert "137" in failed["message"], failed
    for name in ("mx", "tf"):
        # Events are best effort (one whose reconcile lost its status response may be
        # skipped), but never repeated.
        reasons = ns.event_reasons(name)
        assert reasons.count("JobSucceeded") <= 1, (name, reasons)

    # Retried, never crashed: no traceback, no error record; the process stops cleanly
    # (the operators fixture checks its exit status).
    assert not op.problems(), op.problems()
