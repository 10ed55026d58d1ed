"""The API server's audit log: who wrote what, read back by tests and benchmarks.

Why: the only witness that tells the operator's writes from KWOK's, the scheduler's or the
garbage collector's is the API server itself. ``ClusterOptions(audit_policy=...)`` turns the
log on (JSON lines in ``logs/audit.log``); :func:`pod_histories` replays the pod creates and
deletes of a namespace so a test can count creates per replica per failure (a duplicate is a
create that no failure or deletion asked for) and deletes that nobody but the fake kubelet made.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
"""
_WRITES = """\
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""
#: Writes at Metadata level (who, what, when; no bodies): cheap enough for benchmarks.
AUDIT_WRITES = _POLICY + _WRITES
#: As ``AUDIT_WRITES``, plus the body of each pod DELETE's answer (the pod as it was: uid,
#: phase, deletionTimestamp), so a history tells a failed pod's removal from a running one's.
AUDIT_WRITES_AND_POD_DELETES = _POLICY + """\
- level: RequestResponse
  verbs: [delete]
  resources: [{group: "", resources: [pods]}]
""" + _WRITES
AUDIT_LOG = "audit.log"
#: Deleters whose removal of a pod is a reason for its controller to create it again.
EXTERNAL_DELETERS = ("kube-controller-manager", "kubectl")
_AGENTS = (
    ("kube-scheduler", "kube-scheduler"),
    ("kube-controller-manager", "kube-controller-manager"),
    ("kwok", "kwok"),
    ("kube-apiserver", "kube-apiserver"),
    ("kubectl", "kubectl"),
)


def audit_args(policy_file: Path, log_file: Path) -> list[str]:
    """The kube-apiserver flags that write every event as one JSON line, never rotated."""
    return [
        f"--audit-policy-file={policy_file}",
        f"--audit-log-path={log_file}",
        "--audit-log-format=json",
        "--audit-log-maxbackup=0",
        "--audit-log-maxsize=0",
    ]


def agent_of(user_agent: str, extra: Iterable[tuple[str, str]] = ()) -> str:
    """Which component a user agent names (``extra``: more (prefix, name) pairs, tried
    first); anything else is the operator."""
    ua = user_agent.lower()
    for prefix, name in (*extra, *_AGENTS):
        if ua.startswith(prefix):
            return name
    return "operator"


def read_events(path: Path, offset: int = 0) -> list[dict[str, Any]]:
    """The events logged after ``offset`` bytes (a torn last line is left out)."""
    out: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
        f.seek(offset)
        for line in f:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    out.append(event)
    return out


def size_of(path: Path) -> int:
    """Where the log ends now (the ``offset`` of a later :func:`read_events`)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@dataclass(frozen=True)
class PodWrite:
    """One create or delete of a pod name, as the API server answered it."""

    time: str
    verb: str
    agent: str
    code: int
    #: From a DELETE's answer (``AUDIT_WRITES_AND_POD_DELETES``): the pod that was removed.
    uid: str = ""
    phase: str = ""


@dataclass
class PodHistory:
    """Every create and delete of one pod name in one namespace, in order."""

    name: str
    writes: list[PodWrite] = field(default_factory=list)

    def creates(self, agent: str = "operator") -> int:
        return sum(1 for w in self.writes if w.verb == "create" and w.agent == agent
                   and w.code == 201)

    def _removals(self) -> list[list[PodWrite]]:
        """The deletes answered 200, grouped by pod (uid; one without a uid alone): a pod
        deleted again because its first removal was cut short (the planner's 10 s re-delete),
        or finished by the kubelet, is one removal, not two."""
        by_uid: dict[str, list[PodWrite]] = {}
        out: list[list[PodWrite]] = []
        for w in self.writes:
            if w.verb != "delete" or w.code != 200:
                continue
            if w.uid and w.uid in by_uid:
                by_uid[w.uid].append(w)
                continue
            out.append([w])
            if w.uid:
                by_uid[w.uid] = out[-1]
        return out

    def failures(self) -> int:
        """Pods of this name that were deleted after they Failed (a reason to create again)."""
        return sum(1 for pod in self._removals() if any(w.phase == "Failed" for w in pod))

    def deleted_again(self, agent: str = "operator") -> int:
        """Deletes by ``agent`` of a pod (uid) it had deleted before: the operator's second
        DELETE of a pod still stored with its deletionTimestamp 10 s after the first (its
        removal cut short, e.g. by a SIGKILL mid-request)."""
        seen: set[str] = set()
        again = 0
        for w in self.writes:
            if w.verb == "delete" and w.agent == agent and w.code == 200 and w.uid:
                again += w.uid in seen
                seen.add(w.uid)
        return again

    def reasons_to_create(self, external: Iterable[str] = EXTERNAL_DELETERS) -> int:
        """Removals that ask for a new pod of this name: a pod that Failed, or one deleted by
        someone other than the operator and the fake kubelet (the garbage collector after its
        job was deleted and created again, a user with kubectl), or a delete whose answer was
        lost (5xx, e.g. a 504 from an overloaded API server: the pod may have gone, and its
        phase is unknown)."""
        others = set(external)
        removals = sum(1 for pod in self._removals()
                       if any(w.phase == "Failed" or w.agent in others for w in pod))
        lost = sum(1 for w in self.writes if w.verb == "delete" and (w.code >= 500 or
                                                                      w.code == 0))
        return removals + lost

    def duplicates(self, agent: str = "operator") -> int:
        """Creates beyond the first that no removal asked for."""
        return max(0, self.creates(agent) - 1 - self.reasons_to_create())

    def removals_by(self, agent: str) -> int:
        return sum(1 for w in self.writes if w.verb == "delete" and w.code == 200
                   and w.agent == agent)

    def unasked_deletes(self, by: str = "kwok") -> list[PodWrite]:
        """Deletes by ``by`` (the fake kubelet) that nobody else had asked for: of a pod (by
        uid) that no one else had deleted first, or of nothing at all (a 404: a delete by name
        aimed at a pod that was already gone, which could as well have hit its successor). A
        kubelet only finishes the deletions others start. A delete by another whose answer was
        lost (5xx: it may have started the deletion) accounts for the next one of ``by``; one
        of ``by`` whose answer was lost (its pod unknown, e.g. a 504 from an API server just
        back) is asked for while a deletion another started is still unfinished, and so is a
        404 of ``by`` right after it finished an asked deletion with no create between (KWOK
        queues the delete stage twice when a pod changes as it is deleted: the second finds
        nothing; only one after a new create could have hit the successor), and so is a 404 of
        ``by`` logged while that deletion is unfinished (its two queued deletes ran at once:
        the one that found nothing was logged first, by microseconds)."""
        asked = {w.uid for w in self.writes if w.verb == "delete" and w.agent != by and w.uid}
        out: list[PodWrite] = []
        blind = 0  # deletes by others whose answer was lost (5xx): the pod is unknown
        unfinished: set[str] = set()  # pods others deleted that ``by`` has not finished yet
        finished = False  # ``by`` finished an asked deletion since the last create
        for w in self.writes:
            if w.verb == "create":
                # A pod of the name was created: the one whose deletion was unfinished is gone
                # (the name was free); a 404 from here on could have been aimed at this one.
                finished = False
                unfinished.clear()
            if w.verb != "delete":
                continue
            lost = w.code >= 500 or w.code == 0
            if w.agent != by:
                blind += int(lost)
                if w.code == 200 and w.uid:
                    unfinished.add(w.uid)
            elif w.code == 200 and w.uid in asked:
                unfinished.discard(w.uid)
                finished = True
            elif w.code == 200 and blind:
                blind -= 1
            elif not ((lost or w.code == 404) and unfinished) and \
                    not (w.code == 404 and finished):
                out.append(w)
        return out


def pod_histories(events: Iterable[dict[str, Any]], namespace: str,
                  extra_agents: Iterable[tuple[str, str]] = ()) -> dict[str, PodHistory]:
    """Pod name -> its creates and deletes in ``namespace``, in the order logged."""
    extra = tuple(extra_agents)
    out: dict[str, PodHistory] = {}
    for event in events:
        ref = event.get("objectRef") or {}
        verb = event.get("verb")
        if (ref.get("resource") != "pods" or ref.get("subresource")
                or ref.get("namespace") != namespace or verb not in ("create", "delete")
                or not ref.get("name")):
            continue
        body = event.get("responseObject")
        meta: dict[str, Any] = {}
        status: dict[str, Any] = {}
        if isinstance(body, dict) and body.get("kind") == "Pod":
            meta = body.get("metadata") or {}
            status = body.get("status") or {}
        write = PodWrite(
            time=str(event.get("stageTimestamp", "")),
            verb=str(verb),
            agent=agent_of(str(event.get("userAgent", "")), extra),
            code=int((event.get("responseStatus") or {}).get("code") or 0),
            uid=str(meta.get("uid", "")),
            phase=str(status.get("phase", "")),
        )
        out.setdefault(ref["name"], PodHistory(ref["name"])).writes.append(write)
    return out
