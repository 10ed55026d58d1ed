"""What reaches the YAML composers is bounded, and what is not text is refused, in every
reader of user files: job files (trainjobs/yamlio.py), the operator's controller config and
kubeconfigs. The commands themselves are run on hostile files by test_cli_hostile_files.py.

Both PyYAML composers recurse once per nesting level (the C loader on the C stack: SIGSEGV at
50,000 `[`), so depth is counted on the parser's event stream first, flow and block alike, by
whichever parser (libyaml or pure) will then read the text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainjobs.errors import SpecInvalid, TrainjobsError
from trainjobs.kube import KubeconfigError
from trainjobs.kube.kubeconfig import load
from trainjobs.operator.settings import read_config_file
from trainjobs.yamlio import LIBYAML, MAX_ALIAS_NODES, MAX_DEPTH, load_documents, read_documents

from .helpers import mxjob


def _flow(depth: int) -> str:
    return "[" * depth + "]" * depth


def _block(depth: int) -> str:
    """`depth` nested block mappings, each indented under its key."""
    return "".join("  " * level + "k:\n" for level in range(depth - 1)) + \
        "  " * (depth - 1) + "k: 1\n"


def _refusal(text: str) -> str:
    with pytest.raises(SpecInvalid) as refused:
        load_documents(text, "f.yaml")
    (error,) = refused.value.errors
    return error.message


def _depth(node: object) -> int:
    if isinstance(node, dict):
        return 1 + max((_depth(v) for v in node.values()), default=0)
    if isinstance(node, list):
        return 1 + max((_depth(v) for v in node), default=0)
    return 0


@pytest.mark.parametrize("shape", ["flow", "flow-mapping", "block", "compact-block",
                                   "pure-parser"])
def test_the_deepest_allowed_reads_and_one_more_is_refused(shape: str) -> None:
    texts = {
        "flow": _flow,
        "flow-mapping": lambda d: "{a: " * d + "1" + "}" * d,
        "block": _block,
        "compact-block": lambda d: "- " * d + "x\n",
        # a tab sends the text to the pure parser (see yamlio): bounded the same
        "pure-parser": lambda d: "#\t\n" + _flow(d),
    }
    make = texts[shape]
    (doc,) = load_documents(make(MAX_DEPTH))
    assert _depth(doc) == MAX_DEPTH
    message = _refusal(make(MAX_DEPTH + 1))
    assert message.startswith("invalid YAML: line ")
    assert message.endswith(f"collections nested deeper than {MAX_DEPTH} levels")


def test_a_deep_hostile_text_is_refused_at_once() -> None:
    """The walk stops at the first level too deep: a million `[` costs nothing like a parse."""
    assert _refusal("[" * 1_000_000).startswith(f"invalid YAML: line 1, column {MAX_DEPTH + 1}")


def test_aliases_read_until_they_expand_past_the_bound() -> None:
    shared = ", ".join(f"e{i}" for i in range(99))  # a sequence of 100 nodes with itself
    used = (MAX_ALIAS_NODES // 99)
    text = f"a: &s [{shared}]\nb: [{', '.join(['*s'] * used)}]\n"
    (doc,) = load_documents(text)
    assert len(doc["b"]) == used and doc["b"][0] is doc["a"]
    over = text.replace("b: [", "b: [*s, ")
    assert _refusal(over).endswith(f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes")


@pytest.mark.parametrize("text", ["a: &s [*s]\n", "a: &s {b: [1, *s]}\n"])
def test_a_structure_that_contains_itself_is_refused(text: str) -> None:
    """PyYAML builds it (the alias is the node being built); walking it never ends."""
    assert _refusal(text).endswith("an alias inside the collection it names "
                                   "(a structure that contains itself)")


def test_anchors_are_each_documents_own() -> None:
    """An anchor of one document does not size an alias of the next (which is an error of its
    own, worded by the composer)."""
    message = _refusal("a: &s [1, 2]\n---\nb: *s\n")
    assert "found undefined alias" in message


@pytest.mark.parametrize("key", ["kind", "apiVersion"])
@pytest.mark.parametrize("value", [["MxJob"], {"a": 1}, 3])
def test_type_fields_must_be_strings(key: str, value: object) -> None:
    doc = {**mxjob("x"), key: value}
    message = _refusal(yaml.safe_dump(doc))
    assert message == f"must be a string, got a {type(value).__name__} ({value!r})"
    with pytest.raises(SpecInvalid) as refused:
        load_documents(yaml.safe_dump_all([mxjob("a"), doc]), "f.yaml")
    assert refused.value.errors[0].path == f"document 2: {key}"


def test_a_list_kind_inside_a_list_is_refused_not_crashed() -> None:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                           "items": [{**mxjob("x"), "kind": ["MxJob"]}]})
    assert _refusal(text).startswith("must be a string, got a list")


def test_utf16_with_its_byte_order_mark_reads_as_kubectl_reads_it(tmp_path: Path) -> None:
    text = yaml.safe_dump(mxjob("caf\u00e9"))
    for codec in ("utf-16", "utf-16-le", "utf-16-be", "utf-8-sig"):
        path = tmp_path / f"{codec}.yaml"
        data = text.encode(codec)
        if codec.endswith(("-le", "-be")):  # the mark written by hand, as editors do
            data = "\ufeff".encode(codec) + data
        path.write_bytes(data)
        assert read_documents(path) == [mxjob("caf\u00e9")], codec


@pytest.mark.parametrize(("data", "words"), [
    (b"kind: MxJob\nname: caf\xe9\n", "not UTF-8 text: line 2, byte 21 (0xe9)"),
    (b"\xff\xfek\x00\x00\xdc", "not UTF-16-LE text: byte 4 (0x00)"),
    (b"\xfe\xff\xd8\x00", "not UTF-16-BE text: byte 2 (0xd8)"),
])
def test_bytes_that_do_not_decode_are_named(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(data)
    with pytest.raises(SpecInvalid) as refused:
        read_documents(path)
    assert refused.value.source == str(path)
    (error,) = refused.value.errors
    assert error.message.startswith(words), error.message
    assert error.message.endswith("save the file as UTF-8")


HOSTILE_SETTINGS = {
    "deep": (b"[" * 50_000, f"nested deeper than {MAX_DEPTH} levels"),
    "latin-1": (b"gang: {name: caf\xe9}\n", "not UTF-8 text: line 1"),
    "kind-list": (b"kind: [Config]\n", "kind: must be a string, got a list"),
    "two-documents": (b"a: 1\n---\nb: 2\n", "holds 2 documents, expected one"),
}


@pytest.mark.parametrize("case", list(HOSTILE_SETTINGS))
def test_controller_config_file_refusals_name_flag_path_and_problem(tmp_path: Path,
                                                                    case: str) -> None:
    data, words = HOSTILE_SETTINGS[case]
    path = tmp_path / "config.yaml"
    path.write_bytes(data)
    with pytest.raises(TrainjobsError) as refused:
        read_config_file(str(path))
    message = str(refused.value)
    assert message.startswith(f"--controller-config-file {path}: ") and words in message
    assert "\n" not in message


@pytest.mark.parametrize("case", list(HOSTILE_SETTINGS))
def test_kubeconfig_refusals_name_path_and_problem(tmp_path: Path, case: str) -> None:
    data, words = HOSTILE_SETTINGS[case]
    path = tmp_path / "kubeconfig"
    path.write_bytes(data)
    with pytest.raises(KubeconfigError) as refused:
        load(str(path))
    message = str(refused.value)
    assert message.startswith(f"kubeconfig {path}: ") and words in message
    assert "\n" not in message


def test_the_pure_parser_alone_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libyaml (and, above, for a text with a tab) the pure parser is walked instead."""
    assert LIBYAML  # above, the C parser was walked (test_yaml_libyaml says why it is there)
    monkeypatch.setattr("trainjobs.yamlio.LIBYAML", False)
    assert _refusal(_flow(MAX_DEPTH + 1)).endswith(f"nested deeper than {MAX_DEPTH} levels")
    assert load_documents(_flow(MAX_DEPTH)) == load_documents(_flow(MAX_DEPTH), "pure")
