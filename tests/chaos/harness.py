"""What every chaos scenario shares: a watch on every job status that survives API server
restarts, the figures each scenario reports, and how they are read from the API server's audit
log and the cluster.

The figures (docs/reliability.md):

duplicates
    Pod creates beyond what removals asked for: for each pod name, operator creates minus one
    minus the pods of that name deleted after they Failed or deleted by the garbage collector
    or a user (audit log; ``PodHistory.duplicates``); for the pods of kinds that restart
    together, creates beyond one per attempt a pod watch saw (``audit_figures``). A replica
    recreated because its pod was deleted under it by KWOK would count here too, so the
    fake kubelet's unasked deletes are reported beside it.
unasked_kwok_deletes
    Deletes by KWOK that nobody else had started (the harness's own defect of issue 15.8).
deleted_again
    The operator's second DELETE of a pod (uid) still stored 10 s after its first: the
    planner's remedy for a removal cut short (``PodHistory.deleted_again``). Not a problem; it
    says whether a run exercised that path.
orphans
    Pods and Services labelled for a job that is not their owner (no ownerReference to an
    existing job's uid), and pods still Pending/Running of a finished job (cleanPodPolicy
    Running, the default, deletes them) once the run settled.
lost
    Jobs that did not reach their expected end within the scenario's time budget.
per_kind
    From a pod watch (tests/chaos/podwatch.py), per job kind: jobs, pods, the attempts of
    kinds that restart together, the jobs with pods of two attempts alive at once and the pod
    names created twice within one attempt (both must be 0), and duplicates; for Caffe2Jobs,
    the attempts that ended without a failed or lost pod (must be 0) and the restarts their
    statuses count beside the failures the storm made. Empty where a scenario runs no pod
    watch (not measured).
double_true
    Job statuses seen (every version a watch delivered) with two exclusive conditions True.
rule_mismatches
    For the jobs with failure rules (tests/chaos/ruled.py): each count or action that differs
    from what KWOK's exits must lead to (status.failures, failureRuleUses, restarts, pods
    created, the Failed condition); must be empty.
recovery
    Seconds from a fault's end to the operator acting again (scenario-specific, named).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from tests.integration.operator_helpers import (
    EXCLUSIVE,
    FINISHED,
    LABEL_JOB,
    PLURALS,
    Namespace,
    Operator,
    Operators,
    true_conditions,
)
from trainjobs.testing import ControlPlane, pod_histories

API = "/apis/trainjobs.io/v1alpha1"
OPERATOR_AGENT = "trainjobs-operator"


@dataclass
class Figures:
    """One scenario's outcome; ``problems()`` lists what breaks the suite's invariants."""

    scenario: str
    jobs: int = 0
    finished: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: int = 0
    max_creates_per_pod_name: int = 0
    failures_recreated: int = 0
    unasked_kwok_deletes: int = 0
    deleted_again: int = 0
    orphans: list[str] = field(default_factory=list)
    statuses_seen: int = 0
    double_true: list[str] = field(default_factory=list)
    finished_flips: list[str] = field(default_factory=list)
    rule_mismatches: list[str] = field(default_factory=list)
    recovery_s: dict[str, float] = field(default_factory=dict)
    faults: int = 0
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    per_kind: dict[str, dict[str, Any]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """What breaks the suite's invariants (each a short line with examples)."""
        found = (
            (self.lost, "lost jobs"),
            (self.orphans, "orphans"),
            (self.double_true, "statuses with two exclusive conditions True"),
            (self.finished_flips, "finished jobs that left their end"),
            (self.rule_mismatches, "failure-rule counts unlike what KWOK did"),
        )
        out = [f"{len(items)} {what}: {items[:5]}" for items, what in found if items]
        if self.duplicates:
            out.append(f"{self.duplicates} duplicate pod creates")
        if self.unasked_kwok_deletes:
            out.append(f"{self.unasked_kwok_deletes} deletes by KWOK nobody asked for")
        for kind, entry in sorted(self.per_kind.items()):
            if entry.get("attempt_overlaps") or entry.get("recreated_in_attempt"):
                out.append(f"{kind}: {entry['attempt_overlaps']} jobs with two attempts "
                           f"alive at once, {entry['recreated_in_attempt']} pods created "
                           f"twice within an attempt: {entry.get('examples')}")
            if entry.get("attempts_without_cause") or entry.get("restarts_over_failures"):
                out.append(f"{kind}: {entry.get('attempts_without_cause')} attempts ended "
                           f"without a failed or lost pod, {entry.get('restarts_over_failures')}"
                           f" jobs counting more restarts than failures: "
                           f"{entry.get('examples')}")
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["recovery_s"] = {k: round(v, 2) for k, v in self.recovery_s.items()}
        data["duration_s"] = round(self.duration_s, 1)
        return data


@dataclass
class ChaosEnv:
    """One test's namespace of the chaos cluster, its operators, and the run's figures."""

    plane: ControlPlane
    ns: Namespace
    operators: Operators
    figures: list[Figures]

    def record(self, figures: Figures) -> Figures:
        """Keep ``figures`` for docs/reliability.md (with --chaos) and print them."""
        self.figures.append(figures)
        print(json.dumps(figures.to_json(), indent=1))
        return figures


# -- a status watch that survives outages -------------------------------------------------------


class StatusWatch:
    """Watches every job kind of one namespace (one thread per kind), keeping every status
    version delivered; re-lists and watches again after any error (an API server restart)."""

    def __init__(self, plane: ControlPlane, namespace: str,
                 kinds: Iterable[str] = tuple(PLURALS)) -> None:
        self.plane = plane
        self.namespace = namespace
        self.kinds = list(kinds)
        self.seen = 0
        self.double_true: list[str] = []
        self.finished_flips: list[str] = []
        self._ended: dict[tuple[str, str], str] = {}
        self.latest: dict[tuple[str, str], dict[str, Any]] = {}
        self.reconnects = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
        self._context.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
        self._port = plane.ports["kube-apiserver"]

    def __enter__(self) -> StatusWatch:
        for kind in self.kinds:
            thread = threading.Thread(target=self._run, args=(kind,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        true = [t for t in true_conditions(status) if t in EXCLUSIVE]
        with self._lock:
            self.seen += 1
            self.latest[(kind, str(meta.get("name")))] = obj
            if len(true) > 1:
                self.double_true.append(f"{kind} {meta.get('name')} rv "
                                        f"{meta.get('resourceVersion')}: {true}")
            key = (kind, str(meta.get("name")))
            ended = self._ended.get(key)
            if ended is not None and meta.get("uid") == ended.split("/")[0] and (
                    true != [ended.split("/")[1]]):
                self.finished_flips.append(f"{kind} {key[1]} was {ended.split('/')[1]}, "
                                           f"now {true}")
            done = [t for t in true if t in FINISHED]
            if done:
                self._ended[key] = f"{meta.get('uid')}/{done[0]}"

    def _conn(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self._port, context=self._context,
                                           timeout=timeout)

    def _run(self, kind: str) -> None:
        base = f"{API}/namespaces/{self.namespace}/{PLURALS[kind]}"
        while not self._stop.is_set():
            conn = self._conn(10)
            try:
                conn.request("GET", base, headers={"Accept": "application/json"})
                resp = conn.getresponse()
                listed = json.loads(resp.read())
                if resp.status != 200:
                    raise OSError(f"list {resp.status}")
                for item in listed.get("items") or []:
                    self._record(kind, item)
                rv = listed["metadata"]["resourceVersion"]
                conn.close()
                conn = self._conn(40)
                conn.request("GET", f"{base}?watch=1&resourceVersion={rv}&timeoutSeconds=30",
                             headers={"Accept": "application/json"})
                resp = conn.getresponse()
                while not self._stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._record(kind, event["object"])
                    elif event.get("type") == "ERROR":
                        break
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                time.sleep(0.2)
            finally:
                conn.close()
            with self._lock:
                self.reconnects += 1

    def finished(self) -> dict[str, str]:
        """``Kind/name`` -> Succeeded/Failed for the jobs whose latest status is finished."""
        out = {}
        with self._lock:
            for (kind, name), obj in self.latest.items():
                done = set(true_conditions(obj.get("status") or {})) & set(FINISHED)
                if done:
                    out[f"{kind}/{name}"] = sorted(done)[0]
        return out


# -- reading the cluster ---------------------------------------------------------------------


def wait_finished(watch: StatusWatch, names: Iterable[str], budget: float,
                  operators: Iterable[Operator] = ()) -> list[str]:
    """Wait (at most ``budget`` seconds) until every job of ``names`` (``Kind/name``)
    finished; returns those that did not. An operator that exited fails at once, naming its log."""
    wanted = set(names)
    deadline = time.monotonic() + budget
    while True:
        missing = sorted(wanted - set(watch.finished()))
        if not missing or time.monotonic() > deadline:
            return missing
        for op in operators:
            if op.proc.poll() is not None and op.expected_exit == {0}:
                raise AssertionError(f"{op.name} exited {op.proc.returncode}:\n{op.tail()}")
        watch.plane.check_alive()
        time.sleep(0.5)


def audit_figures(figures: Figures, plane: ControlPlane, namespace: str, since: int,
                  attempts: Mapping[str, int] | None = None) -> None:
    """Duplicates, creates per pod name and KWOK's unasked deletes, from the audit log.

    ``attempts``: pod name -> how many attempts a pod watch saw pods of under that name, for
    the kinds whose replicas restart together: each attempt creates every shard anew (the
    operator deletes the running peers of a failed shard), so there a duplicate is a create
    beyond one per attempt, whatever removal came before it; and for the pods of jobs with
    failure rules, the creates their rules ask for (a RestartJob recreates running pods)."""
    histories = pod_histories(plane.audit_events(since), namespace)
    dup = 0
    most = 0
    recreated = 0
    unasked = 0
    again = 0
    for name, history in histories.items():
        creates = history.creates()
        most = max(most, creates)
        recreated += min(history.failures(), max(0, creates - 1))
        if attempts and name in attempts:
            dup += max(0, creates - attempts[name])
        else:
            dup += history.duplicates()
        unasked += len(history.unasked_deletes())
        again += history.deleted_again()
    figures.duplicates = dup
    figures.max_creates_per_pod_name = most
    figures.failures_recreated = recreated
    figures.unasked_kwok_deletes = unasked
    figures.deleted_again = again


def find_orphans(ns: Namespace, kinds: Iterable[str], settle: float = 15.0) -> list[str]:
    """Labelled pods/Services without a live owner job, and live pods of finished jobs; waits
    up to ``settle`` seconds for the operator's cleanup to be over."""
    deadline = time.monotonic() + settle
    while True:
        found = _orphans_now(ns, kinds)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(1.0)


def get_list(ns: Namespace, path: str, query: dict[str, str] | None = None,
             budget: float = 60.0) -> list[dict[str, Any]]:
    """The items of a LIST, retried while the API server answers 429/5xx or nothing (it
    serves a CRD's LIST only once that resource's watch cache is filled again after a
    restart: "storage is (re)initializing")."""
    api = ns.plane.api()
    if query:
        path += "?" + urllib.parse.urlencode(query)
    deadline = time.monotonic() + budget
    while True:
        try:
            resp = api.request("GET", path, timeout=10)
            if resp.status == 200:
                items: list[dict[str, Any]] = resp.json()["items"]
                return items
            if resp.status < 500 and resp.status != 429:
                raise AssertionError(f"GET {path}: {resp.status} {resp.body[:300]!r}")
            last = f"{resp.status} {resp.body[:200]!r}"
        except (OSError, http.client.HTTPException) as exc:
            last = repr(exc)
        if time.monotonic() > deadline:
            raise AssertionError(f"GET {path}: no answer in {budget:g} s: {last}")
        time.sleep(0.5)


def _orphans_now(ns: Namespace, kinds: Iterable[str]) -> list[str]:
    jobs: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        for item in get_list(ns, ns.job_path(kind)):
            jobs[item["metadata"]["uid"]] = item
    finished_uids = {uid for uid, j in jobs.items()
                     if set(true_conditions(j.get("status") or {})) & set(FINISHED)}
    out = []
    for plural in ("pods", "services"):
        items = get_list(ns, f"/api/v1/namespaces/{ns.name}/{plural}",
                         {"labelSelector": LABEL_JOB})
        for obj in items:
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            owners = [r["uid"] for r in meta.get("ownerReferences") or [] if r["uid"] in jobs]
            if not owners:
                out.append(f"{plural}/{meta['name']} (no live owner)")
            elif (plural == "pods" and owners[0] in finished_uids
                  and obj.get("status", {}).get("phase") in ("Pending", "Running")
                  and not _is_feature_pod(meta)):
                out.append(f"pods/{meta['name']} ({obj['status']['phase']} after its job "
                           "finished)")
    return out


def _is_feature_pod(meta: dict[str, Any]) -> bool:
    """Pods of a feature plugin (managed Redis) live as long as their job, finished or not."""
    return (meta.get("labels") or {}).get("trainjobs.io/component") not in (None, "")


def operator_writes_after(plane: ControlPlane, since: int, after_wall: float,
                          namespace: str) -> float | None:
    """Wall-clock time (epoch seconds) of the operator's first successful write in
    ``namespace`` logged after ``after_wall``, from the audit log; None when there is none."""
    for event in plane.audit_events(since):
        ref = event.get("objectRef") or {}
        if ref.get("namespace") != namespace:
            continue
        if not str(event.get("userAgent", "")).startswith(OPERATOR_AGENT):
            continue
        if not 200 <= int((event.get("responseStatus") or {}).get("code") or 0) < 300:
            continue
        stamp = epoch_of(str(event.get("stageTimestamp", "")))
        if stamp is not None and stamp > after_wall:
            return stamp
    return None


def epoch_of(stamp: str) -> float | None:
    """Epoch seconds of an RFC 3339 time as the API server writes it; None if it is not."""
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def create_all(ns: Namespace, manifests: Iterable[dict[str, Any]]) -> list[str]:
    """POST every manifest (REST, retried on 429/5xx for a while); returns ``Kind/name``
    of each."""
    api = ns.plane.api()
    names = []
    for manifest in manifests:
        path = ns.job_path(manifest["kind"])
        deadline = time.monotonic() + 60
        while True:
            try:
                resp = api.request("POST", path, manifest, timeout=10)
            except (OSError, http.client.HTTPException):
                resp = None
            if resp is not None and resp.status == 201:
                break
            if resp is not None and resp.status < 500 and resp.status != 429:
                raise AssertionError(f"creating {manifest['metadata']['name']}: "
                                     f"{resp.status} {resp.body[:300]!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"creating {manifest['metadata']['name']}: no 201 in 60 s")
            time.sleep(0.5)
        names.append(f"{manifest['kind']}/{manifest['metadata']['name']}")
    return names


@contextlib.contextmanager
def timed(figures: Figures) -> Iterator[None]:
    t0 = time.monotonic()
    try:
        yield
    finally:
        figures.duration_s = time.monotonic() - t0


def tally(values: Iterable[str]) -> dict[str, int]:
    return dict(Counter(values))
