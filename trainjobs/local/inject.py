"""`trainjobs run --inject`: the fault-injection language, and when an injection fires.

Why: restart policies, `backoffLimit`, restart-together and checkpoint-resume are rehearsed
on a laptop before GPU time is spent, by making replicas fail on purpose. An injection only
makes a process die, exit or hang; the reconcile planner judges the outcome as it judges any
real failure, so what a rehearsal shows is what the operator would do.

The language (docs/local.md, "--inject"), one injection per `--inject`:

    ACTION REPLICA [CONDITION ...]
    ACTION     kill | hang | exit=CODE
    REPLICA    Worker-1 | worker-1 | PS (a type with one replica) | mnist-worker-1 (the pod)
    CONDITION  after=30s | at-step=200 | attempt=1 | restart=0 | times=2 | for=10s (hang)

Everything here is pure (no processes, no clock reads): the runner's injector
(trainjobs/local/injector.py) passes in what it sees and the time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from trainjobs.errors import InjectInvalid
from trainjobs.plugin.types import Replica

__all__ = ["Action", "Injection", "Sighting", "Trigger", "arm", "parse_duration",
           "parse_injection", "resolve_replica"]

EXAMPLE = "e.g. 'kill Worker-1 after=30s'"
CONDITIONS = ("after", "at-step", "attempt", "restart", "times", "for")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class Action(StrEnum):
    KILL = "kill"  # SIGKILL to the replica's process group: exit code 137
    HANG = "hang"  # SIGSTOP to the group: it stops running and reporting
    EXIT = "exit"  # the replica's main process exits with the given code


@dataclass(frozen=True)
class Injection:
    """One `--inject`, parsed; `text` is what the user wrote (echoed in every line about it)."""

    text: str
    action: Action
    replica: str  # as written; `resolve_replica` finds the pod
    code: int | None = None  # exit=CODE
    after: float | None = None  # seconds after the target's process started
    at_step: int | None = None  # once the job reports this step (while the process runs)
    attempt: int | None = None  # only a process of this attempt
    restart: int | None = None  # only the replica's process after this many restarts
    times: int = 1  # fires at most this often, each time on another process
    hold: float | None = None  # hang for=: SIGCONT after this many seconds


def _refuse(text: str, problem: str) -> InjectInvalid:
    return InjectInvalid(f"--inject {text!r}: {problem}")


def parse_duration(value: str) -> float:
    """'30s', '500ms', '2m', '1m30s', '1.5h' as seconds; ValueError for anything else."""
    if not _DURATION.fullmatch(value):
        raise ValueError(value)
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value))


def _duration(text: str, key: str, value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError:
        hint = "a duration needs a unit" if re.fullmatch(r"\d+(\.\d+)?", value) else \
            "not a duration"
        raise _refuse(text, f"{key}={value}: {hint} (30s, 500ms, 2m, 1m30s)") from None


def _count(text: str, key: str, value: str, least: int = 0) -> int:
    if not re.fullmatch(r"\d+", value) or int(value) < least:
        raise _refuse(text, f"{key}={value}: must be a whole number of at least {least}")
    return int(value)


def _action(text: str, word: str) -> tuple[Action, int | None]:
    name, eq, value = word.lower().partition("=")
    if name == "exit":
        if not eq or not re.fullmatch(r"\d{1,3}", value) or int(value) > 255:
            raise _refuse(text, f"{word!r}: exit needs a code 0..255 (exit=137)")
        return Action.EXIT, int(value)
    if name in (Action.KILL, Action.HANG) and not eq:
        return Action(name), None
    raise _refuse(text, f"unknown action {word!r} (kill, hang or exit=CODE; {EXAMPLE})")


def parse_injection(text: str) -> Injection:
    """The injection `text` says, or `InjectInvalid` naming the problem (one line)."""
    words = text.split()
    if not words:
        raise _refuse(text, f"empty; expected ACTION REPLICA [CONDITION ...], {EXAMPLE}")
    action, code = _action(text, words[0])
    if len(words) < 2 or "=" in words[1]:
        raise _refuse(text, f"no replica named after {words[0]!r} ({EXAMPLE})")
    seen: dict[str, str] = {}
    for word in words[2:]:
        key, eq, value = word.partition("=")
        key = key.lower()
        if not eq or not value:
            raise _refuse(text, f"{word!r}: expected CONDITION=VALUE after the replica "
                                f"({', '.join(CONDITIONS)})")
        if key not in CONDITIONS:
            raise _refuse(text, f"unknown condition {key!r} ({', '.join(CONDITIONS)})")
        if key in seen:
            raise _refuse(text, f"{key} given twice")
        seen[key] = value
    if "for" in seen and action is not Action.HANG:
        raise _refuse(text, "for= is for hang only (how long the replica stays stopped)")
    return Injection(
        text=" ".join(words), action=action, replica=words[1], code=code,
        after=_duration(text, "after", seen["after"]) if "after" in seen else None,
        at_step=_count(text, "at-step", seen["at-step"]) if "at-step" in seen else None,
        attempt=_count(text, "attempt", seen["attempt"]) if "attempt" in seen else None,
        restart=_count(text, "restart", seen["restart"]) if "restart" in seen else None,
        times=_count(text, "times", seen["times"], least=1) if "times" in seen else 1,
        hold=_duration(text, "for", seen["for"]) if "for" in seen else None)


def _replica_list(replicas: Sequence[Replica]) -> str:
    """Scheduler, Server-0..1, Worker-0..2: every name a user may give, in short."""
    counts: dict[str, int] = {}
    for r in replicas:
        counts[r.type] = counts.get(r.type, 0) + 1
    return ", ".join(t if n == 1 else f"{t}-0..{n - 1}" for t, n in counts.items())


def resolve_replica(injection: Injection, job_name: str, replicas: Sequence[Replica]) -> str:
    """The pod the injection targets: `Type-Index` or the pod's name in any case, or a type
    alone when it has one replica; `InjectInvalid` for a name the job does not have."""
    wanted = injection.replica.lower()
    found = {r.object_name(job_name) for r in replicas
             if wanted in (f"{r.type}-{r.index}".lower(), r.object_name(job_name))}
    of_type = [r for r in replicas if r.type.lower() == wanted]
    if len(of_type) == 1:
        found.add(of_type[0].object_name(job_name))
    if len(found) == 1:
        return found.pop()
    if found:
        problem = f"{injection.replica!r} names several replicas: {', '.join(sorted(found))}"
    elif of_type:
        problem = (f"{of_type[0].type} has {len(of_type)} replicas: name one "
                   f"({of_type[0].type}-0..{len(of_type) - 1})")
    else:
        problem = f"no replica {injection.replica!r} in job {job_name} " \
                  f"(it has {_replica_list(replicas)})"
    raise _refuse(injection.text, problem)


@dataclass(frozen=True)
class Sighting:
    """One process of the target replica as the injector sees it now."""

    process: str  # identity: another process (restart in place, recreation) is another value
    since: float  # monotonic seconds when the injector first saw it running
    attempt: int
    restarts: int  # the replica's restarts so far (in place and recreations)
    step: int | None  # the job's furthest step reported since `since`; None: no report


@dataclass
class Trigger:
    """An injection bound to its pod: when it is due, and how often it has fired."""

    injection: Injection
    pod: str
    fired: int = 0
    hit: set[str] = field(default_factory=set)  # processes it fired on

    def due(self, seen: Sighting, now: float) -> str | None:
        """Why it fires on `seen` at `now` ('at step 205', 'after 30s'), or None."""
        inj = self.injection
        if self.fired >= inj.times or seen.process in self.hit:
            return None
        if inj.attempt is not None and seen.attempt != inj.attempt:
            return None
        if inj.restart is not None and seen.restarts != inj.restart:
            return None
        if inj.after is not None and now - seen.since < inj.after:
            return None
        if inj.at_step is not None and (seen.step is None or seen.step < inj.at_step):
            return None
        reasons = []
        if inj.at_step is not None:
            reasons.append(f"at step {seen.step}")
        if inj.after is not None or inj.at_step is None:
            reasons.append(f"after {now - seen.since:.1f}s")
        return " ".join(reasons) + f", attempt {seen.attempt}, restarts {seen.restarts}"

    def fire(self, seen: Sighting) -> str:
        """Count a firing on `seen`; '1 of 2'."""
        self.fired += 1
        self.hit.add(seen.process)
        return f"{self.fired} of {self.injection.times}"

    def unfired(self) -> str | None:
        """A line for the end of the run when it fired fewer times than asked, else None."""
        if self.fired >= self.injection.times:
            return None
        fired = f"fired {self.fired} of {self.injection.times} times" if self.fired \
            else "never fired"
        return f"inject ({self.injection.text}): {fired}: its conditions did not come true " \
               f"on a running {self.pod} before the run ended"


def arm(injections: Sequence[Injection], job_name: str,
        replicas: Sequence[Replica]) -> list[Trigger]:
    """Every injection bound to its pod; the first naming a replica the job lacks raises."""
    return [Trigger(inj, resolve_replica(inj, job_name, replicas)) for inj in injections]
