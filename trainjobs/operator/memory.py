"""Everything the controller remembers about one job between reconciles, in one object.

Why one object: the cached job, its parsed spec and packed rendering, the status change
waiting to be written, the state last logged, the pods seen going without our delete, the
pods of an attempt we owe, the create back-off and the expectations were eight parallel
dictionaries keyed by job, each to be forgotten by hand when the job went (one forgotten
would leak, or carry a refusal over to a new job of the same name). Now a job's memory is
dropped whole, in one place, when its informer says it is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainjobs.api.models import Job
from trainjobs.core.observed import GonePod
from trainjobs.errors import SpecInvalid
from trainjobs.operator.backoff import CreateGate
from trainjobs.operator.cache import JobEntry, PackedJob, PackedRender

__all__ = ["Expectations", "JobMemory", "Parsed"]


@dataclass(slots=True)
class Parsed:
    """The validated job of one generation (validation is the costly part), and its rendering,
    both kept packed (`job` unpacks a fresh model)."""

    generation: int
    uid: str
    packed: PackedJob | None
    desired: PackedRender | None
    error: SpecInvalid | None = None
    # What of the status `desired` was rendered for: the attempt (kinds whose replicas
    # restart together) and the last checkpoint's id (its step and URI are in the pods'
    # environment); see `render_key`.
    rendered_for: tuple[int, int] = (0, 0)
    # The replicas the spec asks for (counted once per generation: large jobs are handled
    # apart, see large_jobs.OFFLOAD_REPLICAS).
    replicas: int = 0

    @property
    def job(self) -> Job | None:
        return None if self.packed is None else self.packed.unpack()


class Expectations:
    """One job's pods and Services (`Kind/name`) we created or deleted that the caches have not
    shown yet, each until it is seen or its timeout passes.

    A deletion is expected of one object, by uid (issue 36): pods of kinds whose replicas
    restart together come back under the same names, and a deletion expected by name alone
    outlived its pod when the caches had shown it gone before the expectation was made (its
    DELETED event handled while the status write that precedes the deletes awaited the API
    server): the next attempt's pod of that name then looked as being deleted, its attempt
    broken, and a new attempt began 0.2 s after this one was created. So an object the caches
    show with another uid is never taken for the one deleted, and its appearance ends the
    expectation. uid "": not known yet (one we created and the caches have not shown): bound
    to the first object of that name they show."""

    __slots__ = ("clock", "creates", "deletes", "timeout")

    def __init__(self, timeout: float, clock: Callable[[], float]) -> None:
        self.timeout = timeout
        self.clock = clock
        self.creates: dict[str, float] = {}
        # ref -> (until, the uid of the object deleted; "" while not known)
        self.deletes: dict[str, tuple[float, str]] = {}

    def expect_create(self, ref: str) -> None:
        """Made before the create is sent, so that the caches cannot show the object first
        (an expectation made after them would stand in for the object, once it is gone, until
        its timeout); `create_failed` drops it when the create fails."""
        self.creates[ref] = self.clock() + self.timeout

    def create_failed(self, ref: str) -> None:
        self.creates.pop(ref, None)

    def expect_delete(self, ref: str, uid: str = "") -> None:
        self.deletes[ref] = (self.clock() + self.timeout, uid)

    def seen(self, ref: str, exists: bool, uid: str = "") -> None:
        """The caches show `ref` (`exists`, with `uid` when known) or show it gone."""
        if not exists:
            self.deletes.pop(ref, None)
            return
        self.creates.pop(ref, None)
        deleted = self.deletes.get(ref)
        if deleted is None or not uid:
            return
        if not deleted[1]:
            self.deletes[ref] = (deleted[0], uid)  # the one we created, then deleted
        elif deleted[1] != uid:
            del self.deletes[ref]  # another object holds the name: the one deleted is gone

    def pending(self) -> tuple[set[str], set[str]]:
        """(creates, deletes) not yet seen; those past their timeout are dropped."""
        now = self.clock()
        for ref in [r for r, until in self.creates.items() if until < now]:
            del self.creates[ref]
        for ref in [r for r, (until, _) in self.deletes.items() if until < now]:
            del self.deletes[ref]
        return set(self.creates), set(self.deletes)

    def deleting(self, ref: str, uid: str = "") -> bool:
        """Whether we deleted `ref` (the object of `uid`, when given) and the caches have not
        shown it gone yet."""
        deleted = self.deletes.get(ref)
        return deleted is not None and (not uid or not deleted[1] or deleted[1] == uid)


@dataclass(slots=True, eq=False)
class JobMemory:
    """One job as the controller knows it. Created when the job's informer first shows it,
    dropped (with everything below) when the informer shows it deleted."""

    entry: JobEntry  # the cached object (reduced), as the informer or our own write last saw it
    expectations: Expectations
    parsed: Parsed | None = None
    # When the first status change not yet written (one that may wait) was seen (monotonic).
    pending_since: float | None = None
    # When status.progress was last written (monotonic), and the turn the write budget gave
    # the progress change waiting now (operator/write_budget.py).
    progress_written_at: float | None = None
    progress_turn: float | None = None
    # The state logged for the job while it is ahead of the cached status (see the
    # controller's _log_state_change).
    logged_state: str | None = None
    # Replica pods that went without our delete (name -> what they showed), for the planner.
    gone: dict[str, GonePod] | None = None
    # Replicas that restart together: the attempt and the pods of it this operator decided to
    # create (the planner's `owed`; an operator restart forgets them, so an attempt found
    # half-created is not completed but replaced).
    owed: tuple[int, frozenset[str]] | None = None
    # Creates held by a quota's refusal; None while none is.
    gate: CreateGate | None = None
    # Its spec.managedBy names another controller, and the operator has said so in its log.
    managed_elsewhere: bool = False
