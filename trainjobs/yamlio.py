"""YAML in and out: multi-document files read with positions in errors, output people read.

Why one module: `trainjobs render`, `trainjobs run` and `trainjobs convert` all read files
that hold several documents (users keep a job with its ConfigMaps, Services and PVCs), and
must split them, report a YAML error with its line and column, and name what they skip in
the same words. Output is block style, without anchors, keys in the order we built them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from trainjobs.errors import SpecError, SpecInvalid

__all__ = ["describe", "dump_all", "ignored_note", "load_documents", "read_documents"]

LIST_KINDS = frozenset({"List"})


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_all(docs: Iterable[Any]) -> str:
    return yaml.dump_all(list(docs), Dumper=_PlainDumper, sort_keys=False, width=100)


def load_documents(text: str, source: str = "") -> list[Any]:
    """Every non-empty document of a (multi-document) YAML text, in file order.

    Raises `SpecInvalid` naming the line and column of a syntax error; an empty text has no
    documents (what that means is the caller's to say)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecInvalid([SpecError("", f"invalid YAML: {where}{problem}")], source) from None
    return _expand_lists(docs)


def _expand_lists(docs: list[Any]) -> list[Any]:
    """A `kind: List` (what `kubectl get -o yaml` prints) stands for its items."""
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") in LIST_KINDS and \
                isinstance(doc.get("items"), list):
            out += [item for item in doc["items"] if item is not None]
        else:
            out.append(doc)
    return out


def read_documents(path: Path) -> list[Any]:
    """`load_documents` of a file; an unreadable file is a `SpecInvalid` naming it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecInvalid([SpecError("", f"cannot read file: {exc.strerror}")], str(path)) from None
    return load_documents(text, str(path))


def describe(doc: Any) -> str:
    """`Kind/name` of a Kubernetes object document, as kubectl names it (`?` for what is
    missing)."""
    if not isinstance(doc, dict):
        return f"a {type(doc).__name__} document"
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{doc.get('kind') or '?'}/{name or '?'}"


def ignored_note(refs: list[str]) -> str:
    """The one line that names the objects of a file a command leaves alone."""
    return (f"note: ignoring {len(refs)} object{'s' if len(refs) != 1 else ''} that "
            f"{'are' if len(refs) != 1 else 'is'} not a job: {', '.join(refs)} "
            "(kubectl apply creates those)")
