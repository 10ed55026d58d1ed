"""`AsyncClient`: the jobs of a cluster from Python (notebooks, scripts, the CLI).

Why this shape: it speaks the project's pydantic `Job` model in and out and validates a job
with the installed plugins before it reaches the API server (every problem, with its field
path, at once); it talks to Kubernetes only through the operator's own connection code
(`trainjobs.kube`: `connect`, `Kube`, the typed API errors), so kubeconfig handling,
timeouts and error classes are the operator's, not a second client stack's. The connection is
made on first use, so constructing a client never blocks a notebook cell.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

from trainjobs.api.models import (
    MANAGED_BY_OPERATOR,
    Job,
    JobSpec,
    JobStatus,
    ObjectMeta,
)
from trainjobs.client.checkpoint import (
    ANSWER_GRACE_SECONDS,
    managed_elsewhere,
    refusal,
    request_value,
    wait_for_answer,
)
from trainjobs.client.errors import (
    AmbiguousJob,
    CheckpointRefused,
    ClusterUnreachable,
    JobFailed,
    JobNotFound,
    LogsUnavailable,
    NeverReached,
    PodsElsewhere,
    WaitTimeout,
)
from trainjobs.client.views import JobEvent, PodInfo, replica_names
from trainjobs.core.render import LABEL_JOB_NAME
from trainjobs.core.status import FINISHED_STATES
from trainjobs.core.validation import parse_job, split_jobs
from trainjobs.errors import SpecInvalid
from trainjobs.kube import (
    EVENTS,
    PODS,
    ApiBadRequest,
    ApiConnectionError,
    ApiError,
    ApiNotFound,
    Kube,
    KubeconfigError,
    ListWatch,
    Resource,
    connect,
    job_resource,
)
from trainjobs.kube.kubeconfig import current_context
from trainjobs.kube.listwatch import LISTED
from trainjobs.kueue import constants as kueue
from trainjobs.labels import ANNOTATION_CHECKPOINT_REQUEST
from trainjobs.operator.clock import SYSTEM_CLOCK, Clock
from trainjobs.plugin.manager import PluginManager, load_plugins
from trainjobs.plugin.types import Framework
from trainjobs.yamlio import load_documents, read_documents

__all__ = ["FINISHED", "AsyncClient", "JobSource", "job_from_api"]

#: States after which a job never changes again (trainjobs.core.status defines them).
FINISHED = FINISHED_STATES
#: What `create` takes: a model, a manifest dict, YAML text, or a path to a YAML file.
JobSource = Job | dict[str, Any] | str | os.PathLike[str]
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_WORKLOADS = Resource("Workload", "workloads", kueue.GROUP, kueue.VERSION)


class AsyncClient:
    """Create, read, watch, wait for and delete jobs of every installed kind.

    `kubeconfig`: a file (default: $KUBECONFIG, ~/.kube/config, else the in-cluster service
    account); `namespace`: the default for every call (default: the kubeconfig context's).
    Use as `async with AsyncClient() as c:` or call `await c.close()`.
    """

    def __init__(self, kubeconfig: str | None = None, namespace: str | None = None, *,
                 plugins: PluginManager | None = None, request_timeout: float = 30.0,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.kubeconfig = kubeconfig
        self.clock = clock  # the time a checkpoint request carries
        self._namespace = namespace
        self.plugins = plugins or load_plugins()
        self.request_timeout = request_timeout
        self._kube: Kube | None = None
        self._lock = asyncio.Lock()

    # -- connection ---------------------------------------------------------------------

    async def kube(self) -> Kube:
        """The connection (made on first use). Raises `ClusterUnreachable` when there is no
        kubeconfig or it cannot be read."""
        async with self._lock:
            if self._kube is None:
                try:
                    api = await connect(self.kubeconfig)
                except (KubeconfigError, OSError) as exc:
                    raise ClusterUnreachable(f"no cluster configured: {exc}") from None
                self._kube = Kube(api, user_agent="trainjobs-client",
                                  request_timeout=self.request_timeout)
            return self._kube

    async def close(self) -> None:
        if self._kube is not None:
            await self._kube.api.close()
            self._kube = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def namespace(self) -> str:
        """The default namespace: the one given, else the kubeconfig context's, else the
        service account's (in a pod), else `default`."""
        if self._namespace is None:
            self._namespace = default_namespace(self.kubeconfig)
        return self._namespace

    # -- jobs ---------------------------------------------------------------------------

    def parse(self, source: JobSource) -> list[tuple[Job, dict[str, Any]]]:
        """Validate every job of `source` with the installed plugins: (model, manifest) pairs.
        Raises `SpecInvalid` naming each problem's field path."""
        if isinstance(source, Job):
            return [(source, source.to_api())]
        if isinstance(source, dict):
            docs: list[Any] = [source]
            label = ""
        elif isinstance(source, str):
            docs, label = load_documents(source, "<yaml>"), "<yaml>"
        else:
            docs, label = read_documents(Path(source)), str(source)
        jobs = split_jobs(docs, self.plugins, label).jobs
        manifests = [d for d in docs if isinstance(d, dict) and d.get("kind") in
                     {j.kind for j in jobs} and isinstance(d.get("metadata"), dict)]
        if len(manifests) != len(jobs):  # a List wrapped them: post what the model says
            return [(j, j.to_api()) for j in jobs]
        return list(zip(jobs, manifests, strict=True))

    async def create(self, source: JobSource, namespace: str | None = None) -> Job:
        """Create the one job of `source` (a `Job`, a manifest dict, YAML text or a path);
        returns it as the API server stored it."""
        parsed = self.parse(source)
        if len(parsed) != 1:
            raise SpecInvalid([], f"{len(parsed)} jobs in the source: use create_all")
        return (await self._create(parsed, namespace))[0]

    async def create_all(self, source: JobSource, namespace: str | None = None) -> list[Job]:
        """Create every job of `source` (a multi-document YAML file, say), in order."""
        return await self._create(self.parse(source), namespace)

    async def _create(self, parsed: list[tuple[Job, dict[str, Any]]],
                      namespace: str | None) -> list[Job]:
        kube = await self.kube()
        out = []
        for job, manifest in parsed:
            body = {**manifest, "metadata": {**manifest["metadata"]}}
            body.pop("status", None)
            written = body["metadata"].get("namespace")
            ns = namespace or written or self.namespace
            if written and namespace and written != namespace:
                raise SpecInvalid([], f"{job.kind} {job.name} says namespace {written!r}, "
                                      f"the call says {namespace!r}")
            body["metadata"]["namespace"] = ns
            resource = self.resource(job.kind)
            try:
                with reaching():
                    created = await kube.request("POST", resource.url(ns), body)
            except ApiNotFound as exc:
                raise self._not_installed(resource, ns, exc) from None
            out.append(self.job_from_api(created))
        return out

    async def get(self, name: str, kind: str | None = None,
                  namespace: str | None = None) -> Job:
        """The job `name` (`KIND/NAME` or `kind=` picks the kind; otherwise every installed
        kind is looked in). Raises `JobNotFound`, or `AmbiguousJob` when kinds share it."""
        ns = namespace or self.namespace
        kind, name = self._split(name, kind)
        kube = await self.kube()
        frameworks = [self.framework(kind)] if kind else list(self.plugins.frameworks.values())

        async def one(fw: Framework) -> dict[str, Any] | None:
            try:
                return await kube.get(self.resource(fw.kind), ns, name)
            except ApiNotFound:
                return None

        with reaching():
            found = [r for r in await asyncio.gather(*(one(fw) for fw in frameworks)) if r]
        if not found:
            what = kind or "job (of any kind: " + ", ".join(self.plugins.frameworks) + ")"
            raise JobNotFound(f"no {what} named {name!r} in namespace {ns!r}")
        if len(found) > 1:
            kinds = ", ".join(f"{r['kind'].lower()}/{name}" for r in found)
            raise AmbiguousJob(f"several jobs are named {name!r} in {ns!r}: {kinds}; "
                               "say which as KIND/NAME")
        return self.job_from_api(found[0])

    async def list(self, kind: str | None = None, namespace: str | None = None, *,
                   label_selector: str = "", all_namespaces: bool = False) -> list[Job]:
        """Jobs of one kind or every installed kind, oldest first; `label_selector` as
        kubectl's -l (`team=vision,tier!=dev`)."""
        ns = None if all_namespaces else (namespace or self.namespace)
        kube = await self.kube()
        frameworks = [self.framework(kind)] if kind else list(self.plugins.frameworks.values())

        async def one(fw: Framework) -> list[dict[str, Any]]:
            try:
                items, _ = await kube.list(self.resource(fw.kind), ns,
                                           label_selector=label_selector)
            except ApiNotFound:  # the kind's CRD is not installed on this cluster
                return []
            return [{**item, "kind": fw.kind} for item in items]

        with reaching():
            found = [r for rs in await asyncio.gather(*(one(fw) for fw in frameworks))
                     for r in rs]
        jobs = [self.job_from_api(r) for r in found]
        return sorted(jobs, key=lambda j: (j.metadata.creation_timestamp is None,
                                           j.metadata.creation_timestamp, j.key))

    async def delete(self, name: str, kind: str | None = None, namespace: str | None = None,
                     *, wait: bool = False, timeout: float | None = None) -> Job:
        """Delete the job (its pods and Services go with it); `wait`: until it is gone.
        Returns the job as it was."""
        job = await self.get(name, kind, namespace)
        kube = await self.kube()
        try:
            with reaching():
                await kube.delete(self.resource(job.kind), job.namespace, job.name)
        except ApiNotFound:
            return job
        if wait:
            try:
                await asyncio.wait_for(self._gone(job), timeout)
            except TimeoutError:
                raise WaitTimeout(f"{job.kind} {job.name} still exists after {timeout:g}s",
                                  job) from None
        return job

    async def checkpoint(self, name: str, kind: str | None = None,
                         namespace: str | None = None, *, wait: bool | float = False) -> Job:
        """Ask the job's checkpointing replica to save now, without stopping it: writes the
        trainjobs.io/checkpoint-request annotation (the time, a new value each call), which
        the operator takes up (status.observedCheckpointRequest) and records as
        status.checkpointRequest; the saved checkpoint lands in status.lastCheckpoint.

        `wait`: until that request has ended (Saved, TimedOut...), then returns the job;
        True waits spec.runPolicy.checkpointTimeoutSeconds plus a minute (the operator ends
        every request by its deadline), a number that many seconds; `WaitTimeout` after it.
        Without `wait`, returns the job as written. Raises `CheckpointRefused` for a job that
        has finished, is suspended, lacks checkpointTimeoutSeconds or runs in another
        cluster."""
        job = await self.get(name, kind, namespace)
        why = refusal(job)
        if why is None and managed_elsewhere(job):
            why = await self.elsewhere(job, "checkpoint")
        if why is not None:
            raise CheckpointRefused(why)
        value = request_value(self.clock.now())
        before = job.status.checkpoint_request
        kube = await self.kube()
        patch = {"metadata": {"annotations": {ANNOTATION_CHECKPOINT_REQUEST: value}}}
        try:
            with reaching():
                raw = await kube.request(
                    "PATCH", self.resource(job.kind).url(job.namespace, job.name), patch,
                    content_type="application/merge-patch+json")
        except ApiNotFound:
            raise JobNotFound(f"{job.kind} {job.name} was deleted") from None
        written = self.job_from_api({**raw, "kind": job.kind})
        if wait is False:
            return written
        timeout = (float(wait) if not isinstance(wait, bool) else
                   float(job.spec.run_policy.checkpoint_timeout_seconds or 0)
                   + ANSWER_GRACE_SECONDS)
        return await wait_for_answer(self, written, value, before, timeout)

    async def _gone(self, job: Job) -> None:
        with contextlib.suppress(JobNotFound):
            async for _ in self.watch(job.name, job.kind, job.namespace):
                pass

    # -- watching and waiting -----------------------------------------------------------

    async def watch(self, name: str, kind: str | None = None,
                    namespace: str | None = None) -> AsyncIterator[Job]:
        """Every version of the job from now on, starting with the current one; ends when the
        job is deleted. Survives dropped watches and expired resourceVersions."""
        job = await self.get(name, kind, namespace)
        yield job
        selector = f"metadata.name={job.name}"
        async for kind_of_change, raw in self.watch_objects(
                self.resource(job.kind), job.namespace, field_selector=selector,
                resource_version=job.metadata.resource_version):
            if kind_of_change == "DELETED":
                return
            yield self.job_from_api({**raw, "kind": job.kind})

    async def wait(self, name: str, kind: str | None = None, namespace: str | None = None, *,
                   until: str | Iterable[str] = "Succeeded", timeout: float | None = None
                   ) -> Job:
        """Wait until one of the conditions `until` (Created, Running, Restarting, Succeeded,
        Failed, Suspended) is True; returns the job then. Raises `JobFailed` if it fails
        first, `NeverReached` if it finishes otherwise, `WaitTimeout` after `timeout` s."""
        wanted = {until} if isinstance(until, str) else set(until)
        last: list[Job] = []

        async def run() -> Job:
            async for job in self.watch(name, kind, namespace):
                last[:] = [job]
                reached = job_conditions(job) & wanted
                if reached:
                    return job
                if job.status.state == "Failed":
                    raise JobFailed(f"{job.kind} {job.name} Failed: "
                                    f"{finish_message(job)}", job)
                if job.status.state in FINISHED:
                    raise NeverReached(f"{job.kind} {job.name} {job.status.state}; it will "
                                       f"never be {' or '.join(sorted(wanted))}", job)
            raise JobNotFound(f"{name} was deleted while waiting for it")

        try:
            return await asyncio.wait_for(run(), timeout)
        except TimeoutError:
            if not last:
                raise
            job = last[0]
            raise WaitTimeout(f"{job.kind} {job.name} is {job.status.state or 'new'} after "
                              f"{timeout:g}s, not {' or '.join(sorted(wanted))}", job) from None

    async def watch_objects(self, resource: Resource, namespace: str | None, *,
                            label_selector: str = "", field_selector: str = "",
                            resource_version: str = ""
                            ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(ADDED|MODIFIED|DELETED, object) forever: a LIST first (its objects as ADDED)
        unless `resource_version` is given, then WATCH; a dropped watch is resumed, an
        expired resourceVersion listed again."""
        kube = await self.kube()
        follow = ListWatch(kube, resource, namespace, label_selector=label_selector,
                           field_selector=field_selector, resource_version=resource_version,
                           retry=_retried_by_client)
        with reaching():
            async with contextlib.aclosing(follow.events()) as events:
                async for event in events:
                    if event.type == LISTED:
                        yield "ADDED", event.object
                    elif event.type in ("ADDED", "MODIFIED", "DELETED"):
                        yield event.type, event.object

    # -- pods, events, logs -------------------------------------------------------------

    async def pods(self, name: str, kind: str | None = None,
                   namespace: str | None = None) -> builtins.list[PodInfo]:
        """The job's pods (replica pods and plugins' extra ones), by replica."""
        job = await self.get(name, kind, namespace)
        kube = await self.kube()
        items, _ = await kube.list(PODS, job.namespace,
                                   label_selector=f"{LABEL_JOB_NAME}={job.name}")
        names = replica_names(job)
        pods = [PodInfo.from_api(p, names) for p in items if owned_by(p, job)]
        return sorted(pods, key=lambda p: (p.replica_type, p.index or 0, p.name))

    async def events(self, name: str, kind: str | None = None,
                     namespace: str | None = None) -> builtins.list[JobEvent]:
        """Events about the job and its current pods, oldest first."""
        job = await self.get(name, kind, namespace)
        pods = await self.pods(job.name, job.kind, job.namespace)
        kube = await self.kube()
        uids = [job.metadata.uid, *(p.uid for p in pods)]
        lists = await asyncio.gather(*(
            kube.list(EVENTS, job.namespace, field_selector=f"involvedObject.uid={uid}")
            for uid in uids))
        events = [JobEvent.from_api(e) for items, _ in lists for e in items]
        return sorted(events, key=lambda e: (e.time is None, e.time))

    async def logs(self, name: str, kind: str | None = None, namespace: str | None = None,
                   *, replica: str | None = None, follow: bool = False,
                   container: str | None = None) -> AsyncIterator[tuple[str, str]]:
        """(replica, line) of the job's pods' logs (`replica`: one, e.g. `Worker-1`);
        `follow`: keep streaming until the pods end. Raises `LogsUnavailable` when the
        cluster cannot serve a pod's log."""
        job = await self.get(name, kind, namespace)
        pods = [p for p in await self.pods(job.name, job.kind, job.namespace)
                if p.index is not None]
        if not pods and job.spec.manager() != MANAGED_BY_OPERATOR:
            raise PodsElsewhere(await self.elsewhere(job))
        if replica is not None:
            pods = [p for p in pods if p.replica.lower() == replica.lower()]
            if not pods:
                raise JobNotFound(f"{job.kind} {job.name} has no pod for replica {replica!r}")
        framework = self.framework(job.kind)
        kube = await self.kube()
        queue: asyncio.Queue[tuple[str, str] | BaseException | None] = asyncio.Queue()

        async def one(pod: PodInfo) -> None:
            query: list[tuple[str, Any]] = [("container", container or framework.container_name)]
            if follow:
                query.append(("follow", "true"))
            try:
                async for line in kube.stream_lines(PODS.url(job.namespace, pod.name, "log"),
                                                    query, timeout=None if follow else 60,
                                                    unterminated=True):
                    await queue.put((pod.replica, line.decode(errors="replace")))
            except ApiError as exc:
                await queue.put(logs_unavailable(pod, exc))
            finally:
                await queue.put(None)

        tasks = [asyncio.create_task(one(p)) for p in pods]
        try:
            open_streams = len(tasks)
            while open_streams:
                item = await queue.get()
                if item is None:
                    open_streams -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def worker_cluster(self, job: Job) -> str | None:
        """The worker cluster Kueue's MultiKueue runs a job in: its Workload's
        `status.clusterName` here in the manager. None when none is recorded (not admitted
        yet, or requeued), when Kueue is not installed, or when this account may not read
        Workloads: the answer is a hint, never worth failing a command for."""
        kube = await self.kube()
        try:
            items, _ = await kube.list(_WORKLOADS, job.namespace)
        except ApiError:
            return None
        for workload in items:
            cluster = (workload.get("status") or {}).get("clusterName")
            if owned_by(workload, job) and cluster:
                return str(cluster)
        return None

    async def elsewhere(self, job: Job, command: str = "logs") -> str:
        """Why a job managed by another controller has no pod here, and where they are;
        `command`: the `trainjobs` command to run there instead (logs, checkpoint)."""
        where = await self.worker_cluster(job)
        place = (f"in the worker cluster {where!r} (its Workload's status.clusterName)" if where
                 else "in a worker cluster (none is named on its Workload yet)")
        there = "read the logs there" if command == "logs" else "run it there"
        return (f"{job.kind} {job.name} is managed by {job.spec.manager()}: its pods run "
                f"{place}, not in this cluster, which holds only the job and its copied "
                f"status; {there}: trainjobs {command} {job.name} -n {job.namespace} "
                f"--kubeconfig <that cluster's kubeconfig>")

    # -- helpers ------------------------------------------------------------------------

    def framework(self, kind: str) -> Framework:
        """The installed kind named by its kind, plural or short name (any case)."""
        wanted = kind.lower()
        for fw in self.plugins.frameworks.values():
            if wanted in {fw.kind.lower(), fw.plural, *fw.short_names}:
                return fw
        raise JobNotFound(f"unknown kind {kind!r} (installed: "
                          f"{', '.join(self.plugins.frameworks)})")

    def resource(self, kind: str) -> Resource:
        fw = self.framework(kind)
        return job_resource(fw.kind, fw.plural, fw.group, fw.version)

    def job_from_api(self, raw: dict[str, Any]) -> Job:
        return job_from_api(raw, self.plugins)

    @staticmethod
    def _split(name: str, kind: str | None) -> tuple[str | None, str]:
        if "/" in name:
            prefix, _, rest = name.partition("/")
            return prefix, rest
        return kind, name

    @staticmethod
    def _not_installed(resource: Resource, namespace: str, exc: ApiError) -> ApiError:
        if "namespaces" in exc.message and namespace in exc.message:
            return exc  # the namespace does not exist: the server says so well
        return ApiNotFound(
            404, f"the cluster has no {resource.plural}.{resource.group} resource: install "
                 f"the trainjobs CRDs (helm install or kubectl apply -f crds/)")


def job_from_api(raw: dict[str, Any], plugins: PluginManager) -> Job:
    """A `Job` from the API server's object: spec parsed by its kind's model, metadata and
    status as stored. A job the cluster holds but that no longer validates (a plugin changed)
    keeps its metadata and status with an empty spec, as the operator reads it.

    Parsed without rendering its pods: `list`, `watch` and `wait` read every job on every
    event, and rendering a job costs with the square of its replicas (every pod's TF_CONFIG
    lists every peer). The rendered objects' own checks (environment collisions, derived
    names) are the operator's, which reports them in the job's status."""
    meta = ObjectMeta.model_validate(raw.get("metadata") or {})
    status = JobStatus.model_validate(raw.get("status") or {})
    try:
        spec = parse_job({k: v for k, v in raw.items() if k != "status"}, plugins,
                         render=False).spec
    except SpecInvalid:
        spec = JobSpec.model_construct(replica_specs={})
    return Job(kind=str(raw.get("kind", "")), metadata=meta, spec=spec, status=status)


@contextlib.contextmanager
def reaching() -> Iterator[None]:
    """Raise `ClusterUnreachable` for an API server that did not answer: the client's one
    mapping of the transport's `ApiConnectionError` (a dropped watch is resumed before it
    gets here)."""
    try:
        yield
    except ApiConnectionError as exc:
        raise ClusterUnreachable(str(exc)) from None


def _retried_by_client(error: ApiError) -> bool:
    """What a watch retries by itself: an API server that answered but failed for now (5xx,
    429). One that does not answer is the caller's to hear about (`ClusterUnreachable`)."""
    return error.retryable and not isinstance(error, ApiConnectionError)


def job_conditions(job: Job) -> set[str]:
    """The condition types that are True now."""
    return {str(c.type) for c in job.status.conditions if c.status == "True"}


def finish_message(job: Job) -> str:
    """The message of the job's state condition (what failed, which replica, exit code)."""
    for cond in job.status.conditions:
        if cond.type == job.status.state and cond.status == "True":
            return cond.message or cond.reason
    return ""


def owned_by(obj: dict[str, Any], job: Job) -> bool:
    """Whether the job controls `obj` (a pod with the same label from an older job of the
    same name, or another kind's, is not its)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == job.metadata.uid for r in refs)


def logs_unavailable(pod: PodInfo, exc: ApiError) -> LogsUnavailable:
    """Why the API server could not give a pod's log, in the user's terms."""
    if isinstance(exc, ApiBadRequest) and "waiting to start" in exc.message:
        return LogsUnavailable(f"{pod.replica} ({pod.name}) has not started: {exc.message}")
    if isinstance(exc, ApiConnectionError):
        return LogsUnavailable(f"{pod.replica} ({pod.name}): no answer from the API server "
                               f"({exc.message})")
    return LogsUnavailable(
        f"the cluster cannot serve the log of {pod.replica} ({pod.name}) on node "
        f"{pod.node or '?'}: {exc.message}. Nodes without a kubelet that serves logs (KWOK's "
        "simulated nodes, for one) have none to give.")


def default_namespace(kubeconfig: str | None) -> str:
    """The kubeconfig's current-context namespace; in a pod, the service account's."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    with contextlib.suppress(KubeconfigError, OSError, KeyError, TypeError, ValueError):
        ns = current_context(path).get("namespace")
        if ns:
            return str(ns)
        return "default"
    with contextlib.suppress(OSError):
        return _SA_NAMESPACE.read_text().strip() or "default"
    return "default"
