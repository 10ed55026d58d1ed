"""The operator keeps each active job's rendering packed: it must come back exactly, and small."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.unit.helpers import EXAMPLES, load_doc, parse, render
from trainjobs.operator.cache import PackedRender
from trainjobs.plugin.types import Replica


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


async def test_packing_in_slices_gives_the_same_and_lets_the_loop_run_between_chunks() -> None:
    import asyncio

    from tests.unit.helpers import tfjob
    from trainjobs.operator.cache import CHUNK_REPLICAS

    rendered = render(parse(tfjob(Chief=1, Worker=CHUNK_REPLICAS * 3)))
    items = [(name, rendered.replicas[name], rendered.pods[name], rendered.services[name])
             for name in rendered.pods]
    ran: list[int] = []
    loop = asyncio.get_running_loop()

    def beside() -> None:  # another task's turn: it must come while packing goes on
        ran.append(len(seen))
        if len(ran) < 10:
            loop.call_soon(beside)

    seen: list[str] = []

    def tracked() -> Iterator[tuple[str, Replica, dict[str, Any], dict[str, Any]]]:
        for item in items:
            seen.append(item[0])
            yield item

    loop.call_soon(beside)
    sliced = await PackedRender.of_sliced(tracked(), rendered.extras)
    assert sliced.unpack() == PackedRender.of(iter(items), rendered.extras).unpack() == rendered
    assert any(0 < n < len(items) for n in ran), ran
