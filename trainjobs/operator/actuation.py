"""Carrying out a plan: its deletes and creates as API calls, and what the API server said.

Why apart from the controller: actuation does I/O and classifies answers, nothing more; what
the answers mean for the job (fail it, wait for quota, retry) is the controller's decision
(`Controller._carry_out`), taken on the returned `Actuation`, so neither calls the other back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainjobs.api.models import Job
from trainjobs.core.planner import Plan
from trainjobs.errors import TemporaryError
from trainjobs.kube import (
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
)
from trainjobs.operator.cache import OwnerIndex, job_key
from trainjobs.operator.deletions import report_wanted_deletions
from trainjobs.operator.memory import JobMemory

__all__ = ["Actuation", "Actuator", "NameConflict", "controller_of"]


class NameConflict(Exception):
    """An object the job must create exists and belongs to someone else: never adopted."""


@dataclass(slots=True)
class Actuation:
    """What carrying out one plan did: how many objects it created, and the API server's
    refusals that decide what comes next (see `Controller._carry_out`)."""

    created: int = 0
    # A name the job needs is held by an object of another owner.
    conflict: NameConflict | None = None
    # The namespace is being deleted: its creates are refused.
    namespace_terminating: bool = False
    # A ResourceQuota refused a create (retryable ones: the quota may free up).
    quota: ApiForbidden | None = None
    # The API server refuses what was built from the job (400, 403, 422 not retryable).
    rejected: ApiError | None = None
    # Anything else that failed: the pass is retried.
    failed: list[BaseException] = field(default_factory=list)

    @classmethod
    def of(cls, results: Sequence[object]) -> Actuation:
        """Classify the answers of one plan's calls ("created", "exists", "deleted",
        "gone", or the exception a call raised)."""
        done = cls(created=sum(1 for r in results if r == "created"))
        errors = [r for r in results if isinstance(r, BaseException)]
        done.conflict = next((e for e in errors if isinstance(e, NameConflict)), None)
        done.namespace_terminating = any(isinstance(e, NamespaceTerminating) for e in errors)
        done.quota = next((e for e in errors if isinstance(e, ApiForbidden) and
                           e.quota_exceeded), None)
        if done.quota is not None:
            errors = [e for e in errors if not (isinstance(e, ApiForbidden) and e.retryable)]
        done.rejected = next((e for e in errors if isinstance(
            e, ApiBadRequest | ApiForbidden | ApiInvalid) and not e.retryable), None)
        done.failed = [e for e in errors if not isinstance(e, NameConflict)]
        return done


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The controller ownerReference of an object as the API server returned it, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


class Actuator:
    """Makes and deletes a job's objects for the controller (one per controller)."""

    def __init__(self, kube: Kube, owned: OwnerIndex, watched: Sequence[Resource],
                 resources: Mapping[tuple[str, str], Resource], parallelism: int) -> None:
        self.kube = kube
        self.owned = owned
        self.watched = tuple(watched)
        self.resources = resources
        self.parallelism = parallelism

    async def act(self, mem: JobMemory, job: Job, job_resource: Resource,
                  decision: Plan) -> Actuation:
        """The plan's deletes and creates, as API calls (at most `parallelism` at once);
        what happened. `job_resource`: the job's own, for a plan that deletes the job."""
        ns = job.namespace
        calls: list[Any] = []
        report_wanted_deletions(job, decision)
        for name in decision.delete_pods:
            calls.append(self.delete(PODS, ns, name, expected_by=mem))
        for name in decision.delete_services:
            calls.append(self.delete(SERVICES, ns, name))
        for svc in decision.create_services:
            calls.append(self._create(mem, SERVICES, ns, svc))
        for ref in decision.delete_extras:
            kind, _, name = ref.partition("/")
            res = next((r for r in self.watched if r.kind == kind), None)
            if res is not None:
                calls.append(self.delete(res, ns, name, expected_by=mem))
        for obj in decision.create_extras:
            calls.append(self._create(mem, self.resources[(obj["apiVersion"], obj["kind"])],
                                      ns, obj))
        for pod in decision.create_pods:
            calls.append(self._create(mem, PODS, ns, pod))
        if decision.delete_job:
            calls.append(self.delete(job_resource, ns, job.name))
        return Actuation.of(await gather_limited(self.parallelism, *calls))

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

    async def delete(self, res: Resource, ns: str, name: str,
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
