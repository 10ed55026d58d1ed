"""Shards that fail in consecutive attempts: the pod of a chosen shard ends with exit 137 in
the first N attempts it runs in, so its Caffe2Job restarts every shard together N times (each
a new attempt), then succeeds. N 1 is the storm's first shape (issue 29); N up to 3 is issue
36's: a failure while the operator restarts, again and again.

Why from the test: a pod template is the same for every attempt, and KWOK's annotations say
how every run of it ends; only a writer that sees the attempt can fail the first one alone.
The pod watch hands each pod it sees to :meth:`FailAttempts.consider`; a thread of its own
annotates the chosen Running pods (KWOK ends a pod at once when its run-duration is 0s). The
PATCH carries the pod's uid, so it can never reach a later pod of the same name.
"""

from __future__ import annotations

import http.client
import json
import queue
import ssl
import threading
from typing import Any

from trainjobs.testing import EXIT_CODE_ANNOTATION, RUN_DURATION_ANNOTATION, ControlPlane

ATTEMPT = "trainjobs.io/attempt"


class FailAttempts:
    """Ends the pods named in ``targets`` with exit 137 while they run, in the first
    ``targets[name]`` attempts they run in."""

    def __init__(self, plane: ControlPlane, namespace: str, targets: dict[str, int]) -> None:
        self.namespace = namespace
        self.targets = dict(targets)
        self.failed: dict[str, list[str]] = {}  # pod name -> the uids failed
        self.errors: list[str] = []
        self._queued: set[str] = set()
        self._attempts: dict[str, set[str]] = {}  # pod name -> the attempts chosen to fail
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
        self._context.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
        self._port = plane.ports["kube-apiserver"]

    def __enter__(self) -> FailAttempts:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def consider(self, pod: dict[str, Any]) -> None:
        """Called by the pod watch with every pod it sees (quick: it only queues)."""
        meta = pod.get("metadata") or {}
        name, uid = str(meta.get("name")), str(meta.get("uid"))
        attempt = (meta.get("annotations") or {}).get(ATTEMPT)
        chosen = self._attempts.setdefault(name, set())
        if (name in self.targets and uid not in self._queued and not meta.get("deletionTimestamp")
                and attempt is not None and attempt not in chosen
                and len(chosen) < self.targets[name]
                and (pod.get("status") or {}).get("phase") == "Running"):
            chosen.add(attempt)
            self._queued.add(uid)
            self._queue.put((name, uid))

    def injected(self) -> int:
        """The failures made (PATCHes answered 200)."""
        return sum(len(uids) for uids in self.failed.values())

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            name, uid = item
            patch = {"metadata": {"uid": uid, "annotations": {
                EXIT_CODE_ANNOTATION: "137", RUN_DURATION_ANNOTATION: "0s"}}}
            conn = http.client.HTTPSConnection("127.0.0.1", self._port,
                                               context=self._context, timeout=30)
            try:
                conn.request("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{name}",
                             body=json.dumps(patch).encode(),
                             headers={"Content-Type": "application/merge-patch+json",
                                      "Accept": "application/json"})
                resp = conn.getresponse()
                body = resp.read()
                if resp.status == 200:
                    self.failed.setdefault(name, []).append(uid)
                else:  # gone already, or (uid differs) its successor: not ours to fail
                    self.errors.append(f"{name}: {resp.status} {body[:160]!r}")
            except (OSError, http.client.HTTPException) as exc:
                self.errors.append(f"{name}: {exc!r}")
            finally:
                conn.close()
