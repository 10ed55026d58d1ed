"""The independent watcher: when each pod, Service, job (and ConfigMap) was first seen, when
pods first ran and ended, when jobs first reached each state, and how many versions of each
job's status the watch showed.

Why independent of the operator: the benchmark times the operator from outside, through its
own connection (`bench.api.Api`), as a user would see it. It follows each resource with the
transport's one list-then-watch loop (`trainjobs.kube.listwatch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.api import Api
from bench.jobs import CEILING_JOB_LABEL, JOB_LABEL, KUBEFLOW_JOB_LABEL
from bench.report import log
from trainjobs.kube import PODS, SERVICES, Resource, job_resource
from trainjobs.kube.listwatch import LISTED, SYNCED, Backoff, ListWatch

CONFIGMAPS = Resource("ConfigMap", "configmaps")


@dataclass
class PodTrack:
    job: str
    seen: float
    phase: str = ""
    running: float | None = None
    ended: float | None = None


@dataclass
class JobTrack:
    seen: float
    state: str = ""
    states: dict[str, float] = field(default_factory=dict)  # first time seen in each state
    versions: int = 0  # resourceVersions seen (1 + every write the watch showed)
    log: list[tuple[float, str, str]] | None = None  # (time, state, status summary)


@dataclass
class NsCounts:
    pods: int = 0
    services: int = 0
    pods_running: int = 0  # pods seen Running (or past it) at least once
    pods_ended: int = 0
    jobs: int = 0
    jobs_in: Counter[str] = field(default_factory=Counter)  # jobs ever seen in a state
    # (time, pods+services seen so far), one point per new object: the "created" curve.
    created_series: list[tuple[float, int]] = field(default_factory=list)
    running_series: list[tuple[float, int]] = field(default_factory=list)


class Watcher:
    """Watches pods, Services and TfJobs of some namespaces and records when each object was
    first seen, when pods first ran and ended, when jobs first reached each state.

    Times are `time.perf_counter()` of the moment the event was read. Waiters are cheap:
    conditions are evaluated on per-namespace counters, not by scanning objects.
    """

    def __init__(self, api: Api, namespaces: Sequence[str], *, job_plural: str = "tfjobs",
                 keep_series: bool = True, configmap_namespaces: Sequence[str] = (),
                 job_group: str = "trainjobs.io") -> None:
        self.api = api
        self.namespaces = list(namespaces)
        self.configmap_namespaces = list(configmap_namespaces)
        self.configmaps: dict[tuple[str, str], float] = {}  # first seen
        self.job_plural = job_plural
        self.job_group = job_group
        self.keep_series = keep_series
        self.pods: dict[tuple[str, str], PodTrack] = {}
        self.services: dict[tuple[str, str], float] = {}
        self.jobs: dict[tuple[str, str], JobTrack] = {}
        self.counts: dict[str, NsCounts] = {ns: NsCounts() for ns in namespaces}
        self.job_pods: Counter[tuple[str, str]] = Counter()
        self.job_pods_full: dict[tuple[str, str], float] = {}
        self.pods_per_job = 0  # set by the bench: when a job's pods reach it, time recorded
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending_notify = False
        self.pod_hooks: dict[tuple[str, str], Callable[[PodTrack, str], None]] = {}
        self.job_hooks: dict[tuple[str, str], Callable[[JobTrack, str, float], None]] = {}
        self.synced = asyncio.Event()
        self.log_jobs = 0  # the first N jobs seen keep a log of their status versions
        self.log_names: set[str] = set()
        self._synced_count = 0
        self.events = 0

    def start(self) -> None:
        jobs = job_resource("TfJob", self.job_plural, self.job_group,
                            "v1" if self.job_group != "trainjobs.io" else "v1alpha1")
        for ns in self.namespaces:
            for kind, res in (("pod", PODS), ("svc", SERVICES), ("job", jobs)):
                self._tasks.append(asyncio.create_task(self._run(kind, ns, res)))
        for ns in self.configmap_namespaces:
            self._tasks.append(asyncio.create_task(self._run("cm", ns, CONFIGMAPS)))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, kind: str, ns: str, resource: Resource) -> None:
        follow = ListWatch(self.api, resource, ns, watch_timeout=3600,
                           backoff=Backoff(first=0.2, most=0.2))
        first = True
        while True:
            try:
                async with contextlib.aclosing(follow.events()) as events:
                    async for event in events:
                        if event.type == SYNCED and first:
                            first = False
                            self._synced_count += 1
                            if self._synced_count == 3 * len(self.namespaces) + \
                                    len(self.configmap_namespaces):
                                self.synced.set()
                        elif event.type == LISTED:
                            self._handle(kind, ns, "ADDED", event.object)
                        elif event.type in ("ADDED", "MODIFIED", "DELETED"):
                            self._handle(kind, ns, event.type, event.object)
            except (ValueError, KeyError) as exc:  # not from the API: a bug in _handle
                log(f"watcher {kind}/{ns}: {type(exc).__name__} {exc}; again")
                follow.resource_version = ""
                await asyncio.sleep(0.2)

    def _handle(self, kind: str, ns: str, etype: str, obj: dict[str, Any]) -> None:
        now = time.perf_counter()
        self.events += 1
        meta = obj.get("metadata") or {}
        key = (ns, meta.get("name", ""))
        c = self.counts.setdefault(ns, NsCounts())
        if kind == "pod":
            self._pod(c, key, etype, meta, obj.get("status") or {}, now)
        elif kind == "cm":
            if key not in self.configmaps and etype != "DELETED":
                self.configmaps[key] = now
        elif kind == "svc":
            if key not in self.services and etype != "DELETED":
                self.services[key] = now
                c.services += 1
                if self.keep_series:
                    c.created_series.append((now, c.pods + c.services))
        else:
            self._job(c, key, etype, obj, now)
        self._notify()

    def _pod(self, c: NsCounts, key: tuple[str, str], etype: str, meta: dict[str, Any],
             status: dict[str, Any], now: float) -> None:
        track = self.pods.get(key)
        if track is None:
            if etype == "DELETED":
                return
            labels = meta.get("labels") or {}
            job = (labels.get(JOB_LABEL) or labels.get(KUBEFLOW_JOB_LABEL)
                   or labels.get(CEILING_JOB_LABEL) or "")
            track = self.pods[key] = PodTrack(job, now)
            c.pods += 1
            if self.keep_series:
                c.created_series.append((now, c.pods + c.services))
            jkey = (key[0], job)
            self.job_pods[jkey] += 1
            if self.pods_per_job and self.job_pods[jkey] == self.pods_per_job:
                self.job_pods_full[jkey] = now
        phase = status.get("phase") or "Pending"
        if etype == "DELETED":
            phase = "Deleted"
        if phase == track.phase:
            return
        track.phase = phase
        if phase in ("Running", "Succeeded", "Failed") and track.running is None:
            track.running = now
            c.pods_running += 1
            if self.keep_series:
                c.running_series.append((now, c.pods_running))
        if phase in ("Succeeded", "Failed") and track.ended is None:
            track.ended = now
            c.pods_ended += 1
        hook = self.pod_hooks.get(key)
        if hook is not None:
            hook(track, phase)

    def _job(self, c: NsCounts, key: tuple[str, str], etype: str, obj: dict[str, Any],
             now: float) -> None:
        if etype == "DELETED":
            return
        track = self.jobs.get(key)
        if track is None:
            track = self.jobs[key] = JobTrack(now)
            c.jobs += 1
            if len(self.jobs) <= self.log_jobs or key[1] in self.log_names:
                track.log = []
        track.versions += 1
        status = obj.get("status") or {}
        if track.log is not None:
            counts = ";".join(f"{t}:{'/'.join(str(v.get(f, 0)) for f in ('active', 'succeeded'))}"
                              for t, v in sorted((status.get("replicaStatuses") or {}).items()))
            track.log.append((now, status.get("state") or "", counts))
        state = status.get("state") or ""
        if not state:
            true = [x["type"] for x in status.get("conditions") or []
                    if x.get("status") == "True"]
            state = true[-1] if true else ""
        if state == track.state:
            return
        track.state = state
        if state and state not in track.states:
            track.states[state] = now
            c.jobs_in[state] += 1
        hook = self.job_hooks.get(key)
        if hook is not None:
            hook(track, state, now)

    def _notify(self) -> None:
        if self._pending_notify:
            return
        self._pending_notify = True
        asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._pending_notify = False

        async def go() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(go())

    async def wait(self, check: Callable[[], bool], what: str, timeout: float) -> float:
        """Wait until `check()` holds; returns perf_counter() of the event that made it so
        (approximately: the moment the waiter saw it, right after that event)."""
        deadline = time.perf_counter() + timeout
        async with self._changed:
            while not check():
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), min(left, 5.0))
        return time.perf_counter()

