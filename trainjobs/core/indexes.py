"""Sets of replica indexes written compactly, as batch/v1 Jobs write completedIndexes: "0-3,7".

Why this format: the status of a job with thousands of replicas must stay small, and users
already know it from Indexed Jobs.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["format_indexes", "parse_indexes"]

# A status written by someone else could claim any range: never expand more than this.
MAX_INDEX = 1_000_000


def parse_indexes(text: str) -> set[int]:
    """The indexes "0-3,7" names; malformed parts are ignored (status is not user input)."""
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            continue
        if 0 <= lo <= hi <= MAX_INDEX:
            out.update(range(lo, hi + 1))
    return out


def format_indexes(indexes: Iterable[int]) -> str:
    """Sorted, with runs joined: {0, 1, 2, 3, 7} -> "0-3,7"."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(_run(run))
        run = [i]
    if run:
        parts.append(_run(run))
    return ",".join(parts)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"
