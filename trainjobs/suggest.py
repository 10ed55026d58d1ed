"""`did you mean ...?` for a misspelt name, shared by every layer that refuses one.

Why difflib: the standard library's close-match ratio is what catches `imagePullPolicyy` or
`Workers` without a dependency; a case-only difference (`WORKER`, `ps`) is checked first,
since difflib's ratio is case-sensitive.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]

CUTOFF = 0.75


def did_you_mean(name: str, allowed: Iterable[str]) -> str:
    """`; did you mean X?` for the closest allowed name, or "" when none is close."""
    allowed = list(allowed)
    by_lower = {a.lower(): a for a in allowed}
    if name.lower() in by_lower and by_lower[name.lower()] != name:
        return f"; did you mean {by_lower[name.lower()]}?"
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=CUTOFF)
    return f"; did you mean {by_lower[close[0]]}?" if close else ""
