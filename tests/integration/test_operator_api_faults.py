"""API faults on the real control plane: the operator talks to the API server through a proxy
that answers some requests 500/503/429, loses the responses of some writes that did take effect,
answers others after the operator's request timeout, and cuts every watch in the middle of its
stream. Jobs still converge to the right pods and the right status, nothing is created twice,
and the process never crashes."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.fault_proxy import FaultProxy
from tests.integration.operator_helpers import (
    Namespace,
    Operator,
    Operators,
    condition,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import ControlPlane

pytestmark = pytest.mark.integration


def _api_errors(op: Operator) -> Counter[tuple[str, str]]:
    """The operator's API errors (its /metrics) by (code, verb), and by (code, "") for all
    verbs together."""
    counts: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in op.metrics().items():
        if name == "trainjobs_api_errors_total":
            code, verb = dict(labels)["code"], dict(labels)["verb"]
            counts[(code, verb)] += int(value)
            counts[(code, "")] += int(value)
    return counts


def test_jobs_converge_through_errors_lost_responses_and_cut_watches(
    kube_cluster: ControlPlane, bare_ns: Namespace, operators: Operators, tmp_path: Path
) -> None:
    ns = bare_ns
    with FaultProxy(kube_cluster, log=tmp_path / "fault-proxy.log") as proxy:
        kubeconfig = proxy.kubeconfig(tmp_path / "through-proxy.kubeconfig")
        proxy.set(error_ratio=0.15, lose_ratio=0.15, stall_ratio=0.1, stall_seconds=4.0,
                  watch_cut_after=2.0)
        op = operators.start("--kubeconfig", str(kubeconfig), "--request-timeout", "1.5",
                             name="behind-faults", timeout=90)

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
        errors = _api_errors(op)
        assert op.ready(), "the operator is not ready after the faults"

        # The faults happened, of every kind (the proxy counts what it did).
        for what in ("injected 500", "injected 503", "injected 429", "watches cut"):
            assert faults[what] >= 1, faults
        assert faults["lost POST response (201)"] >= 1, faults
        assert sum(n for what, n in faults.items() if what.startswith("stalled")) >= 1, faults
        assert faults["watches cut"] >= 3, faults
        # ... and the operator saw them as API errors (its /metrics), which it retried.
        assert errors[("500", "")] + errors[("503", "")] + errors[("429", "")] + \
            errors[("504", "")] >= 3, errors
        assert errors[("0", "WATCH")] >= 1, errors  # the cut watches
        assert errors[("0", "")] - errors[("0", "WATCH")] >= 1, errors  # timed-out writes

        # Now without faults: a new job goes through at once (nothing is stuck in backoff).
        proxy.set()
        started = time.monotonic()
        ns.create(job("TfJob", "after", {"Worker": replica("TfJob", 2, exit_code=0)}))
        ns.wait_condition("TfJob", "after", "Succeeded", timeout=30)
        assert time.monotonic() - started < 20

        # Clean-up converges too (while the proxy still stands): every pod left has its
        # Service and no Service is left without its pod. Which pods are left depends on
        # timing (a Worker still running when its job ends is deleted, cleanPodPolicy Running).
        def names(objs: list[dict[str, Any]]) -> set[str]:
            return {o["metadata"]["name"] for o in objs}

        for name in ("mx", "tf", "retry", "after"):
            wait_for(lambda name=name: names(ns.pods(name)) == names(ns.services(name)),
                     lambda name=name: f"{name}: pods {names(ns.pods(name))}, Services "
                     f"{names(ns.services(name))}", timeout=30)

    # No pod was deleted and created again, except the retried Worker, recreated exactly twice;
    # the replicas that ran to the end are there; nothing else was created.
    scheduled = ns.scheduled()
    assert scheduled["retry-worker-0"] == 3, scheduled
    assert all(n == 1 for pod, n in scheduled.items() if pod != "retry-worker-0"), scheduled
    for pod in ("mx-worker-0", "mx-worker-1", "tf-chief-0", "after-worker-0"):
        assert scheduled[pod] == 1 and ns.pod(pod) is not None, (pod, scheduled)
    desired = {"mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1", "tf-chief-0",
               "tf-worker-0", "tf-worker-1", "retry-chief-0", "retry-worker-0",
               "after-worker-0", "after-worker-1"}
    assert set(scheduled) <= desired, scheduled

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
