"""Progress reports reaching the operator on a real control plane (issue 37.3).

The operator runs with --progress-listen on 127.0.0.1 over TLS (a CA and certificate made
here), so its pods get the progress environment, the CA and a projected token volume. The
kubelet is KWOK's, which mounts nothing: the test mints each pod's token the way the kubelet
would (`kubectl create token` bound to the pod, audience trainjobs.io/progress; the control
plane signs service-account tokens) and reports through `trainjobs_progress` with the pod's
own rendered environment. The API server's TokenReview decides: the pod's own job is
accepted; another job's pod, a token of another audience, or none, is refused and counted.
"""

from __future__ import annotations

import itertools
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from trainjobs_progress import from_environment

from tests.integration.operator_helpers import (
    Namespace,
    Operator,
    Operators,
    condition,
    free_port,
    job,
    replica,
    wait_for,
)
from trainjobs.testing._pki import make_serving_cert

pytestmark = pytest.mark.integration

AUDIENCE = "trainjobs.io/progress"
TOKEN_DIR = "/var/run/secrets/trainjobs.io/progress"


def mxjob(name: str) -> dict[str, Any]:
    """An MxJob whose pods run until the test ends; they name the `default` ServiceAccount
    (the test control plane runs without the ServiceAccount admission plugin, and a token is
    bound only to a pod of its own ServiceAccount)."""
    doc = job("MxJob", name, {"Scheduler": replica("MxJob"), "Server": replica("MxJob"),
                              "Worker": replica("MxJob")})
    for spec in doc["spec"]["replicaSpecs"].values():
        spec["template"]["spec"]["serviceAccountName"] = "default"
    return doc


def mint(ns: Namespace, pod: dict[str, Any], audience: str = AUDIENCE) -> str:
    out = ns.kubectl("create", "token", "default", f"--audience={audience}",
                     "--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}",
                     f"--bound-object-uid={pod['metadata']['uid']}", "--duration=10m")
    return out.stdout.strip()


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "mxnet")
    return {e["name"]: e["value"] for e in main["env"] if "value" in e}


def post(url: str, ca: Path | None, doc: dict[str, Any], token: str | None
         ) -> tuple[int, str]:
    """One raw POST (to see the status the library turns into a warning)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(doc).encode(), headers, method="POST")
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        retry = exc.headers.get("Retry-After")
        return exc.code, json.loads(exc.read())["error"] + (f" [Retry-After {retry}]"
                                                            if retry else "")


def report_of(ns: Namespace, pod: dict[str, Any], step: int) -> dict[str, Any]:
    env = env_of(pod)
    return {"version": 1, "job": {"namespace": ns.name, "name": env["TRAINJOBS_JOB_NAME"],
                                  "uid": env["TRAINJOBS_JOB_UID"]},
            "replica": {"name": pod["metadata"]["name"], "type": "Worker", "index": 0},
            "attempt": 0, "session": "s", "seq": step, "step": step}


def wait_default_sa(ns: Namespace) -> None:
    wait_for(lambda: ns.kubectl("get", "serviceaccount", "default", check=False)
             .returncode == 0, "the default ServiceAccount", timeout=30)


def reports(op: Operator) -> dict[str, float]:
    return {dict(labels)["result"]: value for (name, labels), value in op.metrics().items()
            if name == "trainjobs_progress_reports_total"}


def test_reports_reach_the_operator_only_with_the_pods_own_token(
        operators: Operators, bare_ns: Namespace, tmp_path: Path) -> None:
    ns = bare_ns
    wait_default_sa(ns)
    ca = make_serving_cert(tmp_path / "ca", subject="/CN=trainjobs-progress-ca")
    cert = make_serving_cert(tmp_path / "tls", subject="/CN=trainjobs-progress",
                             ca_cert=ca.cert, ca_key=ca.key)
    port = free_port()
    url = f"https://127.0.0.1:{port}/v1/progress"
    op = operators.start("--progress-listen", f"127.0.0.1:{port}", "--progress-url", url,
                         "--progress-tls-cert", str(cert.cert), "--progress-tls-key",
                         str(cert.key), "--progress-ca-file", str(ca.cert),
                         "--progress-interval", "1")
    ns.create(mxjob("mnist"))
    ns.create(mxjob("other"))
    wait_for(lambda: len(ns.pods("mnist")) == len(ns.pods("other")) == 3,
             "the pods of both jobs", timeout=30)
    pods = {p["metadata"]["name"]: p for name in ("mnist", "other") for p in ns.pods(name)}
    worker, stranger = pods["mnist-worker-0"], pods["other-worker-0"]

    # Every container got the contract, the CA inline and the token volume.
    env = env_of(worker)
    assert env["TRAINJOBS_PROGRESS_URL"] == url and env["TRAINJOBS_PROGRESS_INTERVAL"] == "1"
    assert env["TRAINJOBS_PROGRESS_TOKEN_FILE"] == f"{TOKEN_DIR}/token"
    assert env["TRAINJOBS_PROGRESS_CA"] == ca.cert.read_text()
    assert env["TRAINJOBS_JOB_UID"] == worker["metadata"]["ownerReferences"][0]["uid"]
    volume = next(v for v in worker["spec"]["volumes"] if v["name"] == "trainjobs-progress")
    assert volume["projected"]["sources"][0]["serviceAccountToken"]["audience"] == AUDIENCE

    # The pod's own token, through the library with the pod's environment: accepted.
    token_file = tmp_path / "token"
    token_file.write_text(mint(ns, worker))
    reporter = from_environment({**env, "TRAINJOBS_PROGRESS_TOKEN_FILE": str(token_file)})
    reporter.report(10, total=100, loss=0.5)
    assert reporter.flush(10.0)
    assert (reporter.sent, reporter.dropped) == (1, 0), op.tail()
    assert reporter.last_reply == {"accepted": True, "interval": 1.0}
    assert reports(op).get("accepted") == 1.0

    doc = report_of(ns, worker, 20)
    # Another job's pod reporting for this job, a token for another audience, none at all.
    status, error = post(url, ca.cert, doc, mint(ns, stranger))
    assert status == 403 and "belongs to job other" in error
    status, error = post(url, ca.cert, doc, mint(ns, worker, audience="https://kubernetes"))
    assert status == 401 and "token not accepted" in error
    status, error = post(url, ca.cert, doc, None)
    assert status == 401 and "no bearer token" in error
    counted = reports(op)
    assert (counted.get("forbidden"), counted.get("unauthenticated")) == (1.0, 2.0)
    assert counted.get("accepted") == 1.0  # none of them was applied
    assert op.logged(r"progress report refused \(403 forbidden\)")
    assert not op.problems()


def test_a_standby_refuses_with_503_and_applies_nothing(
        operators: Operators, bare_ns: Namespace) -> None:
    """Two operators with leader election, each serving progress (plain HTTP: loopback only):
    the standby answers 503 with Retry-After and counts it; only the leader applies."""
    ns = bare_ns
    wait_default_sa(ns)
    lease = ("--leader-elect", "--leader-election-namespace", ns.name,
             "--leader-election-id", "progress", "--lease-duration", "4",
             "--renew-deadline", "3", "--retry-period", "1")
    urls = []
    started = []
    for name in ("leader", "standby"):
        port = free_port()
        urls.append(f"http://127.0.0.1:{port}/v1/progress")
        started.append(operators.start(*lease, "--progress-listen", f"127.0.0.1:{port}",
                                       "--progress-url", urls[-1], name=name))
        if name == "leader":
            started[0].wait_logged("became leader")
    leader, standby = started
    ns.create(mxjob("mnist"))
    wait_for(lambda: ns.pod("mnist-worker-0"), "the worker pod", timeout=30)
    worker = ns.pod("mnist-worker-0")
    assert worker is not None
    token = mint(ns, worker)
    status, error = post(urls[1], None, report_of(ns, worker, 1), token)
    assert status == 503 and "not the leader" in error and "[Retry-After 10]" in error
    assert reports(standby) == {"standby": 1.0} and reports(leader) == {}
    status, _ = post(urls[0], None, report_of(ns, worker, 1), token)
    assert status == 200 and reports(leader) == {"accepted": 1.0}
    assert not leader.problems() and not standby.problems()


def cli(ns: Namespace, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "trainjobs.cli", *args, "-n", ns.name,
                           "--kubeconfig", str(ns.plane.kubeconfig)], capture_output=True,
                          text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"})
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def progress_of(ns: Namespace, name: str) -> dict[str, Any]:
    progress: dict[str, Any] = ns.status("MxJob", name).get("progress") or {}
    return progress


def test_progress_reaches_the_status_survives_a_restart_and_a_stall_restarts_the_job(
        operators: Operators, bare_ns: Namespace, tmp_path: Path) -> None:
    """Issue 37.4, 37.5, 37.7 end to end: a replica reports through `trainjobs_progress` with
    its pod's bound token; status.progress, kubectl's columns and the CLI show it; the
    operator SIGKILLed and started again keeps it (the status carries it) and applies the
    next report once; then the replica goes quiet and the job's progressDeadlineSeconds
    (Restart) marks it Stalled, says so in an Event and restarts every replica, counted once."""
    ns = bare_ns
    wait_default_sa(ns)
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/progress"
    flags = ("--progress-listen", f"127.0.0.1:{port}", "--progress-url", url,
             "--progress-interval", "1", "--progress-status-interval", "1")
    op = operators.start(*flags)
    doc = mxjob("mnist")
    doc["spec"]["runPolicy"] = {"progressDeadlineSeconds": 15,
                                "progressDeadlineAction": "Restart", "backoffLimit": 3}
    ns.create(doc)
    ns.wait_state("MxJob", "mnist", "Running")
    worker = ns.pod("mnist-worker-0")
    assert worker is not None
    token_file = tmp_path / "token"
    token_file.write_text(mint(ns, worker))
    reporter = from_environment({**env_of(worker),
                                 "TRAINJOBS_PROGRESS_TOKEN_FILE": str(token_file)})
    reporter.report(10, total=100, loss=0.5)
    assert reporter.flush(10.0) and reporter.dropped == 0, op.tail()
    progress = wait_for(lambda: (p := progress_of(ns, "mnist")).get("step") == 10 and p,
                        lambda: f"status.progress: {ns.status('MxJob', 'mnist')}", timeout=20)
    assert (progress["summary"], progress["replica"], progress["metrics"]) == \
        ("10/100 (10%)", "mnist-worker-0", {"loss": 0.5})
    table = ns.kubectl("get", "mxjob", "mnist").stdout
    assert "PROGRESS" in table.splitlines()[0] and "10/100 (10%)" in table, table
    listed = cli(ns, "list")
    assert "PROGRESS" in listed and "10/100 (10%)" in listed, listed
    assert "step 10/100 (10%)" in cli(ns, "status", "mxjob/mnist")

    # A new operator process (the old one killed): the status still has step 10; the next
    # report is applied once.
    op.kill()
    op = operators.start(*flags)
    assert progress_of(ns, "mnist")["step"] == 10
    reporter.report(11, total=100, loss=0.25)
    assert reporter.flush(10.0) and reporter.dropped == 0, op.tail()
    wait_for(lambda: progress_of(ns, "mnist").get("step") == 11,
             lambda: f"step 11: {ns.status('MxJob', 'mnist')}", timeout=20)
    assert reports(op) == {"accepted": 1.0}
    reporter.close()

    # Quiet from now on: 15 s after step 11 the job is Stalled and every replica restarts.
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in ns.pods("mnist")}
    ns.wait_event("mnist", "ProgressDeadlineExceeded", timeout=40)
    stalled = wait_for(lambda: condition(ns.status("MxJob", "mnist"), "Stalled"),
                       "the Stalled condition", timeout=10)
    assert stalled["reason"] == "ProgressDeadlineExceeded" and "step 11" in stalled["message"]
    wait_for(lambda: all(p["metadata"]["uid"] != uids.get(p["metadata"]["name"])
                         for p in ns.pods("mnist")) and len(ns.pods("mnist")) == 3,
             lambda: f"every pod recreated: {ns.pod_summary('mnist')}", timeout=30)
    status = ns.wait_state("MxJob", "mnist", "Running")
    assert status["replicaStatuses"]["Worker"]["restarts"] == 1, status
    cleared = wait_for(lambda: (c := condition(ns.status("MxJob", "mnist"), "Stalled"))
                       and c["status"] == "False" and c, "Stalled False again", timeout=20)
    assert cleared["reason"] == "Restarted"
    assert not op.problems()


def test_a_flood_from_one_pod_is_throttled_while_another_jobs_progress_keeps_moving(
        operators: Operators, bare_ns: Namespace, tmp_path: Path) -> None:
    """Issue 37.6: one pod posts as fast as 4 threads can (valid reports, its own token)
    while another job's replica reports once a second: the flood is answered 429 beyond the
    per-pod bucket (5/s, burst 10), and the other job's status.progress follows every step."""
    ns = bare_ns
    wait_default_sa(ns)
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/progress"
    op = operators.start("--progress-listen", f"127.0.0.1:{port}", "--progress-url", url,
                         "--progress-interval", "1", "--progress-status-interval", "1")
    ns.create(mxjob("flood"))
    ns.create(mxjob("calm"))
    wait_for(lambda: ns.pod("flood-worker-0") and ns.pod("calm-worker-0"), "the workers",
             timeout=30)
    flooder, calm = ns.pod("flood-worker-0"), ns.pod("calm-worker-0")
    assert flooder is not None and calm is not None
    flood_token = mint(ns, flooder)
    token_file = tmp_path / "calm-token"
    token_file.write_text(mint(ns, calm))
    reporter = from_environment({**env_of(calm), "TRAINJOBS_PROGRESS_TOKEN_FILE":
                                 str(token_file)})
    answers: Counter[int] = Counter()
    stop = threading.Event()

    steps = itertools.count(1)
    counting = threading.Lock()  # (+= on a Counter is not atomic across threads)

    def flood() -> None:
        while not stop.is_set():
            status, _ = post(url, None, report_of(ns, flooder, next(steps)), flood_token)
            with counting:
                answers[status] += 1

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        for step in range(1, 7):
            reporter.report(step, total=6)
            assert reporter.flush(10.0) and reporter.dropped == 0, op.tail()
            wait_for(lambda s=step: progress_of(ns, "calm").get("step") == s,
                     lambda s=step: f"calm at step {s}: {progress_of(ns, 'calm')}",
                     timeout=10)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        reporter.close()
    seconds = time.monotonic() - started
    assert answers[429] > answers[200], answers
    assert answers[200] <= 10 + 5 * seconds + 1, (answers, seconds)
    # 409: two of the flood's own reports overtaking each other (step went backwards), as
    # a flood from 4 threads does; nothing else is refused.
    assert set(answers) <= {200, 409, 429}, answers
    assert reports(op)["throttled"] == answers[429]
    assert not op.problems()
