"""The operator keeps each active job's rendering packed: it must come back exactly, and small."""

from __future__ import annotations

import json

from tests.unit.helpers import EXAMPLES, load_doc, parse, render
from trainjobs.operator.cache import PackedRender


def test_every_example_unpacks_to_its_rendering() -> None:
    for path in EXAMPLES:
        rendered = render(parse(load_doc(path)))
        unpacked = PackedRender.pack(rendered).unpack()
        assert unpacked == rendered, path.name
        assert list(unpacked.pods) == list(rendered.pods)  # creation order is kept


def test_unpack_hands_out_fresh_objects() -> None:
    packed = PackedRender.pack(render(parse(load_doc(EXAMPLES[0]))))
    first = packed.unpack()
    name = next(iter(first.pods))
    first.pods[name]["metadata"]["labels"]["mutated"] = "yes"
    first.replicas.clear()
    again = packed.unpack()
    assert "mutated" not in again.pods[name]["metadata"]["labels"]
    assert name in again.replicas


def test_packed_is_a_fraction_of_the_manifests() -> None:
    rendered = render(parse(load_doc(EXAMPLES[0])))
    plain = len(json.dumps(rendered.pods)) + len(json.dumps(rendered.services))
    assert PackedRender.pack(rendered).size * 4 < plain
