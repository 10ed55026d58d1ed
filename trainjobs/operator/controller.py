"""The Kubernetes backend of the reconcile core: informers in, planner decisions out as API calls.

One reconcile of one job: read the job and its pods/Services from the caches (plus the
expectations of what we just created or deleted), ask the pure planner what to do, write the
status if it changed (before acting, so a counted restart is durable before its pod goes),
then delete and create. Work is proportional to what changed: an event queues only its job,
and nothing is listed per event or polled per job.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from trainjobs.api.models import (
    DEFAULT_MAX_REPLICAS_PER_JOB,
    MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_OPERATOR,
    ConditionType,
    Job,
    JobSpec,
    JobStatus,
    ObjectMeta,
    OwnedObjectStatus,
)
from trainjobs.core.observed import GonePod, ObservedPod, PodPhase
from trainjobs.core.planner import KindRules, Plan, PlanInputs, PlannerSettings, plan
from trainjobs.core.render import RenderedJob, Rendering
from trainjobs.core.status import current_condition, failed, is_finished, must_write_now
from trainjobs.core.validation import ReplicaLimit, parse_job
from trainjobs.errors import PermanentError, SpecInvalid, TemporaryError
from trainjobs.kube import (
    BY_API_KIND,
    PODS,
    SERVICES,
    ApiBadRequest,
    ApiConflict,
    ApiError,
    ApiForbidden,
    ApiInvalid,
    ApiNotFound,
    Kube,
    NamespaceTerminating,
    Resource,
    gather_limited,
    job_resource,
)
from trainjobs.kube.informer import Informer, Key
from trainjobs.kueue.constants import LABEL_QUEUE_NAME
from trainjobs.kueue.reconcile import KueueSettings
from trainjobs.operator import admission, metrics
from trainjobs.operator.admission import Queueing, discover, refused
from trainjobs.operator.backoff import CreateGate
from trainjobs.operator.cache import (
    JOB_GROUPS,
    JobEntry,
    OwnedEntry,
    OwnerIndex,
    PackedJob,
    PackedRender,
    job_key,
    reduce_job,
    reduce_owned,
)
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.operator.deletions import report_wanted_deletions
from trainjobs.operator.events import EventRecorder
from trainjobs.operator.memory import Expectations, JobMemory, Parsed
from trainjobs.operator.workqueue import WorkQueue
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Framework

__all__ = ["Controller", "ControllerSettings", "watches"]

log = logging.getLogger(__name__)
T = TypeVar("T")
OWNED_SELECTOR = "trainjobs.io/job-name"


@dataclass(frozen=True)
class ControllerSettings:
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    concurrency: int = 16
    # Status changes that only update counts are written at most this often per job.
    status_coalesce_seconds: float = 1.0
    expectation_timeout: float = 120.0
    create_parallelism: int = 16
    # The plugins' sections (settings.py builds it once: file, overrides, checked).
    controller_config: Mapping[str, Any] = field(default_factory=dict)
    # Most replicas one job may have in all (--max-replicas-per-job); at most the CRDs' own.
    max_replicas_per_job: int = DEFAULT_MAX_REPLICAS_PER_JOB
    planner: PlannerSettings = field(default_factory=PlannerSettings)
    # A MultiKueue manager cluster (--multikueue-manager): no job runs here; only MultiKueue's
    # jobs get their Workload. Why: a job created here without managedBy would run in the
    # manager, whose nodes are not meant for training (docs/multikueue.md).
    multikueue_manager: bool = False
    # Kueue admission (operator/admission.py): manageJobsWithoutQueueName and its selector.
    kueue: KueueSettings = field(default_factory=KueueSettings)


class NameConflict(Exception):
    """An object the job must create exists and belongs to someone else: never adopted."""


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The controller ownerReference of an object as the API server returned it, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def state_change_line(job: Job, old: JobStatus, new: JobStatus, was: str | None = None) -> str:
    """The info line logged once per state a job enters, as written to the API server:
    `MxJob team-a/mnist: Failed (was Running): BackoffLimitExceeded: 7 restarts exceed ...`.
    What `kubectl logs deployment/...` shows of the jobs, one line each change."""
    cond = next((c for c in new.conditions if c.type.value == new.state and c.status == "True"),
                None)
    why = f": {cond.reason}: {cond.message}" if cond is not None else ""
    summary = f" [{new.replica_summary}]" if new.replica_summary else ""
    before = was or old.state or "new"
    return f"{job.kind} {job.key}: {new.state} (was {before}){why}{summary}"


class Controller:
    """Reconciles every job of every installed kind."""

    def __init__(self, kube: Kube, plugins: PluginManager, settings: ControllerSettings,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.kube = kube
        self.plugins = plugins
        self.settings = settings
        self.clock = clock
        self.queue = WorkQueue()
        # Everything remembered per job (job key -> JobMemory), forgotten whole when it goes.
        self.memory: dict[str, JobMemory] = {}
        self.owned = OwnerIndex()
        self.events = EventRecorder(kube)
        self._state_counts: Counter[tuple[str, str]] = Counter()
        self._containers = {f.name: f.container_name for f in plugins.frameworks.values()}
        self._groups = frozenset(f.group for f in plugins.frameworks.values()) or JOB_GROUPS
        # Kinds of extra objects plugins want watched (a gang scheduler's PodGroup).
        declared = plugins.owned_resources(settings.controller_config)
        self.watched = _owned_resources(plugins, settings)
        self.resources = {**BY_API_KIND, **{(r.api_version, r.kind): r for r in self.watched}}
        self.planner_settings = replace(settings.planner, with_replicas_kinds=frozenset(
            r.kind for r in declared if r.with_replicas))
        self.informers: list[Informer[Any]] = []
        namespaces: list[str | None] = list(settings.namespaces) or [None]
        # Kueue admission (operator/admission.py): on when the API server serves Workloads.
        self.kueue: Queueing | None = None
        self._namespaces = namespaces
        kinds = set(_job_resources(plugins))
        for res, ns in _watched(plugins, namespaces, self.watched):
            self.informers.append(
                Informer(kube, res, ns, reduce_job, self._on_job) if res in kinds else
                Informer(kube, res, ns, self._owned_transform(res), self._on_owned,
                         label_selector=OWNED_SELECTOR))

    def _owned_transform(self, res: Resource) -> Any:
        keep = res in self.watched
        return lambda obj: reduce_owned(obj, res.kind, self._containers, keep=keep,
                                        groups=self._groups)

    # Cache events -----------------------------------------------------------------------

    def _on_job(self, etype: str, key: Key, new: JobEntry | None, old: JobEntry | None,
                cached: bool = True) -> None:
        """A job's informer event, or (`cached` False) our own status write's answer."""
        entry = new or old
        if entry is None:
            return  # (nothing cached changed)
        jkey = job_key(entry.kind, *key)
        mem = self.memory.get(jkey)
        if new is None:
            self._forget(jkey)
            return
        if mem is not None and _not_newer(new, mem.entry):
            # Our own status write is already as new as this event (or newer): its watch
            # event, seen after we applied the write's answer, changes nothing and must not
            # cost another reconcile of the job. The same version from the informer replaces
            # the answer's copy, so that one entry per job is held, not two (5,000 jobs:
            # about 8 MB).
            if cached and new.resource_version == mem.entry.resource_version:
                mem.entry = new
            return
        if mem is not None and mem.entry.uid != new.uid:
            # Deleted and created again under the same name (a re-list saw only the new one):
            # nothing of the old job (a quota's back-off, expectations) carries over.
            self._forget(jkey)
            mem = None
        if mem is None:
            mem = self.memory[jkey] = JobMemory(new, Expectations(
                self.settings.expectation_timeout, self.clock.monotonic))
        else:
            self._count_state(mem.entry, -1)
        self._count_state(new, +1)
        mem.entry = new
        self.queue.add(jkey)

    def _namespace_changed(self, namespace: str) -> None:
        """A namespace's labels changed (Kueue's managedJobsNamespaceSelector may now select
        it or not): its jobs are reconciled again."""
        for key in self.memory:
            if key.split("/", 2)[1] == namespace:
                self.queue.add(key)

    def _forget(self, key: str) -> None:
        """The job is gone: drop everything remembered about it (one place, one object)."""
        mem = self.memory.pop(key, None)
        self.queue.drop(key)
        if mem is not None:
            self._count_state(mem.entry, -1)
        if self.kueue is not None:
            self.kueue.forget(key)

    def _count_state(self, entry: JobEntry, delta: int) -> None:
        state = str(entry.status.get("state") or "Pending")
        self._state_counts[(entry.kind, state)] += delta
        metrics.JOBS.labels(kind=entry.kind, state=state).set(
            self._state_counts[(entry.kind, state)])

    def _on_owned(self, etype: str, key: Key, new: OwnedEntry | None,
                  old: OwnedEntry | None) -> None:
        if old is not None:
            self.owned.remove(old)
        if new is not None:
            self.owned.put(new)
        entry = new or old
        if entry is None:
            # Labelled like ours but owned by no job of ours (`kubectl run --labels=...`, the
            # TensorBoard pod of a job deleted by TTL): not ours to track, nor an error.
            return
        mem = self.memory.get(entry.job)
        if mem is None:
            return  # (its job is not cached yet, or gone: nothing of it to update)
        ref = f"{entry.kind}/{entry.name}"
        if new is None and old is not None and old.pod is not None and \
                not mem.expectations.deleting(ref, old.pod.uid):
            _note_gone(mem, old)
        mem.expectations.seen(ref, new is not None,
                              new.pod.uid if new is not None and new.pod is not None else "")
        self.queue.add(entry.job)

    # Running ----------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    async def _kueue_refused(self) -> bool:
        """Whether Kueue is served but this operator may not read its objects: then the
        integration stays off, said once, rather than never becoming ready."""
        why = await refused(self.kube, self._namespaces,
                            namespaces_too=self.settings.kueue.manage_jobs_without_queue_name)
        if why is not None:
            log.warning("Kueue serves Workloads but this operator may not read them (%s): "
                        "Kueue admission is off and jobs labelled %s are not queued; grant "
                        "the RBAC (the chart's kueue.enabled) and restart the operator", why,
                        "kueue.x-k8s.io/queue-name")
        return why is not None

    async def run(self) -> None:
        """Start informers, wait for their first lists, then reconcile until cancelled."""
        if self.kueue is None and await discover(self.kube) and \
                not await self._kueue_refused():
            self.kueue = Queueing(self.kube, self._namespaces, self.events, self.queue.add,
                                  self.settings.kueue, on_namespace=self._namespace_changed)
            self.informers.extend(self.kueue.informers)
            log.info("Kueue serves Workloads: jobs labelled %s are admitted through it",
                     "kueue.x-k8s.io/queue-name")
        tasks = [asyncio.create_task(i.run(), name=repr(i)) for i in self.informers]
        try:
            await asyncio.gather(*(i.synced.wait() for i in self.informers))
            log.info("caches synced: %d jobs, %d informers", len(self.memory),
                     len(self.informers))
            await self.queue.run(self._handle, self.settings.concurrency)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.queue.close()

    async def _handle(self, key: str) -> None:
        """Reconcile one job; whatever goes wrong, the operator keeps running."""
        kind = key.split("/", 1)[0]
        started = time.perf_counter()
        try:
            await self.reconcile(key)
            self._batch_events(key)
            if self.kueue is not None and self.kueue.take_retry(key):
                # Kueue's step must run again (a flavor or priority class missing, a
                # Workload write refused with 409): the job's back-off grows, as for an
                # error, and is reset by the first pass that needs no retry.
                delay = self.queue.retry(key)
                metrics.RECONCILES.labels(result="retry").inc()
                log.debug("reconcile %s: Kueue's step runs again in %.2fs", key, delay)
            else:
                self.queue.forget(key)
                metrics.RECONCILES.labels(result="ok").inc()
        except TemporaryError as exc:
            delay = self.queue.retry(key, exc.delay)
            metrics.RECONCILES.labels(result="retry").inc()
            log.info("reconcile %s: %s; retrying in %.2fs", key, exc, delay)
        except PermanentError as exc:
            metrics.RECONCILES.labels(result="error").inc()
            log.error("reconcile %s: %s", key, exc)
        except Exception:  # a bug must not stop the other jobs
            delay = self.queue.retry(key)
            metrics.RECONCILES.labels(result="error").inc()
            log.exception("reconcile %s failed unexpectedly; retrying in %.2fs", key, delay)
        finally:
            if self.kueue is not None:
                self.kueue.take_retry(key)  # (a pass that raised asked nothing more)
            metrics.RECONCILE_DURATION.labels(kind=kind).observe(time.perf_counter() - started)

    def _batch_events(self, key: str) -> None:
        """A large job's next reconcile waits BATCH_SECONDS_PER_REPLICA a replica (at most
        MAX_BATCH_SECONDS): the events of its pods meanwhile are handled in one pass."""
        mem = self.memory.get(key)
        replicas = mem.parsed.replicas if mem is not None and mem.parsed is not None else 0
        if replicas > OFFLOAD_REPLICAS:
            self.queue.hold(key, min(MAX_BATCH_SECONDS, replicas * BATCH_SECONDS_PER_REPLICA))

    # Reconcile --------------------------------------------------------------------------

    async def _parse(self, key: str, mem: JobMemory) -> Parsed:
        """The validated job, cached per generation (validation is the costly part)."""
        entry, cached = mem.entry, mem.parsed
        if cached is not None and cached.generation == entry.generation and \
                cached.uid == entry.uid:
            return cached
        limit = ReplicaLimit(self.settings.max_replicas_per_job,
                             "this operator (--max-replicas-per-job)")
        try:
            raw = entry.raw
            framework = self.plugins.framework_for(entry.kind)
            field = framework.replica_specs_field if framework is not None else "replicaSpecs"
            offload = _requested_replicas(raw, field) > OFFLOAD_REPLICAS
            job = await _cpu(offload, functools.partial(
                parse_job, controller_config=self.settings.controller_config),
                raw, self.plugins, key, limit)
            parsed = Parsed(entry.generation, entry.uid, PackedJob.pack(job), None,
                            replicas=_replica_count(job))
        except SpecInvalid as exc:
            parsed = Parsed(entry.generation, entry.uid, None, None, exc)
        mem.parsed = parsed
        return parsed

    async def _desired(self, parsed: Parsed, job: Job, finished: bool) -> RenderedJob:
        """The objects the job should own, rendered once per generation and kept packed.

        A finished job needs none: it only cleans up, so its rendering is dropped (5,000
        finished jobs must not hold 20,000 pod manifests)."""
        if finished:
            parsed.desired = None
            return RenderedJob()
        if parsed.desired is not None and parsed.attempt == job.status.attempt:
            return parsed.desired.unpack()
        framework = self._framework(job.kind)
        rendering = Rendering(job, framework, self.plugins, backend="kubernetes",
                              controller_config=self.settings.controller_config)
        if parsed.replicas > OFFLOAD_REPLICAS:
            parsed.desired = await PackedRender.of_sliced(rendering.replicas(),
                                                          rendering.extras())
        else:
            parsed.desired = PackedRender.of(rendering.replicas(), rendering.extras())
        parsed.attempt = job.status.attempt
        return parsed.desired.unpack()

    async def reconcile(self, key: str) -> None:
        mem = self.memory.get(key)
        if mem is None:
            if self.kueue is not None:
                await self.kueue.orphans(key)  # a Workload whose job is gone
            return
        entry = mem.entry
        manager = entry.manager
        elsewhere = manager != MANAGED_BY_OPERATOR
        if not elsewhere and self.settings.multikueue_manager:
            if not mem.managed_elsewhere:
                mem.managed_elsewhere = True
                log.warning("%s is not managed by %s: this operator runs no job in a "
                            "MultiKueue manager cluster (--multikueue-manager); delete it and "
                            "create it again with spec.managedBy: %s and a %s label",
                            key, MANAGED_BY_MULTIKUEUE, MANAGED_BY_MULTIKUEUE,
                            LABEL_QUEUE_NAME)
            return
        if elsewhere:
            # Another controller's job (spec.managedBy, immutable): no pod, Service, PodGroup
            # or status write, whatever its spec says (issue 26). Said once per job. Only
            # MultiKueue's, when Kueue is served, gets what Kueue's flow expects of the job's
            # integration in a manager cluster: its Workload (created, finished, released).
            if not mem.managed_elsewhere:
                mem.managed_elsewhere = True
                log.info("%s is managed by %s (spec.managedBy): this operator leaves it alone",
                         key, manager)
            if manager != MANAGED_BY_MULTIKUEUE or self.kueue is None:
                return
        parsed = await self._parse(key, mem)
        status = JobStatus.model_validate(entry.status)
        validated = parsed.job
        if validated is None:
            if not elsewhere:
                await self._fail_invalid(mem, key, entry, status, parsed.error)
            return
        meta: dict[str, Any] = {"deletion_timestamp": entry.meta.get("deletionTimestamp")}
        # Labels and annotations change without a new generation (a queue name given to a
        # queued job, another priority class): the generation's cached parse keeps the old.
        for name in ("labels", "annotations"):
            if (entry.meta.get(name) or {}) != getattr(validated.metadata, name):
                meta[name] = dict(entry.meta.get(name) or {})
        job = validated.model_copy(update={
            "status": status, "metadata": validated.metadata.model_copy(update=meta)})
        framework = self._framework(job.kind)
        finished = is_finished(status)
        desired = await self._desired(parsed, job, finished)
        if finished:
            mem.gate = None  # it creates nothing more: no quota to wait for
            # Nor is its validated spec kept (about 9 KiB of models per job): the rare event
            # that still reaches a finished job parses it again.
            mem.parsed = None
        pods, services, extras = self._observed(key, mem, desired)
        gone, mem.gone = mem.gone, None
        together = framework.replicas_restart_together
        owed = _still_owed(mem, status.attempt, pods) if together else frozenset()
        admission = (await self.kueue.admit(key, job, framework, desired, pods)
                     if self.kueue is not None else None)
        if elsewhere:
            return  # the Workload's step only: MultiKueue runs the job in a worker cluster
        inputs = PlanInputs(pods, services, extras, gone or {},
                            create_refused=mem.gate.reason if mem.gate else "",
                            creates_held=mem.gate.wait() if mem.gate else 0.0,
                            owed=owed, admission=admission, now=self.clock.now())
        decision = await _cpu(
            len(desired.pods) > OFFLOAD_REPLICAS, functools.partial(
                plan, settings=self.planner_settings,
                kind=KindRules(together, framework.suspend_style)),
            job, desired, inputs,
            lambda outcomes: self.plugins.job_succeeded(job, framework, outcomes))
        if together:
            mem.owed = (decision.status.attempt, decision.owe) if decision.owe else None
        if self.watched:
            decision.status = self._with_object_statuses(key, entry.uid, job, decision.status)
        if self.kueue is not None:
            decision.status = self.kueue.with_workload(key, entry.uid, decision.status)
        await self._write_status(mem, key, job, decision.status)
        await self._act(mem, key, job, decision)
        if decision.requeue_after is not None:
            self.queue.add_after(key, decision.requeue_after)

    def _observed(self, key: str, mem: JobMemory, desired: RenderedJob
                  ) -> tuple[list[ObservedPod], set[str], set[str]]:
        uid = mem.entry.uid
        creating, deleting = mem.expectations.pending()
        pods: dict[str, ObservedPod] = {}
        services: set[str] = set()
        extras: set[str] = set()
        for entry in self.owned.of(key):
            if entry.owner_uid != uid:
                continue  # left over from an earlier job of the same name; GC removes it
            ref = f"{entry.kind}/{entry.name}"
            if entry.pod is not None:
                pod = entry.pod
                if ref in deleting and not pod.deleting and \
                        mem.expectations.deleting(ref, pod.uid):
                    pod = _replace_deleting(pod)
                pods[entry.name] = pod
            elif entry.kind == "Service" and entry.replica:
                services.add(entry.name)
            elif ref not in deleting:  # (a finished job's managed pod being deleted: gone)
                extras.add(ref)
        for ref in creating:
            kind, name = ref.split("/", 1)
            if kind == "Pod" and name in desired.pods and name not in pods:
                replica = desired.replicas[name]
                pods[name] = ObservedPod(name, "", replica.type_lower, replica.index,
                                         PodPhase.PENDING, created=self.clock.now())
            elif kind == "Service" and name in desired.services:
                services.add(name)
            else:
                extras.add(ref)
        return list(pods.values()), services, extras

    def _with_object_statuses(self, key: str, uid: str, job: Job,
                              status: JobStatus) -> JobStatus:
        """`status` with what the job's watched objects report (`status.ownedObjects`)."""
        reports = []
        # Only watched objects carry `obj`: picked out before sorting, as a 2,000-replica
        # job owns 4,000 pods and Services that sorting would order on every reconcile.
        watched = [(e.kind, e.name, e.obj) for e in self.owned.of(key)
                   if e.obj is not None and e.owner_uid == uid]
        for _kind, _name, obj in sorted(watched, key=lambda w: (w[0], w[1])):
            report = self.plugins.object_status(job, obj)
            if report is not None:
                reports.append(OwnedObjectStatus(kind=report.kind, name=report.name,
                                                 phase=report.phase,
                                                 message=report.message[:1000]))
        if reports == (status.owned_objects or []):
            return status
        return status.model_copy(update={"owned_objects": reports or None})

    async def _write_status(self, mem: JobMemory, key: str, job: Job, new: JobStatus) -> None:
        old = job.status
        _log_state_change(mem, job, new)
        if new == old:
            mem.pending_since = None
            return
        urgent = must_write_now(old, new)
        now = self.clock.monotonic()
        # A change of counts only (or a new job's first status) goes out status_coalesce
        # seconds after it was first seen, with whatever changed meanwhile: replicas that
        # start or end together cost one write, and a new job's first status already counts
        # the pods this reconcile creates.
        if mem.pending_since is None:
            mem.pending_since = now
        since = mem.pending_since
        wait = self.settings.status_coalesce_seconds - (now - since)
        if not urgent and wait > 0:
            self.queue.add_after(key, wait)
            return
        body = new.to_api()
        self.plugins.adjust_status(job, self._framework(job.kind), body)
        # A merge patch replaces what we send; fields we dropped must be sent as null.
        for field_name in old.to_api():
            body.setdefault(field_name, None)
        resource = self._resource(job.kind)
        try:
            updated = await self.kube.merge_patch_status(resource, job.namespace, job.name, body)
        except ApiNotFound:
            return
        except ApiError as exc:
            raise exc.temporary() from None
        mem.pending_since = None
        if self.memory.get(key) is mem and updated.get("metadata"):
            fresh = reduce_job(updated)
            self._on_job("MODIFIED", (job.namespace, job.name), fresh, mem.entry, cached=False)

    async def _act(self, mem: JobMemory, key: str, job: Job, decision: Plan) -> None:
        ns = job.namespace
        calls: list[Any] = []
        report_wanted_deletions(job, decision)
        for name in decision.delete_pods:
            calls.append(self._delete(PODS, ns, name, expected_by=mem))
        for name in decision.delete_services:
            calls.append(self._delete(SERVICES, ns, name))
        for svc in decision.create_services:
            calls.append(self._create(mem, SERVICES, ns, svc))
        for ref in decision.delete_extras:
            kind, _, name = ref.partition("/")
            res = next((r for r in self.watched if r.kind == kind), None)
            if res is not None:
                calls.append(self._delete(res, ns, name, expected_by=mem))
        for obj in decision.create_extras:
            calls.append(self._create(mem, self.resources[(obj["apiVersion"], obj["kind"])],
                                      ns, obj))
        for pod in decision.create_pods:
            calls.append(self._create(mem, PODS, ns, pod))
        if decision.delete_job:
            calls.append(self._delete(self._resource(job.kind), ns, job.name))
        results = await gather_limited(self.settings.create_parallelism, *calls)
        created = sum(1 for r in results if r == "created")
        errors = [r for r in results if isinstance(r, BaseException)]
        for event in decision.events:
            await self.events.emit(job, event.type, event.reason, event.message)
        if created:
            pods = sum(1 for p in decision.create_pods)
            await self.events.emit(job, "Normal", "Created", f"created {created} objects "
                                   f"({pods} pods) for {job.kind} {job.name}")
        for err in errors:
            if isinstance(err, NameConflict):
                await self._fail(mem, key, job.model_copy(update={"status": decision.status}),
                                 "NameConflict", str(err))
                return
        if any(isinstance(e, NamespaceTerminating) for e in errors):
            # The namespace is being deleted and the job with it: not the job's failure, and
            # nothing to retry (its deletion, or a resync, brings the next pass).
            log.debug("%s: namespace %s is being deleted, creates refused", key, ns)
            return
        quota = next((e for e in errors if isinstance(e, ApiForbidden) and e.quota_exceeded),
                     None)
        if quota is not None:
            await self._wait_for_quota(mem, key, job, quota)
            errors = [e for e in errors if not (isinstance(e, ApiForbidden) and e.retryable)]
        elif created and mem.gate is not None:
            mem.gate = None
            self.queue.add(key)  # the planner drops the QuotaExceeded reason
        for err in errors:
            if isinstance(err, ApiBadRequest | ApiForbidden | ApiInvalid) and not err.retryable:
                # The API server refuses what we built from this job: it cannot run as is.
                # Fail from the status this reconcile just wrote (Created, startTime, replica
                # counts), not the one it started from.
                await self._fail(mem, key, job.model_copy(update={"status": decision.status}),
                                 "CreateFailed", str(err))
                return
        if errors:
            first = errors[0]
            raise TemporaryError(f"{len(errors)} API calls failed, first: {first}") from None

    async def _wait_for_quota(self, mem: JobMemory, key: str, job: Job,
                              err: ApiForbidden) -> None:
        """A ResourceQuota refused a create: not a failure, the quota may free up or be
        raised. Hold the job's creates with a growing back-off and say why, on the job (the
        planner's Created reason QuotaExceeded and pendingReason) and in an event."""
        if mem.gate is None:
            mem.gate = CreateGate(clock=self.clock.monotonic)
        delay = mem.gate.refuse(f"QuotaExceeded: {err.message}", err.retry_after)
        self.queue.add_after(key, delay)
        await self.events.emit(job, "Warning", "QuotaExceeded",
                               f"ResourceQuota {err.quota} refuses the job's pods, waiting for "
                               f"room (next try in {delay:.0f}s): {err.message}")

    async def _create(self, mem: JobMemory, res: Resource, ns: str,
                      body: dict[str, Any]) -> str:
        ref = f"{res.kind}/{body['metadata']['name']}"
        expected = res.kind in ("Pod", "Service") or res in self.watched
        if expected:  # before the request: its watch event may come before its answer
            mem.expectations.expect_create(ref)
        try:
            await self.kube.create(res, ns, body)
        except ApiConflict:  # exists already (e.g. created before an operator restart)
            mem.expectations.create_failed(ref)
            await self._check_owner(res, ns, body)
            mem.expectations.seen(ref, True)
            return "exists"
        except BaseException:
            mem.expectations.create_failed(ref)
            raise
        return "created"

    async def _check_owner(self, res: Resource, ns: str, body: dict[str, Any]) -> None:
        """An object of the name we create exists: it counts as created only when this job
        controls it (the ownerReference's uid). One of an earlier job of the same kind and
        name is waiting for the garbage collector: retry. Anything else (a job of another
        kind with the same name, an object nobody owns) is a conflict this job cannot
        resolve: raise `NameConflict`, naming the owner."""
        meta = body["metadata"]
        ours = meta["ownerReferences"][0]
        try:
            existing = await self.kube.get(res, ns, meta["name"])
        except ApiNotFound:
            raise TemporaryError(f"{res.kind} {meta['name']} was deleted as we created it; "
                                 "creating it again") from None
        owner = controller_of(existing)
        if owner is not None and owner.get("uid") == ours["uid"]:
            return
        if owner is not None and (owner.get("kind"), owner.get("name")) == (ours["kind"],
                                                                            ours["name"]):
            raise TemporaryError(f"{res.kind} {meta['name']} of an earlier {ours['kind']} "
                                 f"{ours['name']} is still there; waiting for the garbage "
                                 "collector")
        who = (f"{owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')})"
               if owner is not None else "no controller (not created by trainjobs for this job)")
        raise NameConflict(f"{res.kind} {meta['name']} already exists in namespace {ns} and "
                           f"is controlled by {who}; {ours['kind']} {ours['name']} needs that "
                           "name: delete or rename one of them")

    async def _delete(self, res: Resource, ns: str, name: str,
                      expected_by: JobMemory | None = None) -> str:
        """Delete one object; with `expected_by` (a job's memory), count it as going for that job
        until the cache shows it so (expected before the request is sent, so a fast watch
        cannot beat it), or until the delete fails: then it must be deleted again."""
        ref = f"{res.kind}/{name}"
        if expected_by is not None:
            self._expect_delete(expected_by, ns, ref)
        try:
            await self.kube.delete(res, ns, name)
        except ApiNotFound:
            return "gone"
        except ApiError:
            if expected_by is not None:
                expected_by.expectations.seen(ref, exists=False)
            raise
        return "deleted"

    def _expect_delete(self, mem: JobMemory, ns: str, ref: str) -> None:
        """Expect the deletion of `ref` as the caches show it now: of the object they hold
        (its uid), or of one we created that they have not shown yet (its uid not known).
        When they hold neither, they have shown it gone already (its DELETED event came
        between the plan and this request) and nothing is expected: an expectation would
        wait for an event that came, and take the next object of that name for the one
        deleted (issue 36)."""
        job = job_key(mem.entry.kind, ns, str(mem.entry.meta.get("name", "")))
        cached = self.owned.get(job, ref)
        if cached is not None:
            mem.expectations.expect_delete(ref, cached.pod.uid if cached.pod is not None else "")
        elif ref in mem.expectations.creates:
            mem.expectations.expect_delete(ref)

    async def _fail(self, mem: JobMemory, key: str, job: Job, reason: str,
                    message: str) -> None:
        status = failed(job.status, reason, message, self.clock.now(),
                        job.metadata.generation)
        await self._write_status(mem, key, job, status)
        await self.events.emit(job, "Warning", reason, message[:1000])

    async def _fail_invalid(self, mem: JobMemory, key: str, entry: JobEntry, status: JobStatus,
                            error: SpecInvalid | None) -> None:
        if current_condition(status) is ConditionType.FAILED:
            return  # (it failed already: an invalid spec is written once)
        message = "; ".join(str(e) for e in error.errors) if error else "invalid job"
        job = Job(apiVersion=entry.api_version, kind=entry.kind,
                  metadata=ObjectMeta.model_validate(entry.meta),
                  spec=JobSpec.model_construct(replica_specs={}), status=status)
        await self._fail(mem, key, job, "InvalidSpec", message)

    def _framework(self, kind: str) -> Framework:
        """The framework of a kind we watch (a job of another kind never reaches here; if one
        did, that is an error of this job alone, never an assertion)."""
        framework = self.plugins.framework_for(kind)
        if framework is None:
            raise PermanentError(f"no installed plugin serves the kind {kind!r}")
        return framework

    def _resource(self, kind: str) -> Resource:
        framework = self._framework(kind)
        return job_resource(framework.kind, framework.plural, framework.group,
                            framework.version)


def watches(plugins: PluginManager, settings: ControllerSettings) -> int:
    """The most watches a Controller holds open (one per informer, Kueue's included): the
    operator's connection pool must hold them all besides its requests (kube.connect). It
    counts the very lists the informers are built from, before there is a client to build
    them with."""
    namespaces: list[str | None] = list(settings.namespaces) or [None]
    return len(_watched(plugins, namespaces, _owned_resources(plugins, settings))) + \
        len(admission.watched(namespaces, settings.kueue.manage_jobs_without_queue_name))


def _job_resources(plugins: PluginManager) -> list[Resource]:
    return [job_resource(fw.kind, fw.plural, fw.group, fw.version)
            for fw in plugins.frameworks.values()]


def _owned_resources(plugins: PluginManager, settings: ControllerSettings) -> list[Resource]:
    """The kinds of extra objects plugins want watched (a gang scheduler's PodGroup)."""
    return [Resource.of(r.api_version, r.kind, r.plural)
            for r in plugins.owned_resources(settings.controller_config)]


def _watched(plugins: PluginManager, namespaces: Sequence[str | None],
             owned: Sequence[Resource]) -> list[tuple[Resource, str | None]]:
    """The controller's own informers, in order (one watch each): per watched namespace
    (None: all), every kind's jobs, then pods, Services and the `owned` kinds."""
    return [(res, ns) for ns in namespaces
            for res in (*_job_resources(plugins), PODS, SERVICES, *owned)]


def _note_gone(mem: JobMemory, entry: OwnedEntry) -> None:
    """A replica pod that had started went and this operator did not delete it: keep what it
    last showed of why (a DisruptionTarget condition) for the planner's ReplicaLost event.
    Only a hint: whether it was lost the planner decides from the status.

    A pod last seen Pending never ran: its going is no loss (docs/api.md), it is recreated
    silently. kube-scheduler deletes a preemption victim by name, with no uid precondition,
    and may do so again after the victim is gone (a second preemptor that chose the same
    victim): that DELETE takes the victim's replacement, which waits Pending."""
    if mem.entry.uid != entry.owner_uid or entry.pod is None or \
            entry.pod.phase is PodPhase.PENDING:
        return
    cause = entry.pod.disruption or "deleted by someone other than the operator"
    if mem.gone is None:
        mem.gone = {}
    mem.gone[entry.name] = GonePod(entry.pod.uid, cause, entry.pod.attempt)


def _still_owed(mem: JobMemory, attempt: int, pods: list[ObservedPod]) -> frozenset[str]:
    """The pods of `attempt` this operator decided to create and has not seen yet."""
    owed_attempt, names = mem.owed or (-1, frozenset())
    if owed_attempt != attempt:
        return frozenset()
    return names - {p.name for p in pods}


#: A job of more than OFFLOAD_REPLICAS replicas is reconciled at most once per this many
#: seconds a replica (2,000 replicas: 0.2 s). Why: each of its reconciles reads all its pods
#: (milliseconds of CPU per thousand), and its pods change all the time while they start or
#: end, so reconciling it once per event kept a worker thread and the loop busy, stalling
#: every other job's events (issue 28.4, bench.bigjob). Small jobs are never held.
BATCH_SECONDS_PER_REPLICA = 1e-4
#: kube-controller-manager's Job controller batches every Job's pod events for 1 s
#: (syncJobBatchPeriod): no job waits longer here.
MAX_BATCH_SECONDS = 1.0


def _log_state_change(mem: JobMemory, job: Job, new: JobStatus) -> None:
    """One info line per state the job enters, when it is decided (a coalesced status write
    may carry Created and Running together: both are logged). The state is remembered only
    while the decided state is ahead of the cache."""
    old = job.status
    if new.state and new.state != (mem.logged_state or old.state):
        log.info("%s", state_change_line(job, old, new, mem.logged_state))
        mem.logged_state = new.state
    if new.state == old.state:
        mem.logged_state = None


#: A job with more replicas is validated and planned in a worker thread, and rendered on the
#: loop a chunk at a time (PackedRender.of_sliced): its CPU work (tens of milliseconds per
#: hundred replicas, and a reconcile that creates its pods decodes all their manifests) must
#: not stall the event loop that serves every other job. The GIL lets the loop run every few
#: milliseconds while a thread computes (sys.getswitchinterval()), but makes it wait after
#: each socket call: the longest work, the rendering, stays on the loop in slices.
OFFLOAD_REPLICAS = 100


async def _cpu(offload: bool, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, in a worker thread when `offload`, else here (a thread hop costs more
    than a small job's whole reconcile)."""
    if offload:
        result: T = await asyncio.to_thread(fn, *args)
        return result
    return fn(*args)


def _replica_count(job: Job) -> int:
    """The replicas a validated job asks for."""
    return sum(r.replicas for r in job.spec.replica_specs.values())


def _requested_replicas(raw: dict[str, Any], field: str) -> int:
    """The replicas a job not yet validated asks for under its kind's replica-specs `field`
    (`replicaSpecs`, or a plugin kind's alias such as Kubeflow's `tfReplicaSpecs`), counting
    only what is an int: it decides where the validation runs, before the spec is trusted."""
    specs = (raw.get("spec") or {}).get(field)
    if not isinstance(specs, dict):
        return 0
    counts = [s.get("replicas", 1) for s in specs.values() if isinstance(s, dict)]
    return sum(c for c in counts if isinstance(c, int))


def _not_newer(new: JobEntry, current: JobEntry) -> bool:
    """Whether `new` is the same version of the same object as `current`, or an older one.

    resourceVersions are opaque by contract, but the API server's are etcd revisions; when
    both are integers a smaller one is older (client-go's mutation cache relies on the same),
    and an equal one is the same object.
    """
    if new.uid != current.uid:
        return False
    try:
        return int(new.resource_version) <= int(current.resource_version)
    except ValueError:
        return False


def _replace_deleting(pod: ObservedPod) -> ObservedPod:
    return replace(pod, deleting=True)
