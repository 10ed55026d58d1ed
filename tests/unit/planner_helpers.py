"""A fake backend for the planner tests: a world of pods, Services and extras that a Plan is
applied to, with a clock and helpers to move pods through their phases.

It plays the part of the Kubernetes backend and the local runtime: created pods appear Pending
(with a fresh uid), deleted pods either vanish at once or stay `deleting` until `gc()`, the
status the plan reports is written back onto the job, and `delete_job` marks the job gone.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from trainjobs.api.models import ConditionType, Job, JobStatus
from trainjobs.core.admission import Admission
from trainjobs.core.observed import GonePod, ObservedPod, PodPhase, attempt_of
from trainjobs.core.planner import (
    EXCLUSIVE_CONDITIONS,
    CheckpointSeen,
    KindRules,
    Plan,
    PlanInputs,
    PlannerSettings,
    ProgressSeen,
    plan,
)
from trainjobs.core.render import (
    ANNOTATION_REPLICAS,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    RenderedJob,
    render_job,
    render_key,
)
from trainjobs.core.validation import parse_job
from trainjobs.plugin.manager import PluginManager

from .helpers import PLUGINS, container, framework_of, job_doc, replica, template

T0 = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
_UIDS = itertools.count(1)

Doc = dict[str, Any]

# Job documents ------------------------------------------------------------------------------


def _rspec(n: int, name: str, restart: str | None = None, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = dict(extra)
    if restart is not None:
        fields["restartPolicy"] = restart
    return replica(n, template(container(name)), **fields)


def mx_doc(workers: int = 3, servers: int = 1, restart: str | None = None,
           name: str = "mx", elastic: dict[str, int] | None = None,
           **run_policy: Any) -> Doc:
    worker_extra = {"elasticPolicy": elastic} if elastic else {}
    specs = {
        "Scheduler": _rspec(1, "mxnet", restart),
        "Server": _rspec(servers, "mxnet", restart),
        "Worker": _rspec(workers, "mxnet", restart, **worker_extra),
    }
    return job_doc("MxJob", name, specs, runPolicy=run_policy)


def tf_doc(chief: int = 1, workers: int = 2, ps: int = 1, restart: str | None = None,
           name: str = "tf", success_policy: str | None = None, **run_policy: Any) -> Doc:
    specs: dict[str, Any] = {}
    if chief:
        specs["Chief"] = _rspec(chief, "tensorflow", restart)
    if workers:
        specs["Worker"] = _rspec(workers, "tensorflow", restart)
    if ps:
        specs["PS"] = _rspec(ps, "tensorflow", restart)
    extra: dict[str, Any] = {"runPolicy": run_policy}
    if success_policy is not None:
        extra["successPolicy"] = success_policy
    return job_doc("TfJob", name, specs, **extra)


def c2_doc(workers: int = 3, restart: str | None = None, name: str = "c2",
           **run_policy: Any) -> Doc:
    specs = {"Worker": _rspec(workers, "caffe2", restart)}
    return job_doc("Caffe2Job", name, specs, runPolicy=run_policy, backend={"type": "nfs",
                                                                           "nfsPath": "/x"})


def parse(doc: Doc, plugins: PluginManager = PLUGINS) -> Job:
    return parse_job(copy.deepcopy(doc), plugins)


# The fake backend ----------------------------------------------------------------------------


@dataclass
class World:
    """One job and the objects it owns, as the backend would see them."""

    job: Job
    plugins: PluginManager = PLUGINS
    now: datetime = T0
    settings: PlannerSettings = field(default_factory=PlannerSettings)
    graceful: bool = False  # deleted pods stay `deleting` until gc()
    pods: dict[str, ObservedPod] = field(default_factory=dict)
    services: set[str] = field(default_factory=set)
    extras: set[str] = field(default_factory=set)
    job_deleted: bool = False
    history: list[Plan] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # every pod name ever created, in order
    lost_causes: dict[str, GonePod] = field(default_factory=dict)  # what the backend saw go
    owed: frozenset[str] = frozenset()  # pods the backend decided to create, not yet seen
    admission: Admission | None = None  # what Kueue decided (None: not queued)
    progress: ProgressSeen | None = None  # what the replicas reported (None: nothing)
    checkpoint: CheckpointSeen | None = None  # the checkpointing replica (None: nothing)

    def __post_init__(self) -> None:
        self.framework = framework_of(self.job.kind, self.plugins)
        self.desired: RenderedJob = render_job(self.job, self.framework, self.plugins)

    @classmethod
    def of(cls, doc: Doc, **kw: Any) -> World:
        return cls(parse(doc), **kw)

    # Planning -------------------------------------------------------------------------------

    def plan(self) -> Plan:
        """What the planner decides on the current state (nothing is applied). The causes of
        lost pods are handed over once, as the controller does."""
        job = self.job
        lost_causes, self.lost_causes = self.lost_causes, {}
        inputs = PlanInputs(list(self.pods.values()), set(self.services), set(self.extras),
                            lost_causes, owed=self.owed, admission=self.admission,
                            progress=self.progress, checkpoint=self.checkpoint, now=self.now)
        return plan(job, self.desired, inputs,
                    succeeded=lambda o: self.plugins.job_succeeded(job, self.framework, o),
                    settings=self.settings,
                    kind=KindRules(self.framework.replicas_restart_together,
                                   self.framework.suspend_style))

    def apply(self, p: Plan) -> Plan:
        """Carry out a plan the way a backend would."""
        self.history.append(p)
        for name in p.delete_pods:
            pod = self.pods.get(name)
            if pod is None:
                continue
            if self.graceful:
                self.pods[name] = replace(pod, deleting=True)
            else:
                del self.pods[name]
        for name in p.delete_services:
            self.services.discard(name)
        for svc in p.create_services:
            self.services.add(svc["metadata"]["name"])
        for obj in p.create_extras:
            self.extras.add(f"{obj['kind']}/{obj['metadata']['name']}")
        for ref in p.delete_extras:
            self.extras.discard(ref)
        for manifest in p.create_pods:
            name = manifest["metadata"]["name"]
            assert name not in self.pods, f"created {name} while a pod of that name exists"
            labels = manifest["metadata"]["labels"]
            self.pods[name] = ObservedPod(
                name=name, uid=f"uid-{next(_UIDS)}",
                replica_type_lower=labels[LABEL_REPLICA_TYPE],
                index=int(labels[LABEL_REPLICA_INDEX]), phase=PodPhase.PENDING,
                created=self.now, attempt=attempt_of(manifest["metadata"]),
                replicas_rendered=manifest["metadata"]["annotations"][ANNOTATION_REPLICAS])
            self.created.append(name)
        rendered_for = render_key(self.job)
        self.job = self.job.model_copy(update={"status": p.status})
        if render_key(self.job) != rendered_for:  # as both backends: a new attempt or checkpoint
            self.desired = render_job(self.job, self.framework, self.plugins)
        if p.delete_job:
            self.job_deleted = True
        return p

    def step(self) -> Plan:
        """Plan once and apply the plan."""
        return self.apply(self.plan())

    def settle(self, limit: int = 10) -> Plan:
        """Step until a pass asks for no action (deleting pods are removed in between)."""
        for _ in range(limit):
            p = self.step()
            self.gc()
            if not p.actions:
                return p
        raise AssertionError(f"no fixed point after {limit} passes: {p}")

    # Changing the world ---------------------------------------------------------------------

    def respec(self, doc: Doc) -> None:
        """The user edits the job: new spec (and desired objects), status kept."""
        status = self.job.status
        self.job = parse(doc, self.plugins).model_copy(update={"status": status})
        self.framework = framework_of(self.job.kind, self.plugins)
        self.desired = render_job(self.job, self.framework, self.plugins)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def gc(self) -> None:
        """Deleting pods finish terminating and vanish."""
        for name in [n for n, p in self.pods.items() if p.deleting]:
            del self.pods[name]

    def set(self, name: str, **changes: Any) -> ObservedPod:
        pod = self.pods[name] = replace(self.pods[name], **changes)
        return pod

    def run(self, *names: str) -> None:
        for name in names or list(self.pods):
            if self.pods[name].phase is PodPhase.PENDING:
                self.set(name, phase=PodPhase.RUNNING)

    def succeed(self, *names: str) -> None:
        for name in names:
            self.set(name, phase=PodPhase.SUCCEEDED, exit_code=0, reason="Completed")

    def fail(self, name: str, exit_code: int | None = 1, reason: str = "Error",
             disrupted: bool = False) -> None:
        self.set(name, phase=PodPhase.FAILED, exit_code=exit_code, reason=reason,
                 disrupted=disrupted)

    def remove(self, name: str) -> None:
        """Someone else deletes the pod (kubectl delete, node drain): it simply vanishes."""
        del self.pods[name]

    # Reading --------------------------------------------------------------------------------

    @property
    def status(self) -> JobStatus:
        return self.job.status

    @property
    def state(self) -> str:
        return self.job.status.state

    def condition(self, ctype: ConditionType) -> Any:
        for c in self.job.status.conditions:
            if c.type is ctype:
                return c
        return None

    def pod_names(self, replica_type: str | None = None) -> list[str]:
        return sorted(n for n, p in self.pods.items()
                      if replica_type is None or p.replica_type_lower == replica_type.lower())

    def restarts(self) -> dict[str, int]:
        return {t: s.restarts for t, s in self.job.status.replica_statuses.items()}


def exclusive_true(status: JobStatus) -> list[str]:
    return [c.type.value for c in status.conditions
            if c.type in EXCLUSIVE_CONDITIONS and c.status == "True"]


def names_of(objs: Iterable[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def running_world(doc: dict[str, Any], **kw: Any) -> World:
    """A job whose pods were all created and are Running, with state Running."""
    w = World.of(doc, **kw)
    w.step()
    w.run()
    w.step()
    assert w.state == "Running", w.status
    return w


def assert_true_only(w: World, ctype: ConditionType) -> None:
    assert exclusive_true(w.status) == [ctype.value]
    assert w.state == ctype.value
