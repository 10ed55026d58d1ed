"""Helpers of the operator integration tests: the operator as a local process, jobs as dicts,
and reads and waits against one test namespace of the real control plane.

Why a subprocess: the tests check what users and a Deployment see — the command line, the
HTTP endpoints, the logs, signals, two replicas electing a leader — and a SIGKILL must kill a
real process. Each operator runs in its own process group with ``--namespace`` set to the
namespace(s) of its test(s), each test having its own, so tests never see each other's jobs;
every one started is stopped at teardown (SIGTERM, expecting exit 0), and the tail of its JSON
log is attached to a failing test's report (see conftest.py).

Pods end through the KWOK annotations of ``trainjobs/testing/kwok_stages.yaml`` put on the
replica template's metadata (the operator copies them to the pods); a pod without
``exit-code`` runs until it is deleted, and tests may annotate one running pod to end it alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from trainjobs.testing import (
    EXIT_CODE_ANNOTATION,
    FAIL_TIMES_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    ControlPlane,
)
from trainjobs.testing._process import start_daemon

REPO = Path(__file__).resolve().parents[2]
CRDS_DIR = REPO / "crds"
EXAMPLES = sorted((REPO / "examples").glob("*/*.yaml"))
API_VERSION = "trainjobs.io/v1alpha1"
PLURALS = {"MxJob": "mxjobs", "TfJob": "tfjobs", "Caffe2Job": "caffe2jobs"}
CONTAINERS = {"MxJob": "mxnet", "TfJob": "tensorflow", "Caffe2Job": "caffe2"}
EXCLUSIVE = ("Running", "Restarting", "Succeeded", "Failed", "Suspended", "Queued")
FINISHED = ("Succeeded", "Failed")
LABEL_JOB = "trainjobs.io/job-name"
IMAGE = "example.invalid/trainer:1"

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    what: str | Callable[[], str],
    timeout: float = 30.0,
    interval: float = 0.2,
) -> T:
    """Poll ``check`` until it returns something truthy; fail (never skip) after ``timeout``.
    ``what`` may be a callable that describes the state at the time of failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {text}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- jobs as dicts ---------------------------------------------------------------------------


def job(kind: str, name: str, replica_specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A job manifest; ``spec`` holds the fields beside replicaSpecs (runPolicy, ...)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"replicaSpecs": replica_specs, **spec},
    }


def replica(
    kind: str,
    replicas: int = 1,
    *,
    exit_code: int | None = None,
    run: str = "1s",
    fail_times: int | None = None,
    restart_policy: str = "Never",
    env: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    **container: Any,
) -> dict[str, Any]:
    """A replica spec whose pods end with ``exit_code`` after ``run`` on the KWOK nodes (never,
    when ``exit_code`` is None); ``container`` adds fields to the framework's container."""
    notes = {RUN_DURATION_ANNOTATION: run, **(annotations or {})}
    if exit_code is not None:
        notes[EXIT_CODE_ANNOTATION] = str(exit_code)
    if fail_times is not None:
        notes[FAIL_TIMES_ANNOTATION] = str(fail_times)
    main: dict[str, Any] = {"name": CONTAINERS[kind], "image": IMAGE, **container}
    if env:
        main["env"] = env
    return {
        "replicas": replicas,
        "restartPolicy": restart_policy,
        "template": {"metadata": {"annotations": notes}, "spec": {"containers": [main]}},
    }


def true_conditions(status: dict[str, Any]) -> list[str]:
    return [c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"]


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), None)


def env_of(pod: dict[str, Any], container: str) -> dict[str, str]:
    main = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", "") for e in main.get("env") or []}


def check_invariants(status: dict[str, Any], seen_finished: set[str], where: str) -> None:
    """At most one exclusive condition True, ``state`` is that one, and a finished job never
    leaves its finished condition (``seen_finished`` carries what was seen before)."""
    true = [t for t in true_conditions(status) if t in EXCLUSIVE]
    assert len(true) <= 1, f"{where}: several exclusive conditions True: {true}\n{status}"
    if true:
        assert status.get("state") == true[0], f"{where}: state != condition: {status}"
    if seen_finished:
        assert true and true[0] in seen_finished, (
            f"{where}: the job finished as {seen_finished} and now shows {true}:\n{status}"
        )
    seen_finished.update(t for t in true if t in FINISHED)


# -- one test namespace ----------------------------------------------------------------------


class Namespace:
    """Reads, writes and waits in one namespace of the test control plane.

    Reads go straight to the REST API (a stdlib HTTPS call, ~10 ms); kubectl is used where
    its behaviour is what is tested (apply, wait, delete, get events) or for patches.
    """

    def __init__(self, plane: ControlPlane, name: str) -> None:
        self.plane = plane
        self.name = name
        self._api = plane.api()

    # raw access

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl("-n", self.name, *args, input=input, check=check,
                                  timeout=timeout)

    def get_path(self, path: str, query: dict[str, str] | None = None) -> Any:
        """GET an API path (404: None)."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        resp = self._api.request("GET", path, timeout=10)
        if resp.status == 404:
            return None
        assert resp.status == 200, f"GET {path}: {resp.status} {resp.body.decode()}"
        return resp.json()

    def job_path(self, kind: str, name: str = "") -> str:
        base = f"/apis/{API_VERSION}/namespaces/{self.name}/{PLURALS[kind]}"
        return f"{base}/{name}" if name else base

    # jobs

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """``kubectl apply -f -`` the manifest; returns the object the API server stored."""
        out = self.kubectl("apply", "-f", "-", "-o", "json", input=json.dumps(manifest))
        applied: dict[str, Any] = json.loads(out.stdout)
        return applied

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """POST the manifest through the REST API (faster than kubectl for many jobs)."""
        resp = self._api.request("POST", self.job_path(manifest["kind"]), manifest, timeout=10)
        assert resp.status == 201, resp.body.decode()
        created: dict[str, Any] = resp.json()
        return created

    def job(self, kind: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.get_path(self.job_path(kind, name))
        return found

    def status(self, kind: str, name: str) -> dict[str, Any]:
        found = self.job(kind, name)
        assert found is not None, f"{kind} {name} does not exist"
        status: dict[str, Any] = found.get("status") or {}
        return status

    def patch_job(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        self.kubectl("patch", f"{kind.lower()}/{name}", "--type=merge", "-p", json.dumps(patch))

    def wait_condition(self, kind: str, name: str, ctype: str, timeout: float = 45) -> None:
        """``kubectl wait --for=condition=<ctype>``: the documented way to wait for a job."""
        result = self.kubectl(
            "wait", f"--for=condition={ctype}", f"{kind.lower()}/{name}",
            f"--timeout={int(timeout)}s", check=False, timeout=timeout + 30,
        )
        assert result.returncode == 0, (
            f"kubectl wait --for=condition={ctype} {kind}/{name}: {result.stderr.strip()}\n"
            f"status: {json.dumps(self.status(kind, name), indent=1)}\n"
            f"pods: {self.pod_summary(name)}"
        )

    def wait_finished(self, kind: str, name: str, timeout: float = 45) -> dict[str, Any]:
        """Wait until the job Succeeded or Failed; return its status."""

        def finished() -> dict[str, Any] | None:
            status = self.status(kind, name)
            return status if set(true_conditions(status)) & set(FINISHED) else None

        result: dict[str, Any] = wait_for(
            finished,
            lambda: f"{kind} {name} to finish; status {self.status(kind, name)}; "
            f"pods {self.pod_summary(name)}",
            timeout,
        )
        return result

    def wait_state(self, kind: str, name: str, state: str, timeout: float = 45) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status = self.status(kind, name)
            if state not in FINISHED and set(true_conditions(status)) & set(FINISHED):
                raise AssertionError(f"{kind} {name} finished instead of {state}: {status}")
            return status if status.get("state") == state else None

        result: dict[str, Any] = wait_for(
            reached,
            lambda: f"{kind} {name} state {state}; status {self.status(kind, name)}; "
            f"pods {self.pod_summary(name)}",
            timeout,
        )
        return result

    def wait_gone(self, kind: str, name: str, timeout: float = 30) -> None:
        wait_for(lambda: self.job(kind, name) is None, f"{kind} {name} to be deleted", timeout)

    # owned objects

    def pods(self, job_name: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": f"{LABEL_JOB}={job_name}"} if job_name else None
        items: list[dict[str, Any]] = self.get_path(
            f"/api/v1/namespaces/{self.name}/pods", query)["items"]
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def pod(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.get_path(
            f"/api/v1/namespaces/{self.name}/pods/{name}")
        return found

    def services(self, job_name: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get_path(
            f"/api/v1/namespaces/{self.name}/services",
            {"labelSelector": f"{LABEL_JOB}={job_name}"})["items"]
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def pod_phases(self, job_name: str) -> dict[str, str]:
        """Pod name -> phase, with ``(deleting)`` for pods that are going."""
        out = {}
        for pod in self.pods(job_name):
            phase = pod["status"].get("phase", "?")
            if pod["metadata"].get("deletionTimestamp"):
                phase += " (deleting)"
            out[pod["metadata"]["name"]] = phase
        return out

    def pod_summary(self, job_name: str) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.pod_phases(job_name).items()) or "none"

    def wait_pods(
        self, job_name: str, expected: dict[str, str], timeout: float = 30
    ) -> list[dict[str, Any]]:
        """Wait until the job's pods are exactly ``expected`` (name -> phase)."""
        wait_for(lambda: self.pod_phases(job_name) == expected,
                 lambda: f"pods of {job_name} to be {expected}, have {self.pod_phases(job_name)}",
                 timeout)
        return self.pods(job_name)

    def annotate_pod(self, name: str, **annotations: str) -> None:
        pairs = [f"{k}={v}" for k, v in annotations.items()]
        self.kubectl("annotate", "pod", name, "--overwrite", *pairs)

    def end_pod(self, name: str, exit_code: int = 0, run: str = "0s") -> None:
        """Make one running pod end with ``exit_code`` (KWOK reads the annotation at once)."""
        self.annotate_pod(name, **{EXIT_CODE_ANNOTATION: str(exit_code),
                                   RUN_DURATION_ANNOTATION: run})

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """``kubectl get events`` (for the job ``name``), oldest first."""
        args = ["get", "events", "-o", "json"]
        if name:
            args.append(f"--field-selector=involvedObject.name={name}")
        items: list[dict[str, Any]] = json.loads(self.kubectl(*args).stdout)["items"]
        return items

    def event_reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events(name)]

    def wait_event(self, name: str, reason: str, timeout: float = 20) -> list[str]:
        """The event reasons of ``name`` once one is ``reason``. The operator records a
        reconcile's events after its status write and its pod calls, so a test that has seen
        the status (or the pods) must wait for the event: read once, it may not be there yet."""
        return wait_for(lambda: r if reason in (r := self.event_reasons(name)) else None,
                        lambda: f"a {reason} event of {name}: {self.event_reasons(name)}",
                        timeout)

    def scheduled(self) -> Counter[str]:
        """How many times each pod name was scheduled: once per pod object created under it,
        so a pod deleted and created again counts twice."""
        return Counter(e["involvedObject"]["name"] for e in self.events()
                       if e["reason"] == "Scheduled" and e["involvedObject"]["kind"] == "Pod")


@contextlib.contextmanager
def watch_objects(ns: Namespace, path: str, query: dict[str, str]
                  ) -> Iterator[list[dict[str, Any]]]:
    """Every version of the objects of the collection `path` that `query` selects, as a
    watch delivers them while the block runs (those listed before it first); the list it
    yields is filled when the block ends.

    The watch starts at the resourceVersion of a list made before the block runs, and ends
    once it has delivered the version every selected object has when the block ends: it
    misses nothing the block does however late kubectl connects or however slowly the events
    come (a sleep "until the watch is established" is a guess on a loaded machine)."""
    listed = ns.get_path(path, query)
    watch = urllib.parse.urlencode({**query, "watch": "1",
                                    "resourceVersion": listed["metadata"]["resourceVersion"]})
    proc = subprocess.Popen(
        [str(ns.plane.bin_dir / "kubectl"), f"--kubeconfig={ns.plane.kubeconfig}",
         "get", "--raw", f"{path}?{watch}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    events: list[dict[str, Any]] = []
    # (A last line without its newline was cut off by the SIGTERM below while objects still
    # change: it is no event.)
    reader = threading.Thread(target=lambda: events.extend(
        json.loads(line) for line in proc.stdout or () if line.endswith("\n") and line.strip()),
        daemon=True)
    reader.start()
    objects: list[dict[str, Any]] = list(listed["items"])

    def version(obj: dict[str, Any]) -> tuple[str, int]:
        return obj["metadata"]["uid"], int(obj["metadata"]["resourceVersion"])

    def delivered(now: dict[str, int]) -> bool:
        seen = dict(version(o) for o in objects)
        for event in list(events):
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                uid, rv = version(event["object"])
                seen[uid] = max(seen.get(uid, 0), rv)
        return all(seen.get(uid, 0) >= rv for uid, rv in now.items())

    try:
        yield objects
        now = dict(version(o) for o in ns.get_path(path, query)["items"])
        wait_for(lambda: delivered(now), lambda: f"the watch of {path} to deliver {now}; "
                 f"it delivered {len(events)} events", timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        reader.join(timeout=10)
    errors = [e for e in events if e.get("type") == "ERROR"]
    assert not errors, f"the watch of {path} failed: {errors}"
    objects.extend(e["object"] for e in events if e.get("type") in ("ADDED", "MODIFIED"))
    assert objects or err == "", f"kubectl get --raw (watch): {err}"


@contextlib.contextmanager
def watch_statuses(ns: Namespace, kind: str, name: str) -> Iterator[list[dict[str, Any]]]:
    """Every version of the job a watch delivers while the block runs (`watch_objects`);
    yields the list it fills with their statuses when the block ends."""
    statuses: list[dict[str, Any]] = []
    with watch_objects(ns, ns.job_path(kind), {"fieldSelector": f"metadata.name={name}"}
                       ) as versions:
        yield statuses
    statuses.extend(v.get("status") or {} for v in versions)


# -- the operator process --------------------------------------------------------------------


@dataclass
class Operator:
    """One ``python -m trainjobs.cli operator`` process (its own process group)."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    argv: list[str]
    expected_exit: set[int] = field(default_factory=lambda: {0})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records; a line that is not JSON becomes ``{"level": "raw"}``."""
        out = []
        for line in self.log_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                record = {"level": "raw", "msg": line}
            out.append(record)
        return out

    def logged(self, pattern: str) -> list[dict[str, Any]]:
        regex = re.compile(pattern)
        return [r for r in self.records() if regex.search(str(r.get("msg", "")))]

    def problems(
        self, allowed: str | None = None, levels: tuple[str, ...] = ("error", "critical")
    ) -> list[str]:
        """Records at ``levels`` and tracebacks in the log, except messages matching
        ``allowed``. (Warnings are retried API errors, e.g. a 429 while a just-installed CRD's
        watch cache initializes: pass ``levels`` with "warning" to count them.)"""
        regex = re.compile(allowed) if allowed else None
        out = []
        for r in self.records():
            text = f"{r.get('msg', '')} {r.get('exception', '')}"
            bad = r.get("level") in levels or "Traceback" in text
            if bad and not (regex and regex.search(text)):
                out.append(f"{r.get('level')}: {text.strip()}")
        return out

    def wait_logged(self, pattern: str, timeout: float = 30) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            hits = self.logged(pattern)
            if hits:
                return hits[0]
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode} before "
                                     f"logging {pattern!r}:\n{self.tail()}")
            return None

        record: dict[str, Any] = wait_for(found, f"{self.name} to log {pattern!r}", timeout)
        return record

    def http(self, path: str) -> tuple[int, str]:
        """GET http://127.0.0.1:<port><path>: (status, body); (0, error) when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            return 0, str(exc)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """/metrics parsed: (sample name, sorted labels) -> value."""
        code, text = self.http("/metrics")
        assert code == 200, (code, text)
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return out

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.tail()}")
        return self.http("/readyz")[0] == 200

    def wait_ready(self, timeout: float = 60) -> None:
        wait_for(self.ready, f"{self.name} /readyz 200", timeout, interval=0.1)

    def send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL (the whole process group) and reap."""
        self.expected_exit = {-signal.SIGKILL}
        self.send(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        if self.proc.poll() is None:
            self.send(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.send(signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Nothing of its group may outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class Operators:
    """Starts operators for one test and stops every one at teardown."""

    def __init__(self, plane: ControlPlane, namespaces: list[str], tmp: Path) -> None:
        self.plane = plane
        self.namespaces = namespaces
        self.tmp = tmp
        self.started: list[Operator] = []

    def start(
        self, *extra: str, name: str = "operator", wait_ready: bool = True, timeout: float = 60
    ) -> Operator:
        """Start ``python -m trainjobs.cli operator`` watching the test namespace(s); wait for
        /readyz 200 unless told not to. A port taken between picking and binding is retried."""
        watch = [arg for n in self.namespaces for arg in ("--namespace", n)]
        for attempt in range(3):
            port = free_port()
            argv = [
                sys.executable, "-m", "trainjobs.cli", "operator",
                "--kubeconfig", str(self.plane.kubeconfig),
                *watch,
                "--http-address", f"127.0.0.1:{port}",
                "--log-format", "json",
                *extra,
            ]
            label = f"{name}-{len(self.started)}"
            log = self.tmp / f"{label}.log"
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            env["PYTHONUNBUFFERED"] = "1"
            # Its own session (process group); killed by the kernel should pytest die hard.
            proc = start_daemon(argv, log, env=env, cwd=self.tmp, die_with_parent=True)
            op = Operator(label, proc, log, port, argv)
            self.started.append(op)
            if not wait_ready:
                return op
            try:
                op.wait_ready(timeout)
            except AssertionError:
                if op.proc.poll() is not None and "address already in use" in \
                        op.log_text().lower() and attempt < 2:
                    continue
                raise
            return op
        raise AssertionError("unreachable")

    def stop_all(self) -> list[str]:
        """Stop every operator; returns what went wrong (unexpected exit statuses)."""
        problems = []
        for op in self.started:
            code = op.stop()
            if code not in op.expected_exit:
                problems.append(f"{op.name} exited {code} (expected {op.expected_exit}):\n"
                                f"{op.tail()}")
        return problems

    def report(self, lines: int = 80) -> str:
        return "\n\n".join(f"--- {op.name} (pid {op.pid}, log {op.log}):\n{op.tail(lines)}"
                           for op in self.started)
