"""The operator as a process (docs/operator.md, "Run it"): leader election
on a Lease between two replicas and a takeover after the leader is SIGKILLed; /healthz,
/readyz and Prometheus /metrics; Kubernetes Events; a clean exit 0 on SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import time

import pytest

from tests.integration.operator_helpers import Namespace, Operators, job, replica, wait_for

pytestmark = pytest.mark.integration

LEASE = "trainjobs-test"


def quick_job(kind: str, name: str) -> dict[str, object]:
    specs = {
        "MxJob": {"Scheduler": replica("MxJob"), "Server": replica("MxJob"),
                  "Worker": replica("MxJob", 2, exit_code=0)},
        "TfJob": {"Worker": replica("TfJob", 2, exit_code=0)},
    }
    return job(kind, name, specs[kind])


def lease(ns: Namespace) -> dict[str, object]:
    spec: dict[str, object] = json.loads(
        ns.kubectl("get", "lease", LEASE, "-o", "json").stdout)["spec"]
    return spec


def test_leader_election_one_acts_and_a_standby_takes_over(
    bare_ns: Namespace, operators: Operators
) -> None:
    ns = bare_ns
    args = ("--leader-elect", "--leader-election-namespace", ns.name,
            "--leader-election-id", LEASE, "--lease-duration", "4", "--renew-deadline", "3",
            "--retry-period", "1")
    a = operators.start(*args, name="a")
    a.wait_logged("became leader")
    b = operators.start(*args, name="b")  # a standby is ready too (it does what it should)
    host = socket.gethostname()
    assert lease(ns)["holderIdentity"] == f"{host}-{a.pid}"

    ns.apply(quick_job("MxJob", "first"))
    ns.wait_condition("MxJob", "first", "Succeeded")
    time.sleep(2)  # b had time to act, were it to
    assert a.logged("caches synced") and not b.logged("caches synced"), b.tail()
    assert not b.logged("became leader")
    assert lease(ns)["holderIdentity"] == f"{host}-{a.pid}"

    killed = time.monotonic()
    a.kill()
    b.wait_logged("became leader", timeout=15)
    took = time.monotonic() - killed
    # The lease expires at most lease-duration after a's last renewal; b tries every second
    # (plus a margin for a loaded machine).
    assert took <= 4 + 1 + 5, f"the standby took {took:.1f}s to take over"
    b.wait_logged("caches synced")
    spec = lease(ns)
    assert spec["holderIdentity"] == f"{host}-{b.pid}" and spec["leaseTransitions"] == 1, spec

    ns.apply(quick_job("TfJob", "second"))
    ns.wait_condition("TfJob", "second", "Succeeded")
    # The first job is still Succeeded (the new leader re-synced and changed nothing).
    assert ns.status("MxJob", "first")["state"] == "Succeeded"

    # A clean shutdown gives the lease up at once, so that a standby need not wait for it.
    assert b.stop() == 0
    assert lease(ns)["holderIdentity"] in ("", None)
    assert b.logged("stopped")
    assert not b.problems()


def test_health_metrics_events_and_sigterm(bare_ns: Namespace, operators: Operators) -> None:
    ns = bare_ns
    op = operators.start()
    assert op.http("/healthz") == (200, "ok\n")
    assert op.http("/readyz") == (200, "ok\n")
    assert op.http("/nothing-here")[0] == 404

    ns.apply(quick_job("MxJob", "fine"))
    ns.apply(job("TfJob", "broken", {"Worker": replica("TfJob", 2, exit_code=3)}))
    ns.wait_condition("MxJob", "fine", "Succeeded")
    ns.wait_condition("TfJob", "broken", "Failed")
    time.sleep(1.5)  # cleanup passes and count-only status writes are done

    code, text = op.http("/metrics")
    assert code == 200
    for name in ("trainjobs_jobs", "trainjobs_reconcile_duration_seconds",
                 "trainjobs_work_queue_depth", "trainjobs_api_errors_total"):
        assert f"# TYPE {name} " in text, name
    metrics = op.metrics()
    jobs = {labels: value for (name, labels), value in metrics.items()
            if name == "trainjobs_jobs"}
    # One job of each kind, each counted once, in its final state.
    assert jobs[(("kind", "MxJob"), ("state", "Succeeded"))] == 1, jobs
    assert jobs[(("kind", "TfJob"), ("state", "Failed"))] == 1, jobs
    assert all(value == 0 for labels, value in jobs.items() if dict(labels)["state"] not in
               ("Succeeded", "Failed")), jobs
    assert metrics[("trainjobs_reconcile_duration_seconds_count", (("kind", "MxJob"),))] > 0
    assert metrics[("trainjobs_work_queue_depth", ())] == 0

    # Events, as `kubectl get events` shows them.
    table = ns.kubectl("get", "events").stdout
    assert "mxjob/fine" in table and "tfjob/broken" in table, table
    ns.wait_event("fine", "JobSucceeded")  # recorded after the status write it follows
    ns.wait_event("broken", "ReplicaFailed")
    fine = ns.events("fine")
    reasons = [e["reason"] for e in fine if e["involvedObject"]["kind"] == "MxJob"]
    assert "Created" in reasons and "JobSucceeded" in reasons, reasons
    created = next(e for e in fine if e["reason"] == "Created")
    assert created["type"] == "Normal" and "4 pods" in created["message"], created
    assert created["source"]["component"] == "trainjobs-operator"
    broken = ns.events("broken")
    failed = [e for e in broken if e["reason"] == "ReplicaFailed"]
    assert failed and failed[0]["type"] == "Warning" and "exit code 3" in failed[0]["message"]

    # SIGTERM: a clean exit 0 within a few seconds, and it says so.
    started = time.monotonic()
    op.send(signal.SIGTERM)
    code = wait_for(lambda: op.proc.poll() is not None and (op.proc.returncode,),
                    "the operator to exit after SIGTERM", timeout=10, interval=0.05)[0]
    assert code == 0, op.tail()
    assert time.monotonic() - started < 5
    assert op.logged("stopped")
    assert not op.problems()
    # --log-format json: every line is a JSON record.
    assert all(r["level"] != "raw" and {"time", "logger", "msg"} <= r.keys()
               for r in op.records()), op.tail()
