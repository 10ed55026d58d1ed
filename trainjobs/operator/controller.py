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
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from trainjobs.api.models import (
    MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_OPERATOR,
    ConditionType,
    Job,
    JobSpec,
    JobStatus,
    ObjectMeta,
    OwnedObjectStatus,
)
from trainjobs.core.observed import ObservedPod
from trainjobs.core.planner import KindRules, Plan, PlanInputs, plan
from trainjobs.core.render import LABEL_JOB_NAME, RenderedJob, Rendering, render_key
from trainjobs.core.status import current_condition, failed, is_finished
from trainjobs.core.validation import ReplicaLimit, parse_job
from trainjobs.errors import PermanentError, SpecInvalid, TemporaryError
from trainjobs.kube import (
    BY_API_KIND,
    ApiForbidden,
    Kube,
    Resource,
    job_resource,
)
from trainjobs.kube.informer import Informer, Key
from trainjobs.kueue.constants import LABEL_QUEUE_NAME
from trainjobs.operator import metrics
from trainjobs.operator.actuation import Actuator
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
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.events import EventRecorder
from trainjobs.operator.gates import FACTORIES, GateContext, GateFactory, Gates
from trainjobs.operator.large_jobs import (
    BATCH_SECONDS_PER_REPLICA,
    MAX_BATCH_SECONDS,
    OFFLOAD_REPLICAS,
    on_cpu,
    replica_count,
    requested_replicas,
)
from trainjobs.operator.memory import Expectations, JobMemory, Parsed
from trainjobs.operator.observe import note_gone, observed, still_owed
from trainjobs.operator.result import DONE, Result
from trainjobs.operator.status_write import StatusWriter
from trainjobs.operator.watches import informed, job_resources, owned_resources, watches
from trainjobs.operator.workqueue import WorkQueue
from trainjobs.plugin.manager import PluginManager
from trainjobs.plugin.types import Framework

__all__ = ["Controller", "ControllerSettings", "watches"]

log = logging.getLogger(__name__)
T = TypeVar("T")
OWNED_SELECTOR = LABEL_JOB_NAME  # every object a job owns carries it


class Controller:
    """Reconciles every job of every installed kind."""

    def __init__(self, kube: Kube, plugins: PluginManager, settings: ControllerSettings,
                 clock: Clock = SYSTEM_CLOCK,
                 gate_factories: Sequence[GateFactory] = FACTORIES) -> None:
        self.kube = kube
        self.plugins = plugins
        self.settings = settings
        self.clock = clock
        self.queue = WorkQueue()
        # Everything remembered per job (job key -> JobMemory), forgotten whole when it goes.
        self.memory: dict[str, JobMemory] = {}
        self.owned = OwnerIndex()
        self.events = EventRecorder(kube, clock)
        self._state_counts: Counter[tuple[str, str]] = Counter()
        self._containers = {f.name: f.container_name for f in plugins.frameworks.values()}
        self._groups = frozenset(f.group for f in plugins.frameworks.values()) or JOB_GROUPS
        # Kinds of extra objects plugins want watched (a gang scheduler's PodGroup).
        declared = plugins.owned_resources(settings.controller_config)
        self.watched = owned_resources(plugins, settings)
        self.resources = {**BY_API_KIND, **{(r.api_version, r.kind): r for r in self.watched}}
        self.actuator = Actuator(kube, self.owned, self.watched, self.resources,
                                 settings.create_parallelism)
        self.writer = StatusWriter(kube, plugins, settings.status_coalesce_seconds, clock,
                                   settings.progress_status_interval,
                                   settings.progress_status_writes_per_second)
        self.planner_settings = replace(settings.planner, with_replicas_kinds=frozenset(
            r.kind for r in declared if r.with_replicas))
        self.informers: list[Informer[Any]] = []
        namespaces: list[str | None] = list(settings.namespaces) or [None]
        # What may hold a job's pods back (operator/gates): started in `run`, each when it is
        # served here; none started, every job runs as without them.
        self.gate_factories = tuple(gate_factories)
        self.gates = Gates()
        self._namespaces = namespaces
        kinds = set(job_resources(plugins))
        for res, ns in informed(plugins, namespaces, self.watched):
            self.informers.append(
                Informer(kube, res, ns, reduce_job, self._on_job) if res in kinds else
                Informer(kube, res, ns, self._owned_transform(res), self._on_owned,
                         label_selector=OWNED_SELECTOR))

    def _owned_transform(self, res: Resource) -> Any:
        keep = res in self.watched
        return lambda obj: reduce_owned(obj, res.kind, self._containers, keep=keep,
                                        groups=self._groups)

    # Cache events -----------------------------------------------------------------------

    def _on_job(self, etype: str, key: Key, new: JobEntry | None, old: JobEntry | None) -> None:
        """A job's informer event: remembered, and its job queued when it says more than what
        this operator knows already."""
        entry = new or old
        if entry is None:
            return  # (nothing cached changed)
        jkey = job_key(entry.kind, *key)
        if new is None:
            self._forget(jkey)
            return
        if self._remember(jkey, new, cached=True):
            self.queue.add(jkey)

    def _remember(self, jkey: str, new: JobEntry, cached: bool) -> bool:
        """Keep `new` as the job's entry — from the informer (`cached`) or our own status
        write's answer — unless what is kept is as new; whether it was newer."""
        mem = self.memory.get(jkey)
        if mem is not None and _not_newer(new, mem.entry):
            # Our own status write is already as new as this event (or newer): its watch
            # event, seen after we applied the write's answer, changes nothing and must not
            # cost another reconcile of the job. The same version from the informer replaces
            # the answer's copy, so that one entry per job is held, not two (5,000 jobs:
            # about 8 MB).
            if cached and new.resource_version == mem.entry.resource_version:
                mem.entry = new
            return False
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
        return True

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
        self.gates.forget(key)

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
            note_gone(mem, old)
        mem.expectations.seen(ref, new is not None,
                              new.pod.uid if new is not None and new.pod is not None else "")
        self.queue.add(entry.job)

    # Running ----------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    async def start_gates(self) -> None:
        """Start every gate served here (operator/gates) and add its caches to ours."""
        context = GateContext(self.kube, self._namespaces, self.settings, self.events,
                              self.queue.add, self._namespace_changed, self.queue.add_after,
                              self.clock, self.plugins)
        started = [gate for factory in self.gate_factories
                   if (gate := await factory.start(context)) is not None]
        self.gates = Gates(started)
        self.informers.extend(self.gates.informers)

    async def run(self) -> None:
        """Start the gates, informers and the Event poster, wait for the caches' first lists,
        then reconcile until cancelled."""
        await self.start_gates()
        tasks = [asyncio.create_task(i.run(), name=repr(i)) for i in self.informers]
        poster = asyncio.create_task(self.events.run(), name="event poster")
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
            await self.events.close()
            poster.cancel()
            await asyncio.gather(poster, return_exceptions=True)

    async def _handle(self, key: str) -> None:
        """Reconcile one job and requeue it as its result says; whatever goes wrong, the
        operator keeps running."""
        kind = key.split("/", 1)[0]
        started = self.clock.monotonic()
        try:
            self._requeue(key, await self.reconcile(key))
        except TemporaryError as exc:
            delay = self._requeue(key, _AGAIN, at_least=exc.delay)
            log.info("reconcile %s: %s; retrying in %.2fs", key, exc, delay)
        except PermanentError as exc:
            metrics.RECONCILES.labels(result="error").inc()
            log.error("reconcile %s: %s", key, exc)
        except Exception:  # a bug must not stop the other jobs
            delay = self._requeue(key, _AGAIN, outcome="error")
            log.exception("reconcile %s failed unexpectedly; retrying in %.2fs", key, delay)
        finally:
            metrics.RECONCILE_DURATION.labels(kind=kind).observe(
                self.clock.monotonic() - started)

    def _requeue(self, key: str, result: Result, at_least: float | None = None,
                 outcome: str = "") -> float | None:
        """The one place a pass's result reaches the work queue; the delay of a back-off.

        With `backoff` the job's back-off grows (a step that must run again: a flavor or
        priority class missing, a write refused with 409, an API error; not before
        `at_least`, an API server's Retry-After) and is reset by the first pass that needs
        none. `requeue_after` is a look of its own: the sooner one wins. `outcome` names the
        pass in `trainjobs_reconciles_total` (default: retry or ok)."""
        delay = None
        if result.backoff:
            delay = self.queue.retry(key, at_least)
            metrics.RECONCILES.labels(result=outcome or "retry").inc()
            log.debug("reconcile %s: again in %.2fs", key, delay)
        else:
            self.queue.forget(key)
            metrics.RECONCILES.labels(result="ok").inc()
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)
        if result.hold > 0:
            self.queue.hold(key, result.hold)
        return delay

    def _batch_period(self, mem: JobMemory) -> Result:
        """A large job's next reconcile waits BATCH_SECONDS_PER_REPLICA a replica (at most
        MAX_BATCH_SECONDS): the events of its pods meanwhile are handled in one pass."""
        replicas = mem.parsed.replicas if mem.parsed is not None else 0
        if replicas > OFFLOAD_REPLICAS:
            return Result(hold=min(MAX_BATCH_SECONDS, replicas * BATCH_SECONDS_PER_REPLICA))
        return DONE

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
            offload = requested_replicas(raw, field) > OFFLOAD_REPLICAS
            job = await on_cpu(offload, functools.partial(
                parse_job, controller_config=self.settings.controller_config,
                progress=self.settings.progress_endpoint),
                raw, self.plugins, key, limit)
            parsed = Parsed(entry.generation, entry.uid, PackedJob.pack(job), None,
                            replicas=replica_count(job))
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
        if parsed.desired is not None and parsed.rendered_for == render_key(job):
            return parsed.desired.unpack()
        framework = self._framework(job.kind)
        rendering = Rendering(job, framework, self.plugins, backend="kubernetes",
                              controller_config=self.settings.controller_config,
                              progress=self.settings.progress_endpoint)
        if parsed.replicas > OFFLOAD_REPLICAS:
            parsed.desired = await PackedRender.of_sliced(rendering.replicas(),
                                                          rendering.extras())
        else:
            parsed.desired = PackedRender.of(rendering.replicas(), rendering.extras())
        parsed.rendered_for = render_key(job)
        return parsed.desired.unpack()

    async def reconcile(self, key: str) -> Result:
        """One pass over the job of `key`: what it asks of the work queue is returned (see
        `Result`); nothing here writes the queue."""
        mem = self.memory.get(key)
        if mem is None:
            return await self.gates.job_gone(key)  # (e.g. a Workload whose job is gone)
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
            return DONE
        if elsewhere:
            # Another controller's job (spec.managedBy, immutable): no pod, Service, PodGroup
            # or status write, whatever its spec says (issue 26). Said once per job. Only a
            # gate that still decides for it runs (MultiKueue's, when Kueue is served, keeps
            # its Workload in a manager cluster: created, finished, released).
            if not mem.managed_elsewhere:
                mem.managed_elsewhere = True
                log.info("%s is managed by %s (spec.managedBy): this operator leaves it alone",
                         key, manager)
            if not self.gates.watches_managed_by(manager):
                return DONE
        parsed = await self._parse(key, mem)
        status = JobStatus.model_validate(entry.status)
        validated = parsed.job
        if validated is None:
            if elsewhere:
                return DONE
            return await self._fail_invalid(mem, key, entry, status, parsed.error)
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
        owed = still_owed(mem, status.attempt, pods) if together else frozenset()
        verdict = await self.gates.decide(key, job, framework, desired, pods)
        if elsewhere:
            return verdict.result  # the gates' step only: the job runs elsewhere
        inputs = PlanInputs(pods, services, extras, gone or {},
                            create_refused=mem.gate.reason if mem.gate else "",
                            creates_held=mem.gate.wait() if mem.gate else 0.0,
                            owed=owed, admission=verdict.admission, now=self.clock.now(),
                            **verdict.inputs)  # type: ignore[arg-type]
        decision = await on_cpu(
            len(desired.pods) > OFFLOAD_REPLICAS, functools.partial(
                plan, settings=self.planner_settings,
                kind=KindRules(together, framework.suspend_style)),
            job, desired, inputs,
            lambda outcomes: self.plugins.job_succeeded(job, framework, outcomes))
        if together:
            mem.owed = (decision.status.attempt, decision.owe) if decision.owe else None
        if self.watched:
            decision.status = self._with_object_statuses(key, entry.uid, job, decision.status)
        decision.status = self.gates.annotate(key, entry.uid, decision.status)
        result = verdict.result.merge(await self._write_status(mem, key, job, decision.status))
        result = result.merge(await self._carry_out(mem, key, job, decision))
        if decision.requeue_after is not None:
            result = result.merge(Result.after(decision.requeue_after))
        return result.merge(self._batch_period(mem))

    def _observed(self, key: str, mem: JobMemory, desired: RenderedJob
                  ) -> tuple[list[ObservedPod], set[str], set[str]]:
        """What the planner sees of the job: see `observe.observed`."""
        return observed(self.owned.of(key), mem, desired, self.clock.now())

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

    async def _write_status(self, mem: JobMemory, key: str, job: Job, new: JobStatus) -> Result:
        """Write `new` (`StatusWriter`): a coalesced change comes back when its wait is over;
        the written entry — the API server's answer — becomes the job's (`_remember`), and
        the job is looked at again with it."""
        write = await self.writer.write(mem, job, self._framework(job.kind),
                                        self._resource(job.kind), new)
        if write.wait is not None:
            return Result.after(write.wait)
        if write.written is not None and self.memory.get(key) is mem and \
                self._remember(key, write.written, cached=False):
            return Result.after(0)
        return DONE

    async def _carry_out(self, mem: JobMemory, key: str, job: Job, decision: Plan) -> Result:
        """Act on the plan, post its Events, and decide on what the API server answered: a
        name another owner holds or a create refused as invalid fails the job (from the status
        this pass just wrote: Created, startTime, replica counts); a full ResourceQuota holds
        the creates with a back-off; other errors are retried."""
        done = await self.actuator.act(mem, job, self._resource(job.kind), decision)
        for event in decision.events:
            self.events.post(job, event.type, event.reason, event.message)
        if done.created:
            pods = sum(1 for p in decision.create_pods)
            self.events.post(job, "Normal", "Created", f"created {done.created} objects "
                             f"({pods} pods) for {job.kind} {job.name}")
        as_decided = job.model_copy(update={"status": decision.status})
        if done.conflict is not None:
            return await self._fail(mem, key, as_decided, "NameConflict", str(done.conflict))
        if done.namespace_terminating:
            # The namespace is being deleted and the job with it: not the job's failure, and
            # nothing to retry (its deletion, or a resync, brings the next pass).
            log.debug("%s: namespace %s is being deleted, creates refused", key, job.namespace)
            return DONE
        result = DONE
        if done.quota is not None:
            result = self._wait_for_quota(mem, job, done.quota)
        elif done.created and mem.gate is not None:
            mem.gate = None
            result = Result.after(0)  # the planner drops the QuotaExceeded reason
        if done.rejected is not None:
            return await self._fail(mem, key, as_decided, "CreateFailed", str(done.rejected))
        if done.failed:
            raise TemporaryError(f"{len(done.failed)} API calls failed, first: "
                                 f"{done.failed[0]}") from None
        return result

    def _wait_for_quota(self, mem: JobMemory, job: Job, err: ApiForbidden) -> Result:
        """A ResourceQuota refused a create: not a failure, the quota may free up or be
        raised. Hold the job's creates with a growing back-off and say why, on the job (the
        planner's Created reason QuotaExceeded and pendingReason) and in an event."""
        if mem.gate is None:
            mem.gate = CreateGate(clock=self.clock.monotonic)
        delay = mem.gate.refuse(f"QuotaExceeded: {err.message}", err.retry_after)
        self.events.post(job, "Warning", "QuotaExceeded",
                         f"ResourceQuota {err.quota} refuses the job's pods, waiting for "
                         f"room (next try in {delay:.0f}s): {err.message}")
        return Result.after(delay)

    async def _fail(self, mem: JobMemory, key: str, job: Job, reason: str,
                    message: str) -> Result:
        status = failed(job.status, reason, message, self.clock.now(),
                        job.metadata.generation)
        result = await self._write_status(mem, key, job, status)
        self.events.post(job, "Warning", reason, message[:1000])
        return result

    async def _fail_invalid(self, mem: JobMemory, key: str, entry: JobEntry, status: JobStatus,
                            error: SpecInvalid | None) -> Result:
        if current_condition(status) is ConditionType.FAILED:
            return DONE  # (it failed already: an invalid spec is written once)
        message = "; ".join(str(e) for e in error.errors) if error else "invalid job"
        job = Job(apiVersion=entry.api_version, kind=entry.kind,
                  metadata=ObjectMeta.model_validate(entry.meta),
                  spec=JobSpec.model_construct(replica_specs={}), status=status)
        return await self._fail(mem, key, job, "InvalidSpec", message)

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


#: A pass to run again after the job's growing back-off.
_AGAIN = Result(backoff=True)


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
