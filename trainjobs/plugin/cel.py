"""`CelRule`: a validation rule a kind (or one of its capabilities) adds to its CRD.

Why its own module: both `Framework` (types.py) and every `Capability` (capabilities.py)
carry rules, and types.py refers to capabilities; with the rule here neither imports the
other back.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CelRule"]


@dataclass(frozen=True)
class CelRule:
    """A validation rule for the kind's CRD, in CEL, with `self` the whole object.

    For what a plugin's `validate` refuses and a rule can express, so that `kubectl apply`
    refuses it too (the API server's message is `message`).
    """

    rule: str
    message: str
