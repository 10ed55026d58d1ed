"""`trainjobs submit/status/list/wait/logs/delete` on the real control plane, run as the user
runs them (a subprocess, output not a terminal): live lines and the summary, the documented
exit codes (0 Succeeded, 1 Failed, 3 timeout, 4 unreachable, 5 refused), Ctrl-C during
--wait (the job keeps running), logs that KWOK nodes cannot serve."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.operator_helpers import Namespace, job, replica, wait_for
from trainjobs.labels import ANNOTATION_CHECKPOINT_REQUEST

pytestmark = pytest.mark.integration


#: `python -m trainjobs.cli ARGS`, with SIGINT handled as a terminal's Ctrl-C expects.
SIGINT_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'trainjobs'; runpy.run_module('trainjobs.cli', run_name='__main__')")


def write_job(tmp: Path, name: str, exit_code: int | None, run: str = "2s") -> Path:
    manifest = job("MxJob", name, {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", 2, exit_code=exit_code, run=run),
    })
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def cli(ns: Namespace, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainjobs.cli", *args, "-n", ns.name,
         "--kubeconfig", str(ns.plane.kubeconfig)],
        capture_output=True, text=True, timeout=timeout, env=_env())


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}


def test_submit_wait_follows_a_job_to_success(ns: Namespace, tmp_path: Path) -> None:
    done = cli(ns, "submit", str(write_job(tmp_path, "good", 0)), "--wait", "--timeout", "90")
    out = done.stdout
    assert done.returncode == 0, (done.returncode, out, done.stderr)
    assert "mxjob/good created in namespace" in out
    lines = out.splitlines()
    states = [line.split(":")[0] for line in lines if line.startswith("[trainjobs] ")
              and line.split(":")[0].split()[-1] in ("Created", "Running", "Succeeded")]
    assert states == ["[trainjobs] Created", "[trainjobs] Running", "[trainjobs] Succeeded"], out
    # per-replica counts as they change, pending first (with why), then running
    assert any("Worker 0/2 running, 2 pending" in line for line in lines), out
    assert any("Worker 2/2 running" in line for line in lines), out
    assert any("Normal Scheduled Pod/good-worker-1" in line for line in lines), out
    assert any(line.startswith("[trainjobs] MxJob good: Succeeded in") for line in lines), out
    assert any(line.split()[:2] == ["Worker-1", "Succeeded"] for line in lines), out
    assert "logs: trainjobs logs good -n" in out

    status = cli(ns, "status", "good")
    assert status.returncode == 0, status.stderr
    assert f"MxJob good (namespace {ns.name}): Succeeded" in status.stdout
    assert "Worker 0/2 running, 2 succeeded" in status.stdout, status.stdout
    listed = cli(ns, "list")
    assert listed.stdout.split("\n")[1].split()[:3] == ["good", "MxJob", "Succeeded"], listed
    assert listed.stdout.split("\n")[0].split()[4:6] == ["PROGRESS", "ETA"], listed
    assert listed.stdout.split("\n")[1].split()[-3:-1] == ["-", "-"], listed  # no report
    assert cli(ns, "wait", "good", "--for", "Succeeded", "--timeout", "5").returncode == 0


def test_list_and_status_show_the_reported_progress(ns: Namespace, tmp_path: Path) -> None:
    """Issue 37.4: status.progress (patched here as the operator's progress gate writes it)
    in `trainjobs list` and `trainjobs status`; the running operator keeps it through its own
    status writes."""
    assert cli(ns, "submit", str(write_job(tmp_path, "prog", None, run="600s"))).returncode == 0
    wait_for(lambda: ": Running" in cli(ns, "status", "prog").stdout, "prog Running",
             timeout=60)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    progress = {"step": 1200, "totalSteps": 5000, "percent": 24.0, "etaSeconds": 1900,
                "summary": "1200/5000 (24%)", "metrics": {"loss": 0.3121},
                "replica": "prog-worker-0", "lastReportTime": now, "lastProgressTime": now}
    ns.kubectl("patch", "mxjobs", "prog", "--subresource=status", "--type=merge", "-p",
               json.dumps({"status": {"progress": progress}}))
    listed = cli(ns, "list").stdout.splitlines()
    row = next(line.split() for line in listed if line.startswith("prog "))
    assert row[-4:-1] == ["1200/5000", "(24%)", "31m40s"], listed
    status = cli(ns, "status", "prog").stdout
    assert "progress:\n  step 1200/5000 (24%), ETA 31m40s\n  reported by prog-worker-0" \
        in status, status
    assert "  loss=0.3121\n" in status, status
    # A pod change makes the operator write the status again: the progress stays.
    ns.kubectl("delete", "pod", "prog-worker-1", "--wait=false")
    wait_for(lambda: '"lost":1' in ns.kubectl("get", "mxjobs", "prog", "-o",
                                               "jsonpath={.status.replicaStatuses.Worker}"
                                               ).stdout.replace(" ", ""),
             "a lost replica counted", timeout=60)
    stored = json.loads(ns.kubectl("get", "mxjobs", "prog", "-o", "json").stdout)
    assert stored["status"]["progress"] == progress
    ns.kubectl("delete", "mxjobs", "prog", "--wait=false")


def test_submit_wait_of_a_failing_job_exits_1_with_the_reason(
    ns: Namespace, tmp_path: Path
) -> None:
    done = cli(ns, "submit", str(write_job(tmp_path, "bad", 3)), "--wait")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "MxJob bad: Failed in" in done.stdout
    assert "failed with exit code 3" in done.stdout, done.stdout
    waited = cli(ns, "wait", "bad", "--for", "Succeeded")
    assert waited.returncode == 1 and "bad Failed" in waited.stderr, waited


def test_status_shows_the_failure_rules_decisions(ns: Namespace, tmp_path: Path) -> None:
    """Issue 39: the Worker exiting 3 meets rule crash (RecreatePod, a budget of 1); its next
    exit 3 finds the budget spent and the job fails; `trainjobs status` shows both decisions,
    one line each, then the rule's budget."""
    manifest = job("MxJob", "rules", {
        "Scheduler": replica("MxJob"),
        "Server": replica("MxJob"),
        "Worker": replica("MxJob", 1, exit_code=3, run="2s"),
    }, runPolicy={"failurePolicy": [{"name": "crash", "match": {"exitCodes": {"values": [3]}},
                                     "action": "RecreatePod", "budget": {"count": 1}}]})
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(manifest))
    done = cli(ns, "submit", str(path), "--wait", "--timeout", "90")
    assert done.returncode == 1, (done.stdout, done.stderr)
    status = cli(ns, "status", "rules").stdout
    section = status.split("failures:\n", 1)[1].split("replicas:", 1)[0].splitlines()
    when = r"  (\d\d-\d\d )?\d\d:\d\d:\d\d rules-worker-0 exit 3 \(Error\): rule crash"
    assert len(section) == 3, status
    assert re.fullmatch(f"{when} -> RecreatePod, 0 left", section[0]), status
    assert re.fullmatch(f"{when} -> FailJob, 0 left", section[1]), status
    assert section[2] == "  crash: 1 of 1 used, spent: the job fails", status


def test_ctrl_c_during_wait_leaves_the_job_running(ns: Namespace, tmp_path: Path) -> None:
    path = write_job(tmp_path, "forever", None)
    # As from a terminal: Ctrl-C reaches the CLI. A shell without job control starts its
    # background commands with SIGINT ignored (`make test &`), the children inherit that, and
    # Python then installs no handler: the SIGINT below would be ignored and the test hang.
    # The CLI rightly keeps an inherited SIG_IGN (`nohup`), so the child gets a terminal's.
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGINT_AS_FROM_A_TERMINAL, "submit", str(path), "--wait",
         "-n", ns.name, "--kubeconfig", str(ns.plane.kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        seen: list[str] = []
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while "Worker 2/2 running" not in "".join(seen) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
        assert "Worker 2/2 running" in "".join(seen), seen
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            # Reaped and its pipes closed here: else their ResourceWarnings surface in
            # whichever test the garbage collector happens to run in.
            out, err = proc.communicate()
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "mxjob/forever keeps running on the cluster" in err, err
    assert "Traceback" not in err, err
    time.sleep(1)
    assert ns.status("MxJob", "forever")["state"] == "Running"

    timed_out = cli(ns, "wait", "forever", "--timeout", "1")
    assert timed_out.returncode == 3 and "is Running after 1s" in timed_out.stderr, timed_out
    logs = cli(ns, "logs", "forever", "--replica", "Worker-1")
    assert logs.returncode == 5, logs
    assert "cannot serve the log of Worker-1 (forever-worker-1)" in logs.stderr, logs.stderr
    deleted = cli(ns, "delete", "forever", "--wait")
    assert deleted.returncode == 0 and "mxjob/forever deleted" in deleted.stdout, deleted
    wait_for(lambda: ns.job("MxJob", "forever") is None, "forever to be gone")
    missing = cli(ns, "status", "forever")
    assert missing.returncode == 5 and "no job (of any kind" in missing.stderr, missing


def test_unreachable_cluster_and_invalid_job(ns: Namespace, tmp_path: Path) -> None:
    broken = yaml.safe_load(ns.plane.kubeconfig.read_text())
    broken["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(broken))
    path = write_job(tmp_path, "nowhere", 0)
    done = subprocess.run(
        [sys.executable, "-m", "trainjobs.cli", "submit", str(path), "--wait",
         "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=90,
        env=_env())
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: cannot reach the cluster:"), done.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(job("MxJob", "x", {"Wrker": replica("MxJob")})))
    invalid = cli(ns, "submit", str(bad))
    assert invalid.returncode == 2 and "spec.replicaSpecs" in invalid.stderr, invalid


def test_on_a_terminal_the_counts_are_redrawn_in_place(ns: Namespace, tmp_path: Path) -> None:
    import pty

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainjobs.cli", "submit", str(write_job(tmp_path, "tty", 0)),
         "--wait", "-n", ns.name, "--kubeconfig", str(ns.plane.kubeconfig)],
        stdin=terminal, stdout=terminal, stderr=terminal, env={**_env(), "NO_COLOR": "1"})
    os.close(terminal)
    chunks = []
    try:
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=60)
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()
    out = b"".join(chunks).decode(errors="replace")
    assert code == 0, out
    assert "\r\x1b[K" in out, out  # the counts line, cleared and redrawn
    assert "[trainjobs] Worker 2/2 running" not in out  # never a line of its own here
    assert "MxJob tty: Succeeded in" in out


def test_status_and_logs_of_a_job_managed_by_multikueue(ns: Namespace, tmp_path: Path) -> None:
    """A job managed by Kueue's MultiKueue (here with no Kueue: as in a manager cluster before
    its Workload is admitted): `status` says who manages it and that no worker is named yet;
    `logs` and `checkpoint` exit 5 saying its pods run in a worker cluster, not failing on pods
    it lacks."""
    manifest = job("MxJob", "remote", {"Scheduler": replica("MxJob"),
                                       "Server": replica("MxJob"),
                                       "Worker": replica("MxJob", 2, exit_code=0)},
                   managedBy="kueue.x-k8s.io/multikueue",
                   runPolicy={"checkpointTimeoutSeconds": 30})
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert cli(ns, "submit", str(path)).returncode == 0
    status = cli(ns, "status", "remote")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[1] == ("  managed by kueue.x-k8s.io/multikueue (spec.managedBy): this "
                        "cluster's operator leaves it alone: Kueue's MultiKueue runs it in a "
                        "worker cluster and copies that copy's status here"), status.stdout
    assert lines[2] == ("  no worker cluster named on its Workload yet; its pods will run "
                        "there"), status.stdout
    logs = cli(ns, "logs", "remote")
    assert logs.returncode == 5, (logs.stdout, logs.stderr)
    assert logs.stderr == (
        "error: MxJob remote is managed by kueue.x-k8s.io/multikueue: its pods run in a worker "
        "cluster (none is named on its Workload yet), not in this cluster, which holds only the "
        f"job and its copied status; read the logs there: trainjobs logs remote -n {ns.name} "
        "--kubeconfig <that cluster's kubeconfig>\n"), logs.stderr
    # Nor is a checkpoint asked here: the annotation would reach no operator that acts on it.
    checkpoint = cli(ns, "checkpoint", "remote", "--wait")
    assert checkpoint.returncode == 5, (checkpoint.stdout, checkpoint.stderr)
    assert checkpoint.stderr.endswith(
        f"; run it there: trainjobs checkpoint remote -n {ns.name} --kubeconfig <that "
        "cluster's kubeconfig>\n"), checkpoint.stderr
    stored = ns.job("MxJob", "remote") or {}
    assert ANNOTATION_CHECKPOINT_REQUEST not in (stored["metadata"].get("annotations") or {})
    assert ns.pods("remote") == []
