"""YAML in and out: multi-document files read with positions in errors, output people read.

Why one module: `trainjobs render`, `trainjobs run` and `trainjobs convert` all read files
that hold several documents (users keep a job with its ConfigMaps, Services and PVCs), and
must split them, report a YAML error with its line and column, and name what they skip in
the same words. Output is block style, without anchors, keys in the order we built them.

Why libyaml where it can: PyYAML's pure-Python emitter writes ~0.7 MB/s, and a large job's
rendering is large (an MxJob of 2,000 Workers: ~160 MB, every pod's MX_CONFIG listing every
peer); libyaml's C emitter and parser, which PyYAML wraps when built with it, are tens of
times faster. Their output is made the same as the pure implementation's, byte for byte: the
one place where libyaml writes otherwise is how it folds a long double-quoted string, and
only strings with a character outside printable ASCII (a line break, a tab, non-ASCII) are
ever double-quoted, so a document holding such a string is written by the pure emitter.
Likewise a text the C parser would read otherwise (a tab, a `!` tag, a comment right after a
block scalar's indicator) or refuses (so the error is worded as before) is read by the pure
parser. Without libyaml, everything is pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from trainjobs.errors import SpecError, SpecInvalid

__all__ = ["LIBYAML", "describe", "dump_all", "ignored_note", "load_documents",
           "read_documents"]

LIST_KINDS = frozenset({"List"})
#: Whether PyYAML has libyaml's C emitter and parser here.
LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))
#: Printable ASCII, what `_may_be_double_quoted` deletes (bytes.translate: ~1 GB/s).
_PRINTABLE = bytes(range(0x20, 0x7F))
#: A text libyaml reads otherwise than the pure parser.
_PURE_TEXT = re.compile(r"[\t!]|[|>][-+0-9]*#")
_WIDTH = 100


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


if LIBYAML:
    class _FastDumper(yaml.CSafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True


def dump_all(docs: Iterable[Any], *, pure: bool = False) -> str:
    """The documents as one multi-document YAML text; `pure`: with PyYAML's Python emitter
    only (the output is the same either way: it is for comparing)."""
    docs = list(docs)
    if pure or not LIBYAML or not all(isinstance(d, dict) for d in docs):
        return _dump(docs, _PlainDumper)
    # Runs of documents by emitter, joined as dump_all joins documents (`---` before each
    # but the first; mappings never leave a document open-ended).
    parts: list[str] = []
    run: list[Any] = []
    fast = True
    for doc in docs:
        wants_fast = not _may_be_double_quoted(doc)
        if run and wants_fast != fast:
            parts.append(_dump(run, _FastDumper if fast else _PlainDumper))
            run = []
        fast = wants_fast
        run.append(doc)
    if run:
        parts.append(_dump(run, _FastDumper if fast else _PlainDumper))
    return "---\n".join(parts)


def _dump(docs: list[Any], dumper: type[Any]) -> str:
    return yaml.dump_all(docs, Dumper=dumper, sort_keys=False, width=_WIDTH)


def _may_be_double_quoted(doc: Any) -> bool:
    """Whether a string of `doc` (key or value) has a character outside printable ASCII
    (0x20-0x7E): only such a string may be double-quoted (and libyaml would fold it
    otherwise when long)."""
    return not all(text.isascii() and not text.encode().translate(None, _PRINTABLE)
                   for text in _strings(doc))


def _strings(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _load_all(text: str) -> list[Any]:
    if LIBYAML and not _PURE_TEXT.search(text):
        try:
            return list(yaml.load_all(text, Loader=yaml.CSafeLoader))
        except yaml.YAMLError:
            pass  # read again by the pure parser, which words the error as before
    return list(yaml.load_all(text, Loader=yaml.SafeLoader))


def load_documents(text: str, source: str = "") -> list[Any]:
    """Every non-empty document of a (multi-document) YAML text, in file order.

    Raises `SpecInvalid` naming the line and column of a syntax error; an empty text has no
    documents (what that means is the caller's to say)."""
    try:
        docs = [d for d in _load_all(text) if d is not None]
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
