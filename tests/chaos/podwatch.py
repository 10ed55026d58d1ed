"""A watch on every pod of a chaos namespace, for what the audit log cannot tell: which
attempt each pod belongs to (the ``trainjobs.io/attempt`` annotation, on the pods of kinds
whose replicas restart together, e.g. Caffe2Job), and which pods are alive at once.

Why a watch: events of one resource arrive in resourceVersion order, so replaying them gives
the namespace's pods exactly as they were after each write. Two figures come from it (issue
29), per job kind:

attempt_overlaps
    Jobs that had pods of two attempts alive at once (alive: Pending, Running or Unknown,
    being deleted or not; finished pods may linger beside a new attempt).
recreated_in_attempt
    Pod names created twice (two uids) under the same job and attempt: one ``RUN_ID``
    rendezvousing two processes of one rank.
attempts_without_cause
    Attempts that ended (a later attempt of the job was seen) though every shard of it had
    been created, none was seen Failed and none was deleted by anyone but the operator (issue
    36: a fresh attempt deleted 0.2 s after its creation, for nothing). An attempt whose
    creates an operator SIGKILL cut off is given up by design (docs/api.md): that is a cause.

The watch resumes from the last resourceVersion it saw (bookmarks keep it fresh); only when
the API server answers 410 Gone does it list again, and then pods it knew that the list lacks
are taken as gone.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainjobs.testing import ControlPlane

ATTEMPT = "trainjobs.io/attempt"
ALIVE = frozenset({"Pending", "Running", "Unknown", ""})


@dataclass
class SeenPod:
    """What the watch last saw of one pod (uid)."""

    uid: str
    name: str
    kind: str
    owner: str
    job: str
    attempt: str | None
    phase: str
    created: str
    deleting: bool = False
    gone: bool = False

    @property
    def alive(self) -> bool:
        return not self.gone and self.phase in ALIVE


@dataclass
class KindFigures:
    """The pod watch's figures for one job kind."""

    jobs: int = 0
    pods: int = 0
    pods_with_attempt: int = 0
    attempts_max: int = 0
    jobs_restarted_together: int = 0
    attempt_overlaps: list[str] = field(default_factory=list)
    recreated_in_attempt: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """None for the attempt figures of a kind whose pods carry no attempt (each replica
        restarts alone: a pod name created again is a recreation, counted as duplicates)."""
        measured = self.pods_with_attempt > 0
        return {"jobs": self.jobs, "pods": self.pods, "attempts_max": self.attempts_max,
                "jobs_restarted_together": self.jobs_restarted_together,
                "attempt_overlaps": len(self.attempt_overlaps) if measured else None,
                "recreated_in_attempt": len(self.recreated_in_attempt) if measured else None,
                "examples": (self.attempt_overlaps + self.recreated_in_attempt)[:5]}


class PodWatch:
    """Watches the pods of one namespace (one thread). ``on_pod`` is called, in the watch's
    thread, with each pod object delivered (keep it quick)."""

    def __init__(self, plane: ControlPlane, namespace: str,
                 on_pod: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.namespace = namespace
        self.on_pod = on_pod
        self.pods: dict[str, SeenPod] = {}
        self.overlaps: dict[tuple[str, str], str] = {}  # (kind, owner) -> first seen
        self.recreated: list[tuple[str, str]] = []  # (kind, description)
        self.relists = 0
        self._first: dict[tuple[str, str, str], str] = {}  # (owner, name, attempt) -> uid
        self._by_owner: dict[str, set[str]] = {}  # job uid -> its pods' uids
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
        self._context.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
        self._port = plane.ports["kube-apiserver"]

    def __enter__(self) -> PodWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # -- figures ---------------------------------------------------------------------------

    def figures(self) -> dict[str, KindFigures]:
        """Per job kind: jobs, pods, attempts, overlaps and recreations seen so far."""
        out: dict[str, KindFigures] = {}
        with self._lock:
            attempts: dict[tuple[str, str], set[str]] = {}
            for pod in self.pods.values():
                kf = out.setdefault(pod.kind, KindFigures())
                kf.pods += 1
                kf.pods_with_attempt += pod.attempt is not None
                attempts.setdefault((pod.kind, pod.owner), set()).update(
                    [pod.attempt] if pod.attempt is not None else [])
            for (kind, _), seen in attempts.items():
                kf = out[kind]
                kf.jobs += 1
                numbers = [int(a) for a in seen if a.isdigit()]
                kf.attempts_max = max([kf.attempts_max, *numbers])
                kf.jobs_restarted_together += int(len(seen) > 1)
            for (kind, _), what in self.overlaps.items():
                out.setdefault(kind, KindFigures()).attempt_overlaps.append(what)
            for kind, what in self.recreated:
                out.setdefault(kind, KindFigures()).recreated_in_attempt.append(what)
        return out

    def ended_in_attempt(self, attempt: str, names: set[str]) -> dict[str, str]:
        """Pod name -> the last phase seen of its pod of ``attempt`` (for ``names``)."""
        with self._lock:
            return {p.name: p.phase for p in self.pods.values()
                    if p.name in names and p.attempt == attempt}

    def attempts_by_name(self) -> dict[str, int]:
        """Pod name -> the number of attempts seen with pods of that name (pods that carry
        an attempt only; names under one job, as chaos scenarios never reuse a job name)."""
        with self._lock:
            seen: dict[str, set[str]] = {}
            for p in self.pods.values():
                if p.attempt is not None:
                    seen.setdefault(p.name, set()).add(p.attempt)
        return {name: len(attempts) for name, attempts in seen.items()}

    def failed_by_name(self) -> Counter[str]:
        """Pod name -> how many of its pods (uids) were last seen Failed."""
        with self._lock:
            return Counter(p.name for p in self.pods.values() if p.phase == "Failed")

    def made_by_name(self) -> Counter[str]:
        """Pod name -> how many pods (uids) of that name were seen: those created, even by a
        create the API server answered 504 (which the audit log does not count)."""
        with self._lock:
            return Counter(p.name for p in self.pods.values())

    def attempts_without_cause(self, shards: dict[str, int], taken: set[str]) -> list[str]:
        """The attempts of the jobs of ``shards`` (job name -> its shards) that ended without
        a cause (see the module's doc); ``taken``: uids of pods deleted by anyone but the
        operator (audit log). One line each, naming the job, the attempt and its pods."""
        by_job: dict[str, dict[int, list[SeenPod]]] = {}
        with self._lock:
            for pod in self.pods.values():
                if pod.job in shards and pod.attempt is not None and pod.attempt.isdigit():
                    by_job.setdefault(pod.job, {}).setdefault(int(pod.attempt), []).append(pod)
        out = []
        for job, attempts in sorted(by_job.items()):
            last = max(attempts)
            for attempt, pods in sorted(attempts.items()):
                complete = len({p.name for p in pods}) == shards[job]
                failed = any(p.phase == "Failed" for p in pods)
                lost = any(p.uid in taken for p in pods)
                if attempt < last and complete and not failed and not lost:
                    out.append(f"{job} attempt {attempt}: " + ", ".join(
                        sorted(f"{p.name} {p.phase or '?'}" for p in pods))[:200])
        return out

    def kind_of(self) -> dict[str, str]:
        """Pod name -> its job's kind (the owner of the pods seen under that name)."""
        with self._lock:
            return {pod.name: pod.kind for pod in self.pods.values()}

    # -- replay ----------------------------------------------------------------------------

    def _seen(self, obj: dict[str, Any], gone: bool) -> None:
        meta = obj.get("metadata") or {}
        owners = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
        if not owners or not meta.get("uid"):
            return
        uid = str(meta["uid"])
        pod = SeenPod(uid=uid, name=str(meta.get("name")), kind=str(owners[0].get("kind")),
                      owner=str(owners[0].get("uid")), job=str(owners[0].get("name")),
                      attempt=(meta.get("annotations") or {}).get(ATTEMPT),
                      phase=str((obj.get("status") or {}).get("phase") or ""),
                      created=str(meta.get("creationTimestamp", "")),
                      deleting=bool(meta.get("deletionTimestamp")), gone=gone)
        with self._lock:
            new = uid not in self.pods
            self.pods[uid] = pod
            self._by_owner.setdefault(pod.owner, set()).add(uid)
            if new and pod.attempt is not None:
                key = (pod.owner, pod.name, pod.attempt)
                first = self._first.setdefault(key, uid)
                if first != uid:
                    self.recreated.append((pod.kind, f"{pod.name} attempt {pod.attempt} "
                                           f"created again at {pod.created}"))
            if pod.alive and pod.attempt is not None:
                self._check_overlap(pod)

    def _check_overlap(self, pod: SeenPod) -> None:
        mine = (self.pods[uid] for uid in self._by_owner.get(pod.owner, ()))
        alive = [p for p in mine if p.alive and p.attempt is not None]
        attempts = sorted({p.attempt for p in alive if p.attempt is not None})
        if len(attempts) > 1 and (pod.kind, pod.owner) not in self.overlaps:
            self.overlaps[(pod.kind, pod.owner)] = (
                f"{pod.name.rsplit('-', 2)[0]}: attempts {attempts} alive at once: " + ", ".join(
                    sorted(f"{p.name}@{p.attempt} {p.phase}" for p in alive))[:300])

    # -- the watch -------------------------------------------------------------------------

    def _conn(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self._port, context=self._context,
                                           timeout=timeout)

    def _list(self) -> str:
        conn = self._conn(20)
        try:
            conn.request("GET", f"/api/v1/namespaces/{self.namespace}/pods",
                         headers={"Accept": "application/json"})
            resp = conn.getresponse()
            listed = json.loads(resp.read())
            if resp.status != 200:
                raise OSError(f"list pods: {resp.status}")
        finally:
            conn.close()
        items = listed.get("items") or []
        present = {str((i.get("metadata") or {}).get("uid")) for i in items}
        with self._lock:
            vanished = [p for uid, p in self.pods.items() if uid not in present and not p.gone]
            for pod in vanished:
                pod.gone = True
        for item in items:
            self._seen(item, gone=False)
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                    self.relists += 1
                rv = self._watch(rv)
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                time.sleep(0.2)

    def _watch(self, rv: str) -> str:
        """Follow the watch from ``rv``; returns where to resume ("" after 410 Gone)."""
        conn = self._conn(70)
        try:
            conn.request("GET", f"/api/v1/namespaces/{self.namespace}/pods?watch=1"
                         f"&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=60",
                         headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status == 410:
                return ""
            if resp.status != 200:
                raise OSError(f"watch pods: {resp.status}")
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    return rv
                event = json.loads(line)
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ERROR":
                    return "" if obj.get("code") == 410 else rv
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                self._seen(obj, gone=kind == "DELETED")
                if self.on_pod is not None and kind != "DELETED":
                    self.on_pod(obj)
            return rv
        finally:
            conn.close()
