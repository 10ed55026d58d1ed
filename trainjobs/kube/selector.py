"""Kubernetes label selectors in their string form, parsed once and matched against labels.

Why here: the operator decides on its own which namespaces' unlabelled jobs go through Kueue
(`--managed-jobs-namespace-selector`, Kueue's `managedJobsNamespaceSelector`), from the
Namespaces its informer caches, so it evaluates the selector itself. The grammar is
apimachinery's `labels.Parse`: comma-separated requirements `key`, `!key`, `key=value`,
`key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`; all must hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from trainjobs.errors import TrainjobsError

__all__ = ["LabelSelector", "SelectorError", "parse_selector"]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")


class SelectorError(TrainjobsError):
    """A label selector that does not parse (named with the part that does not)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        # notin (and !=) hold for an absent key, as in apimachinery.
        return labels.get(self.key) not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """Requirements that must all hold (none: everything matches)."""

    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def _split(text: str) -> list[str]:
    """Commas separate requirements, except inside a value set's parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def parse_selector(text: str) -> LabelSelector:
    """`text` as a selector; raises `SelectorError` naming the part that is not one."""
    requirements: list[Requirement] = []
    if text.strip():
        for part in _split(text):
            if m := _SET.match(part):
                values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
                requirements.append(Requirement(m["key"], m["op"], values))
            elif m := _EQ.match(part):
                op = "notin" if m["op"] == "!=" else "in"
                requirements.append(Requirement(m["key"], op, frozenset({m["value"]})))
            elif m := _EXISTS.match(part):
                requirements.append(Requirement(m["key"], "!" if m["neg"] else "exists"))
            else:
                raise SelectorError(f"label selector {text!r}: cannot parse {part.strip()!r}")
    return LabelSelector(text, tuple(requirements))
