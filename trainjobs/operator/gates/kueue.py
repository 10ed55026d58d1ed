"""Kueue admission, one gate of the controller (`gates.base`): Kueue's caches and one step per pass.

Why here and not in the planner: the planner stays pure (it only obeys an `Admission`); the
pure rules of Kueue's job framework live in `trainjobs.kueue`; this module is their I/O. It is
on only when the API server serves `kueue.x-k8s.io/v1beta2` Workloads (`KUEUE.start`, at
start; no flag, as Kueue's built-in integrations), and a job without the
`kueue.x-k8s.io/queue-name` label costs one dict lookup (its verdict holds nothing back: the
job runs exactly as without Kueue).

It keeps, by list-then-watch (`Informer`): the operator's own Workloads (selected by the
`trainjobs.io/job-name` label every Workload it builds carries) indexed by their controller
owner, the ResourceFlavors and the (Workload)PriorityClasses. Per reconcile it performs the
one write `decide` asks for and hands the planner the `Admission`. A Workload event queues its
owner's key; a key whose job is gone finalizes the job's Workloads (`finalize_orphan`), since
nothing else removes Kueue's finalizer from a Workload of ours.

A pass that must run again (a ResourceFlavor or priority class the job needs is missing, a
write refused with 409) says so in its verdict (`Result(backoff=True)`): the work queue's
per-job exponential back-off, as Kueue's reconciler returning an error, so a job that names
a class nobody creates costs one pass a minute, not one a second. A job waiting for a
missing object is also reconciled as soon as that object's informer sees it (`_arrived`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from trainjobs.api.models import (
    MANAGED_BY_MULTIKUEUE,
    ConditionType,
    Job,
    JobStatus,
    OwnedObjectStatus,
)
from trainjobs.core.admission import Admission
from trainjobs.core.observed import ObservedPod, PodPhase
from trainjobs.core.render import LABEL_JOB_NAME, RenderedJob
from trainjobs.core.status import is_finished
from trainjobs.kube import (
    ApiConflict,
    ApiError,
    ApiForbidden,
    ApiNotFound,
    Kube,
    NamespaceTerminating,
    Resource,
)
from trainjobs.kube.informer import Informer, Key
from trainjobs.kueue import constants as k
from trainjobs.kueue.assignment import workload_phase
from trainjobs.kueue.integrations import (
    REASON_UNDECIDED,
    KueueIntegrations,
    Route,
    undecided_message,
    undecided_route,
)
from trainjobs.kueue.model import (
    MalformedObject,
    MissingObject,
    PriorityClass,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
    parse_priority_class,
    parse_resource_flavor,
    parse_workload,
    parse_workload_priority_class,
)
from trainjobs.kueue.reconcile import (
    Action,
    ApplyCondition,
    CreateWorkload,
    DeleteWorkloads,
    JobState,
    KueueSettings,
    PatchWorkload,
    decide,
    finalize_orphan,
    finish_workload,
    without_finalizer,
)
from trainjobs.kueue.workload import (
    PriorityClasses,
    WorkloadBuildError,
    handled_by_kueue,
    job_pod_sets,
    prebuilt_workload_name,
    queue_name,
)
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.operator.controller_settings import ControllerSettings
from trainjobs.operator.events import EventRecorder
from trainjobs.operator.gates.base import GateContext, Verdict
from trainjobs.operator.kueue_integrations import KueueIntegrationReader
from trainjobs.operator.result import DONE, Result
from trainjobs.plugin.types import Framework

__all__ = ["KUEUE", "WORKLOADS", "KueueGate", "Queueing", "discover", "refused", "watched"]

log = logging.getLogger(__name__)

WORKLOADS = Resource("Workload", "workloads", k.GROUP, k.VERSION)
RESOURCE_FLAVORS = Resource("ResourceFlavor", "resourceflavors", k.GROUP, k.VERSION)
WORKLOAD_PRIORITY_CLASSES = Resource("WorkloadPriorityClass", "workloadpriorityclasses",
                                     k.GROUP, k.VERSION)
PRIORITY_CLASSES = Resource("PriorityClass", "priorityclasses", "scheduling.k8s.io", "v1")
CLUSTER_WIDE = (RESOURCE_FLAVORS, WORKLOAD_PRIORITY_CLASSES, PRIORITY_CLASSES)
#: Watched only with manageJobsWithoutQueueName (their labels decide which namespaces'
#: unlabelled jobs Kueue manages).
NAMESPACES = Resource("Namespace", "namespaces")
_T = TypeVar("_T")
_ACTIVE = (PodPhase.PENDING, PodPhase.RUNNING, PodPhase.UNKNOWN)
#: The verdict on a job Kueue does not hold back, and a pass to run again after back-off.
_FREE = Verdict()
_AGAIN = Result(backoff=True)


def watched(namespaces: Sequence[str | None], namespaces_too: bool = False
            ) -> list[tuple[Resource, str | None]]:
    """What the integration watches (one informer each), in order: its Workloads in every
    watched namespace, then ResourceFlavors, WorkloadPriorityClasses and PriorityClasses, and
    with manageJobsWithoutQueueName (`namespaces_too`) the Namespaces."""
    return [*((WORKLOADS, ns) for ns in namespaces), *((res, None) for res in CLUSTER_WIDE),
            *([(NAMESPACES, None)] if namespaces_too else [])]


async def _until_answered(what: str, ask: Callable[[], Awaitable[_T]],
                          sleep: Callable[[float], Any]) -> _T:
    """`ask()` until it answers. An `ApiError` it lets through decides nothing (a 5xx, a 429,
    an unreachable API server) and is asked again after 0.5 s, doubling up to 10 s; `ask`
    itself turns the errors that do decide into its answer."""
    delay = 0.5
    while True:
        try:
            return await ask()
        except ApiError as exc:
            log.warning("%s: %s; asking again in %.1fs", what, exc, delay)
        await sleep(delay)
        delay = min(delay * 2, 10.0)


async def discover(kube: Kube, sleep: Callable[[float], Any] = asyncio.sleep) -> bool:
    """Whether the API server serves Kueue's v1beta2 Workloads. Asked until it answers: an
    unreachable API server must not switch the integration off (labelled jobs would run
    unqueued)."""
    async def ask() -> bool:
        try:
            doc = await kube.request("GET", f"/apis/{k.GROUP}/{k.VERSION}")
        except ApiNotFound:
            return False
        return any(r.get("name") == "workloads" for r in doc.get("resources") or [])

    return await _until_answered(f"discovery of {k.GROUP}/{k.VERSION}", ask, sleep)


async def refused(kube: Kube, namespaces: Sequence[str | None],
                  sleep: Callable[[float], Any] = asyncio.sleep,
                  namespaces_too: bool = False) -> str | None:
    """Why this operator may not read what the integration watches, or None when it may.

    Kueue being served does not mean the operator's account was granted its objects (the
    chart's `kueue.enabled` adds that RBAC): an informer refused with 403 would never sync and
    the operator would never be ready, stalling every job. One small list per watched
    resource tells the two apart at start (asked until it answers, as `discover`)."""
    for res, ns in watched(namespaces, namespaces_too):
        async def ask(res: Resource = res, ns: str | None = ns) -> str | None:
            try:
                async for _ in kube.list_pages(res, ns, limit=1):
                    break
            except ApiForbidden as exc:
                if not exc.retryable:
                    return f"{res.plural}.{res.group or 'core'}: {exc}"
                raise
            return None

        why = await _until_answered(f"listing {res.plural}", ask, sleep)
        if why is not None:
            return why
    return None


def _parsed(parse: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A transform that logs a malformed object (once per resourceVersion) and drops it."""
    seen: set[str] = set()

    def transform(obj: dict[str, Any]) -> Any:
        try:
            return parse(obj)
        except MalformedObject as exc:
            version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            if version not in seen:
                seen.add(version)
                log.warning("ignoring %s", exc)
            return None

    return transform


def _namespace_labels(obj: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()}


def _owner_key(wl: Workload) -> str | None:
    owner = wl.metadata.controller()
    return f"{owner.kind}/{wl.metadata.namespace}/{owner.name}" if owner else None


class Queueing:
    """The Kueue gate (one per operator, when Kueue is served): `gates.base.Gate`."""

    name = "kueue"

    def __init__(self, kube: Kube, namespaces: Sequence[str | None], events: EventRecorder,
                 enqueue: Callable[[str], None], settings: KueueSettings | None = None,
                 on_namespace: Callable[[str], None] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.kube, self.events, self.clock = kube, events, clock
        self.settings = settings or KueueSettings()
        self._enqueue = enqueue
        self._on_namespace_changed = on_namespace
        # Kueue's integration or ours for the kinds Kueue integrates itself (Kubeflow's TFJob).
        self.integrations = KueueIntegrationReader(kube, self.settings.kubeflow_integration,
                                                   self.settings.config_map,
                                                   monotonic=clock.monotonic)
        self._undecided: set[str] = set()  # job keys held for it (their event is sent)
        # Namespace name -> its labels (only with manageJobsWithoutQueueName).
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # (resource plural, name) -> the job keys waiting for that object to appear, and
        # the reverse, so that a job waits on one object at a time and is forgotten.
        self._waiting: dict[tuple[str, str], set[str]] = {}
        self._waits_for: dict[str, tuple[str, str]] = {}
        self.by_owner: dict[str, dict[str, Workload]] = {}
        self.by_name: dict[Key, Workload] = {}
        self.flavors: dict[str, ResourceFlavor] = {}
        self._workload_classes: dict[str, int] = {}
        self._pod_classes: dict[str, PriorityClass] = {}
        handlers: dict[Resource, tuple[Callable[[dict[str, Any]], Any], Any, str]] = {
            WORKLOADS: (parse_workload, self._on_workload, LABEL_JOB_NAME),
            RESOURCE_FLAVORS: (parse_resource_flavor, self._on_flavor, ""),
            WORKLOAD_PRIORITY_CLASSES: (parse_workload_priority_class, self._on_workload_class,
                                        ""),
            PRIORITY_CLASSES: (parse_priority_class, self._on_pod_class, ""),
            NAMESPACES: (_namespace_labels, self._on_namespace, ""),
        }
        # What `refused` checked at start, informer for informer.
        self.informers: list[Informer[Any]] = [
            Informer(kube, res, ns, _parsed(parse), on_change, label_selector=selector)
            for res, ns in watched(namespaces, self.settings.manage_jobs_without_queue_name)
            for parse, on_change, selector in (handlers[res],)]

    # Cache events -----------------------------------------------------------------------

    def _on_workload(self, etype: str, key: Key, new: Workload | None,
                     old: Workload | None) -> None:
        for wl, keep in ((old, False), (new, True)):
            if wl is None:
                continue
            owner = _owner_key(wl)
            if owner is None:
                continue
            owned = self.by_owner.setdefault(owner, {})
            if keep:
                owned[wl.metadata.name] = wl
            else:
                owned.pop(wl.metadata.name, None)
            if not owned:
                del self.by_owner[owner]
            self._enqueue(owner)
        if new is None:
            self.by_name.pop(key, None)
        else:
            self.by_name[key] = new
            self._arrived(WORKLOADS.plural, f"{key[0]}/{key[1]}")

    def _on_flavor(self, etype: str, key: Key, new: ResourceFlavor | None,
                   old: ResourceFlavor | None) -> None:
        if new is None:
            self.flavors.pop(key[1], None)
        else:
            self.flavors[key[1]] = new
            self._arrived(RESOURCE_FLAVORS.plural, key[1])

    def _on_workload_class(self, etype: str, key: Key, new: WorkloadPriorityClass | None,
                           old: WorkloadPriorityClass | None) -> None:
        if new is None:
            self._workload_classes.pop(key[1], None)
        else:
            self._workload_classes[key[1]] = new.value
            self._arrived(WORKLOAD_PRIORITY_CLASSES.plural, key[1])

    def _on_pod_class(self, etype: str, key: Key, new: PriorityClass | None,
                      old: PriorityClass | None) -> None:
        if new is None:
            self._pod_classes.pop(key[1], None)
        else:
            self._pod_classes[key[1]] = new
            self._arrived(PRIORITY_CLASSES.plural, key[1])

    def _on_namespace(self, etype: str, key: Key, new: dict[str, str] | None,
                      old: dict[str, str] | None) -> None:
        if new is None:
            self.namespace_labels.pop(key[1], None)
        else:
            self.namespace_labels[key[1]] = new
        if self._on_namespace_changed is not None:
            self._on_namespace_changed(key[1])

    def manages(self, job: Job) -> bool:
        """Whether Kueue manages `job` (reconciler.go:364-389, and Kueue's documented
        managedJobsNamespaceSelector for non-pod integrations): a job labelled for a queue
        always; an unlabelled one only with manageJobsWithoutQueueName and in a namespace the
        selector matches (a namespace not in the cache: not managed, as Kueue's "Namespace
        not found")."""
        if queue_name(job):
            return True
        if not self.settings.manage_jobs_without_queue_name:
            return False
        labels = self.namespace_labels.get(job.namespace)
        return labels is not None and self.settings.managed_jobs_namespace_selector.matches(
            labels)

    # Waiting for missing objects --------------------------------------------------------

    def _wait_for(self, key: str, missing: MissingObject | None) -> None:
        """Remember what `key`'s pass found missing (None: nothing now)."""
        wanted = (missing.resource, missing.name) if missing is not None else None
        if self._waits_for.get(key) == wanted:
            return
        self.forget(key)
        if wanted is not None:
            self._waits_for[key] = wanted
            self._waiting.setdefault(wanted, set()).add(key)

    def _arrived(self, resource: str, name: str) -> None:
        """An object jobs wait for appeared: reconcile them now, not at their next back-off."""
        for key in self._waiting.pop((resource, name), ()):
            self._waits_for.pop(key, None)
            self._enqueue(key)

    def forget(self, key: str) -> None:
        """The job is gone (or waits for nothing): drop what it waited for."""
        self._undecided.discard(key)
        wanted = self._waits_for.pop(key, None)
        if wanted is not None:
            keys = self._waiting.get(wanted, set())
            keys.discard(key)
            if not keys:
                self._waiting.pop(wanted, None)

    def watches_managed_by(self, manager: str) -> bool:
        """MultiKueue's jobs (`spec.managedBy: kueue.x-k8s.io/multikueue`) get their Workload
        in a manager cluster, as Kueue's flow expects of the job's integration; their pods
        run in a worker cluster."""
        return manager == MANAGED_BY_MULTIKUEUE

    def classes(self) -> PriorityClasses:
        defaults = sorted((c.value, name) for name, c in self._pod_classes.items()
                          if c.global_default)
        return PriorityClasses(
            workload=dict(self._workload_classes),
            pod={name: c.value for name, c in self._pod_classes.items()},
            pod_default=(defaults[0][1], defaults[0][0]) if defaults else None)

    # Reconcile --------------------------------------------------------------------------

    async def decide(self, key: str, job: Job, framework: Framework, desired: RenderedJob,
                     pods: Sequence[ObservedPod]) -> Verdict:
        """One pass of Kueue's job reconciler for `job`: its one write performed, and the
        `Admission` the planner must obey (None: Kueue does not manage the job)."""
        if not self.manages(job):
            return _FREE  # (one or two lookups for an unlabelled job)
        owned = list(self.by_owner.get(key, {}).values())
        if handled_by_kueue(framework.group, framework.kind):
            route, why = await self.integrations.route(framework.group, framework.kind)
            if route is Route.UNDECIDED:
                route = undecided_route(bool(owned), any(p.phase in _ACTIVE for p in pods),
                                        is_finished(job.status))
            if route is Route.KUEUE:
                return _FREE  # Kueue's own integration admits it through runPolicy.suspend
            if route is Route.UNDECIDED:
                return await self._hold_undecided(key, job, framework, why)
            self._undecided.discard(key)
        if is_finished(job.status):
            self.forget(key)
            return Verdict(None, await self._finish(key, job, owned))
        try:
            pod_sets = tuple(job_pod_sets(job, framework, desired))
        except WorkloadBuildError as exc:
            self.forget(key)
            return Verdict(Admission.waiting("InvalidWorkload", str(exc)))
        state = JobState(job, pod_sets,
                         active=any(p.phase in _ACTIVE for p in pods),
                         pods_ready=job.status.state == "Running")
        prebuilt = prebuilt_workload_name(job)
        step = decide(state, owned, self.flavors, self.classes(), self.clock.now(),
                      prebuilt=self.by_name.get((job.namespace, prebuilt)) if prebuilt
                      else None, settings=self.settings)
        result = DONE
        if step.action is not None:
            result = await self._perform(key, job.namespace, step.action)
        for reason, message in step.events:
            self.events.post(job, "Normal", reason, message)
        self._wait_for(key, step.missing)
        if step.retry:
            result = _AGAIN
        return Verdict(step.admission, result)

    async def _hold_undecided(self, key: str, job: Job, framework: Framework,
                              why: KueueIntegrations | None) -> Verdict:
        """`--kueue-kubeflow-integration=auto` cannot read Kueue's Configuration: the job
        waits, with no Workload and no pod, asked again with back-off; one Warning event
        when it starts waiting for that."""
        message = undecided_message(framework.group, framework.kind,
                                    why.source if why is not None else "",
                                    self.settings.config_map)
        if key not in self._undecided and not any(
                c.type is ConditionType.QUEUED and c.status == "True"
                and c.reason == REASON_UNDECIDED for c in job.status.conditions):
            self.events.post(job, "Warning", REASON_UNDECIDED, message)
        self._undecided.add(key)
        return Verdict(Admission.waiting(REASON_UNDECIDED, message), _AGAIN)

    async def _finish(self, key: str, job: Job, owned: Sequence[Workload]) -> Result:
        """A finished job: its Workload Finished (Succeeded or Failed, with the job's
        message; reconciler.go:484), then Kueue's finalizer removed (440). Done here rather
        than by `decide`, which needs the job's pod sets, and a finished job keeps no
        rendering."""
        succeeded = job.status.state == "Succeeded"
        cond = next((c for c in job.status.conditions if c.type.value == job.status.state), None)
        message = cond.message if cond is not None else job.status.state
        result = DONE
        for wl in owned:
            owner = wl.metadata.controller()
            if owner is None or owner.uid != job.metadata.uid:
                continue
            if not wl.is_true(k.COND_FINISHED):
                result = result.merge(await self._perform(key, job.namespace, finish_workload(
                    wl, "Succeeded" if succeeded else "Failed", message, self.clock.now())))
                self.events.post(job, "Normal", "FinishedWorkload",
                                 f"Workload '{job.namespace}/{wl.metadata.name}' is declared "
                                 "finished")
            else:
                patch = without_finalizer(wl)
                if patch is not None:
                    result = result.merge(await self._perform(key, job.namespace, patch))
        return result

    async def job_gone(self, key: str) -> Result:
        """The job of `key` is gone: finalize its Workloads (one write each per pass; the
        Workload's next event brings the next)."""
        namespace = key.split("/")[1]
        result = DONE
        for wl in list(self.by_owner.get(key, {}).values()):
            action = finalize_orphan(wl, self.clock.now())
            if action is not None:
                result = result.merge(await self._perform(key, namespace, action))
        return result

    async def _perform(self, key: str, namespace: str, action: Action) -> Result:
        """The step's one API call. A conflict (the Workload changed, or the informer has not
        shown it yet) or a Workload already gone runs the pass again on fresher data, after
        the job's back-off."""
        try:
            if isinstance(action, CreateWorkload):
                await self.kube.create(WORKLOADS, namespace, action.manifest)
            elif isinstance(action, PatchWorkload):
                await self.kube.request("PATCH", WORKLOADS.url(namespace, action.name,
                                                               action.subresource),
                                        action.patch,
                                        content_type="application/merge-patch+json")
            elif isinstance(action, ApplyCondition):
                await self.kube.request("PATCH", WORKLOADS.url(namespace, action.name, "status"),
                                        action.body(namespace),
                                        query=[("fieldManager", action.field_manager),
                                               ("force", "true")],
                                        content_type="application/apply-patch+yaml")
            elif isinstance(action, DeleteWorkloads):
                for wl in action.workloads:
                    await self._delete(namespace, wl)
        except (ApiConflict, ApiNotFound) as exc:
            log.info("Workload write for %s: %s; reconciling again", key, exc)
            return _AGAIN
        except NamespaceTerminating:
            log.debug("Workload write for %s: namespace %s is being deleted", key, namespace)
        except ApiError as exc:
            raise exc.temporary() from None
        return DONE

    async def _delete(self, namespace: str, wl: Workload) -> None:
        """workload.Delete: Kueue's finalizer removed, then the Workload deleted."""
        patch = without_finalizer(wl)
        if patch is not None:
            await self.kube.request("PATCH", WORKLOADS.url(namespace, patch.name), patch.patch,
                                    content_type="application/merge-patch+json")
        if not wl.metadata.deletion_timestamp:
            with contextlib.suppress(ApiNotFound):
                await self.kube.delete(WORKLOADS, namespace, wl.metadata.name)

    # Status -----------------------------------------------------------------------------

    def annotate(self, key: str, uid: str, status: JobStatus) -> JobStatus:
        """`status` with the job's Workload in `ownedObjects` (its phase and Kueue's words),
        what `trainjobs status` and `kubectl get -o yaml` show."""
        reports = [o for o in status.owned_objects or [] if o.kind != "Workload"]
        for wl in sorted(self.by_owner.get(key, {}).values(), key=lambda w: w.metadata.name):
            owner = wl.metadata.controller()
            if owner is None or owner.uid != uid:
                continue
            phase, message = workload_phase(wl)
            reports.append(OwnedObjectStatus(kind="Workload", name=wl.metadata.name,
                                             phase=phase, message=message[:1000]))
        if reports == (status.owned_objects or []):
            return status
        return status.model_copy(update={"owned_objects": reports or None})


class KueueGate:
    """Starts the Kueue gate when the API server serves Workloads (`gates.base.GateFactory`)."""

    name = "kueue"

    def watches(self, namespaces: Sequence[str | None], settings: ControllerSettings) -> int:
        return len(watched(namespaces, settings.kueue.manage_jobs_without_queue_name))

    async def start(self, context: GateContext) -> Queueing | None:
        """Kueue admission, on when Workloads are served and this operator may read what the
        gate watches; otherwise off, said once (an operator that may not read Kueue's
        objects would otherwise never become ready)."""
        if not await discover(context.kube):
            return None
        settings = context.settings.kueue
        why = await refused(context.kube, context.namespaces,
                            namespaces_too=settings.manage_jobs_without_queue_name)
        if why is not None:
            log.warning("Kueue serves Workloads but this operator may not read them (%s): "
                        "Kueue admission is off and jobs labelled %s are not queued; grant "
                        "the RBAC (the chart's kueue.enabled) and restart the operator", why,
                        k.LABEL_QUEUE_NAME)
            return None
        log.info("Kueue serves Workloads: jobs labelled %s are admitted through it",
                 k.LABEL_QUEUE_NAME)
        return Queueing(context.kube, context.namespaces, context.events, context.enqueue,
                        settings, on_namespace=context.enqueue_namespace, clock=context.clock)


#: The factory `gates.FACTORIES` lists.
KUEUE = KueueGate()
