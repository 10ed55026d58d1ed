"""The exception tree of trainjobs.

Why one module: callers (the CLI, the operator, plugins) need to tell a user's mistake from a
passing fault from a bug. A `SpecInvalid` carries every problem found in a job, each naming the
field path, so that the CLI can print them without a traceback and the operator can put them in
the job's Failed condition.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "InjectInvalid",
    "PermanentError",
    "PluginError",
    "PluginRefused",
    "ProgramMissing",
    "SpecError",
    "SpecInvalid",
    "TemporaryError",
    "TrainjobsError",
]


class TrainjobsError(Exception):
    """Base of every error trainjobs raises on purpose."""


@dataclass(frozen=True, order=True)
class SpecError:
    """One problem in a job spec: where it is (a dotted path) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecInvalid(TrainjobsError):
    """A job (or job file) is not valid. `errors` lists every problem found, not only the first."""

    def __init__(self, errors: list[SpecError], source: str = "") -> None:
        self.errors = sorted(set(errors))
        self.source = source
        super().__init__(self.summary())

    def summary(self) -> str:
        head = f"{self.source}: invalid job" if self.source else "invalid job"
        lines = [f"{head} ({len(self.errors)} problem{'s' if len(self.errors) != 1 else ''}):"]
        lines += [f"  - {e}" for e in self.errors]
        return "\n".join(lines)


class ProgramMissing(TrainjobsError):
    """A program the local runtime itself needs (redis-server) is not installed: not the
    job's fault, nor its failure. The message says how to get it."""


class NoCheckpoint(TrainjobsError):
    """`trainjobs run --resume`: no saved checkpoint of the job to resume from (or an
    unreadable one). The message names where it looked."""


class InjectInvalid(TrainjobsError):
    """`trainjobs run --inject`: an injection that does not parse, or names a replica the
    job does not have. One line naming the injection and the problem; nothing ran yet."""


class PluginError(TrainjobsError):
    """A plugin failed to load, declared something inconsistent, or broke a hook's contract."""


class PluginRefused(PluginError):
    """A plugin was refused while the plugins loaded (it failed to import, misnamed a hook or
    an argument, asked for a hook option the core cannot honour, left out a required part,
    or declared a kind already taken): nothing ran yet. The message is one line naming the
    plugin and its package; the CLI exits 2 with it, the operator does not start."""


class TemporaryError(TrainjobsError):
    """A reconcile step failed for a passing reason; retry after `delay` seconds."""

    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(TrainjobsError):
    """A reconcile step can never succeed for this object as it is; report it, do not retry."""
