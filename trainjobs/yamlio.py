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

Why bounds before composing: both parsers build nested collections by recursion (PyYAML's
pure composer in Python frames, its C loader on the C stack), so a hostile file of 50,000
nested `[` killed the process with SIGSEGV and 10,000 raised RecursionError. The text is
first walked as the parser's own event stream (iterative in both parsers, so flow `[`/`{` and
block nesting are counted alike, by the parser that will read it) and refused at the first
collection deeper than `MAX_DEPTH`; the walk stops there, so its cost stays linear. The same
walk counts what aliases expand to: PyYAML shares an aliased node, but validating, converting
and writing a job visits it once per alias, so nine nested aliases of nine (a "billion
laughs") would otherwise hang `trainjobs convert`, and so would an alias inside the
collection it names (PyYAML builds a structure that contains itself).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from trainjobs.errors import SpecError, SpecInvalid

__all__ = ["LIBYAML", "MAX_ALIAS_NODES", "MAX_DEPTH", "decode", "describe", "dump_all",
           "ignored_note", "load_documents", "read_documents", "read_one"]

LIST_KINDS = frozenset({"List"})
#: Whether PyYAML has libyaml's C emitter and parser here.
LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))
#: Printable ASCII, what `_may_be_double_quoted` deletes (bytes.translate: ~1 GB/s).
_PRINTABLE = bytes(range(0x20, 0x7F))
#: A text libyaml reads otherwise than the pure parser.
_PURE_TEXT = re.compile(r"[\t!]|[|>][-+0-9]*#")
_WIDTH = 100
#: Deepest nesting of collections a document may have: a job with node affinity nests 14
#: deep, trainjobs' CRDs 34, and the pure composer overflows Python's stack near 500.
MAX_DEPTH = 100
#: Most nodes that aliases may add to a file's documents, beyond the nodes written.
MAX_ALIAS_NODES = 100_000
#: Byte-order marks and the encodings they announce (YAML 1.1 reads UTF-8 and UTF-16).
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
         (codecs.BOM_UTF16_BE, "utf-16-be"))


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


class _Unbounded(yaml.MarkedYAMLError):
    """A text nested too deep, holding a structure that contains itself, or whose aliases
    expand too far, to be composed and used safely."""

    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def _check_bounds(text: str, loader: type[Any]) -> None:
    """Walks `text` as `loader`'s parser reads it (events, no recursion); raises `_Unbounded`
    at the first collection deeper than MAX_DEPTH, at an alias inside the collection it names
    (a structure that contains itself: walking it never ends), or once aliases add more than
    MAX_ALIAS_NODES nodes. Where the parser fails, or the composer will refuse (an undefined
    or a duplicate anchor), the walk stops and leaves the refusal to the load that follows, so
    that it comes in the same words and order as without the walk: no load reads past it."""
    open_sizes: list[tuple[str | None, int]] = []  # (anchor, nodes so far) per open collection
    anchored: dict[str, int] = {}  # nodes under each closed anchor of the document
    added = 0
    events = yaml.parse(text, Loader=loader)
    while True:
        try:
            event = next(events)
        except (StopIteration, yaml.YAMLError):
            return
        if isinstance(event, yaml.DocumentStartEvent):
            anchored.clear()  # anchors are the document's own
            continue
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent):
            if any(anchor == a for a, _ in open_sizes):
                raise _Unbounded(event.start_mark, "an alias inside the collection it names "
                                                   "(a structure that contains itself)")
            size = anchored.get(anchor or "", -1)
            if size < 0:
                return  # the composer refuses the undefined alias here
            anchor = None
            added += size - 1
            if added > MAX_ALIAS_NODES:
                raise _Unbounded(event.start_mark, f"aliases expand to more than "
                                                   f"{MAX_ALIAS_NODES:,} nodes")
        elif anchor is not None and (anchor in anchored or
                                     any(anchor == a for a, _ in open_sizes)):
            return  # the composer refuses the duplicate anchor here
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_sizes) == MAX_DEPTH:
                raise _Unbounded(event.start_mark,
                                 f"collections nested deeper than {MAX_DEPTH} levels")
            open_sizes.append((anchor, 1))
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = open_sizes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            size = 1
        elif not isinstance(event, yaml.AliasEvent):
            continue
        if anchor is not None:
            anchored[anchor] = size
        if open_sizes:
            parent_anchor, parent_size = open_sizes[-1]
            open_sizes[-1] = (parent_anchor, parent_size + size)


def _load_all(text: str) -> list[Any]:
    if LIBYAML and not _PURE_TEXT.search(text):
        try:
            _check_bounds(text, yaml.CSafeLoader)
            return list(yaml.load_all(text, Loader=yaml.CSafeLoader))
        except _Unbounded:
            raise  # the pure parser would read the same events
        except yaml.YAMLError:
            pass  # read again by the pure parser, which words the error as before
    _check_bounds(text, yaml.SafeLoader)
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
    docs = _expand_lists(docs)
    _check_type_fields(docs, source)
    return docs


def _check_type_fields(docs: list[Any], source: str) -> None:
    """Every object's `apiVersion` and `kind` are strings, as Kubernetes (and kubectl) read
    them: commands compare and look them up, and a list or mapping there is no object."""
    several = len(docs) > 1
    errors = [SpecError(f"document {number}: {key}" if several else key,
                        f"must be a string, got a {type(doc[key]).__name__} ({doc[key]!r:.60})")
              for number, doc in enumerate(docs, 1) if isinstance(doc, dict)
              for key in ("apiVersion", "kind")
              if key in doc and doc[key] is not None and not isinstance(doc[key], str)]
    if errors:
        raise SpecInvalid(errors, source)


def _expand_lists(docs: list[Any]) -> list[Any]:
    """A `kind: List` (what `kubectl get -o yaml` prints) stands for its items."""
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and \
                doc["kind"] in LIST_KINDS and \
                isinstance(doc.get("items"), list):
            out += [item for item in doc["items"] if item is not None]
        else:
            out.append(doc)
    return out


def read_documents(path: Path) -> list[Any]:
    """`load_documents` of a file; an unreadable file, or one that is not text in an encoding
    YAML reads (UTF-8, or UTF-16 with its byte-order mark, as kubectl reads it), is a
    `SpecInvalid` naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecInvalid([SpecError("", f"cannot read file: {exc.strerror}")], str(path)) from None
    return load_documents(decode(data, str(path)), str(path))


def read_one(path: Path) -> Any:
    """The one document of a settings file (a kubeconfig, the operator's controller config),
    read with `read_documents`' encodings and bounds; None when it has none. Raises
    `SpecInvalid` (the callers word it as their own error)."""
    docs = read_documents(path)
    if len(docs) > 1:
        raise SpecInvalid([SpecError("", f"holds {len(docs)} documents, expected one")],
                          str(path))
    return docs[0] if docs else None


def decode(data: bytes, source: str = "") -> str:
    """The text of a file's bytes: UTF-16 when a byte-order mark says so, else UTF-8. Bytes
    that do not decode are a `SpecInvalid` naming where they are."""
    codec, skip = "utf-8", 0
    for bom, name in _BOMS:
        if data.startswith(bom):
            codec, skip = name, len(bom)
            break
    try:
        return data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        at = skip + exc.start
        line = data[:at].count(b"\n") + 1
        where = f"line {line}, " if codec == "utf-8" else ""
        message = (f"not {codec.upper()} text: {where}byte {at} (0x{data[at]:02x}) does not "
                   "decode; save the file as UTF-8")
        raise SpecInvalid([SpecError("", message)], source) from None


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
