"""`render`, `convert` and `run` read and write YAML with libyaml's C implementation where
PyYAML has it (issue 28.5), with the same output as PyYAML's pure-Python one, byte for byte.

Compared on real documents (every example job rendered, the CRDs, multi-document bundles),
on strings YAML treats specially (booleans, numbers, indicators, quotes, line breaks, tabs,
non-ASCII, long strings that fold), and on random strings and texts; and the C path is
shown to be the one taken.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainjobs import yamlio
from trainjobs.core.render import render_job
from trainjobs.core.validation import load_job_file
from trainjobs.crdgen import crd_for
from trainjobs.errors import SpecInvalid
from trainjobs.yamlio import dump_all, load_documents

from .helpers import PLUGINS, framework_of

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*/*.yaml"))

SPECIAL = [
    "", " ", "yes", "no", "on", "off", "true", "False", "null", "~", "0123", "0x1f", "1e3",
    ".inf", "-", "- x", ": ", "a: b", "#", "a #b", "'", '"', "''", "x'y", 'x"y', "&a", "*a",
    "!tag", "%x", "@x", "`x", "{a: 1}", "[1, 2]", "?", "|", ">", "trailing ", " leading",
    "multi\nline", "multi\n  indented\nlines", "ends with break\n", "\n", "tab\there",
    "non-ASCII: é ü 中文", "line\u2028separator", "nel\x85", "bom\ufeff", "\x00null char",
    "2026-01-01", "2026-01-01T00:00:00Z", "1:30", "+1", "=", "<<",
    "a " * 80, "word" * 60, ("x " * 30 + "\n") * 5,
    '{"cluster": {"worker": ["w-0:9091", "w-1:9091"]}, "task": {"type": "worker"}}' * 20,
]


def rendered(path: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for job in load_job_file(path, PLUGINS).jobs:
        docs += render_job(job, framework_of(job.kind), PLUGINS).manifests()
    return docs


def test_libyaml_is_there_to_be_used() -> None:
    assert yamlio.LIBYAML, (
        "this PyYAML has no libyaml (yaml.__with_libyaml__ is false): render/convert/run "
        "fall back to the pure-Python emitter and parser, ~30x slower on large jobs")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rendered_examples_are_written_the_same(path: Path) -> None:
    docs = rendered(path)
    assert len(docs) > 1
    assert dump_all(docs) == dump_all(docs, pure=True)


def test_the_crds_are_written_the_same() -> None:
    """The CRDs' descriptions are long multi-line strings: double-quoted and folded."""
    crds = [crd_for(fw) for fw in PLUGINS.frameworks.values()]
    out = dump_all(crds)
    assert '\\\n' in out  # a folded double-quoted string is in there
    assert out == dump_all(crds, pure=True)


def test_special_strings_as_values_and_keys_at_every_depth() -> None:
    docs: list[Any] = []
    for depth in (0, 1, 4, 12):
        for text in SPECIAL:
            node: Any = text
            for level in range(depth):
                node = {f"k{level}": node} if level % 3 else [node, "plain"]
            docs.append({"value": node, text or "empty": 1, "n": [1, 2.5, None, True]})
    # One bundle, plain and special documents interleaved, and each on its own.
    assert dump_all(docs) == dump_all(docs, pure=True)
    for doc in docs:
        assert dump_all([doc]) == dump_all([doc], pure=True), doc
    assert load_documents(dump_all(docs)) == docs


def test_multi_document_bundles_mixing_plain_and_special_documents() -> None:
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
             "data": {"lr": "0.1"}}
    special = {"kind": "Pod", "spec": {"command": ["python", "-c", "import os\n  print(1)"]}}
    for bundle in ([plain, special, plain], [special, plain, special], [plain] * 3,
                   [special] * 3, [], [plain], ["a scalar document", plain], [[1, 2], plain]):
        assert dump_all(bundle) == dump_all(bundle, pure=True) == \
            yaml.dump_all(bundle, Dumper=yamlio._PlainDumper, sort_keys=False, width=100)


def test_random_strings_are_written_the_same() -> None:
    rng = random.Random(28)
    alphabet = list("aaaabc  ::#-'\"{}[],&*!|>%@`?\n\t\xe9\u2028\x85\ufeff0.")
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 5, 60, 101, 250])))
        doc = {"k": {"deeper": [text]}, text[:20] or "e": "v"}
        assert dump_all([doc, {"x": text}]) == dump_all([doc, {"x": text}], pure=True), text


def test_random_texts_are_read_the_same_or_refused_in_the_same_words() -> None:
    rng = random.Random(29)
    alphabet = list("ab c:  -\n\n  #'\"{}[],&*!|>%@`?\t0.1yesno~é---...\r")

    def read(text: str, pure: bool) -> object:
        try:
            if pure:
                return [d for d in yaml.safe_load_all(text) if d is not None]
            return [d for d in yamlio._load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            return ("error", mark.line if mark else None, mark.column if mark else None,
                    getattr(exc, "problem", None))

    for _ in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
        assert read(text, pure=False) == read(text, pure=True), text


def test_repository_yaml_files_are_read_the_same() -> None:
    files = [p for d in ("examples", "tests", "trainjobs") for p in (REPO / d).glob("**/*.yaml")]
    files.append(REPO / "crds" / "trainjobs.io_tfjobs.yaml")
    assert len(files) > 5
    for path in files:
        text = path.read_text()
        assert load_documents(text, str(path)) == \
            yamlio._expand_lists([d for d in yaml.safe_load_all(text) if d is not None]), path


def test_a_syntax_error_is_reported_as_before() -> None:
    text = "a: 1\nb: [unclosed\nc: 3\n"
    with pytest.raises(yaml.YAMLError) as pure:
        list(yaml.safe_load_all(text))
    mark = pure.value.problem_mark  # type: ignore[attr-defined]
    with pytest.raises(SpecInvalid) as caught:
        load_documents(text, "job.yaml")
    assert str(caught.value.errors[0].message) == (
        f"invalid YAML: line {mark.line + 1}, column {mark.column + 1}: "
        f"{pure.value.problem}")  # type: ignore[attr-defined]


def test_the_c_emitter_writes_what_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    original = yamlio._dump

    def spy(docs: list[Any], dumper: type[Any]) -> str:
        used.append(f"{dumper.__mro__[1].__name__} x{len(docs)}")
        return original(docs, dumper)

    monkeypatch.setattr(yamlio, "_dump", spy)
    docs = rendered(REPO / "examples" / "mxnet" / "dist-sync.yaml")
    dump_all(docs)
    assert used == [f"CSafeDumper x{len(docs)}"]
    used.clear()
    dump_all([{"a": 1}, {"b": "two\nlines"}, {"c": 3}])
    assert used == ["CSafeDumper x1", "SafeDumper x1", "CSafeDumper x1"]


@pytest.mark.parametrize("command", ["render", "convert"])
def test_the_commands_print_what_they_printed_without_libyaml(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through `trainjobs render` / `convert`: a multi-document file (a job, its
    ConfigMap with a multi-line script), with libyaml and with everything pure."""
    from trainjobs.cli import main

    source = REPO / ("examples/tensorflow/ps.yaml" if command == "render"
                     else "tests/fixtures/kubeflow/mxjob-v1-dist.yaml")
    script = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "script"},
              "data": {"run.sh": "#!/bin/sh\nset -e\n  exec python train.py \"$@\"\n"}}
    bundle = tmp_path / "bundle.yaml"
    bundle.write_text(source.read_text().rstrip("\n") + "\n---\n" + yaml.safe_dump(script))
    assert main([command, str(bundle)]) == 0
    with_c = capsys.readouterr().out
    monkeypatch.setattr(yamlio, "LIBYAML", False)
    assert main([command, str(bundle)]) == 0
    pure = capsys.readouterr().out
    assert with_c == pure
    assert with_c.count("\n---\n") >= 1
