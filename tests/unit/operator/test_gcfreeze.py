"""The freeze policy: full collections skip what survived the last one, a thaw reclaims the
cycles that died frozen, and 0 leaves CPython's collector as it is."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from trainjobs.operator.gcfreeze import FreezePolicy, install_gc_freeze


class Node:
    """A reference cycle: only the cyclic collector can free it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def clock() -> Iterator[list[float]]:
    now = [0.0]
    policy = FreezePolicy(60.0, clock=lambda: now[0])
    gc.callbacks.append(policy)
    try:
        yield now
    finally:
        gc.callbacks.remove(policy)
        gc.unfreeze()


def test_a_full_collection_freezes_what_survived_it(clock: list[float]) -> None:
    survivor = Node()
    gc.collect()
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(survivor)
    gc.collect(0)  # a young collection neither freezes nor thaws
    assert gc.get_freeze_count() > 0


def test_cycles_born_after_the_freeze_are_still_collected(clock: list[float]) -> None:
    gc.collect()
    young = Node()
    alive = weakref.ref(young)
    del young
    gc.collect()
    assert alive() is None


def test_a_cycle_that_died_frozen_waits_for_the_thaw(clock: list[float]) -> None:
    old = Node()
    alive = weakref.ref(old)
    gc.collect()  # frozen while alive
    del old
    gc.collect()
    assert alive() is not None, "frozen objects are out of the collector's walks"
    clock[0] += 59
    gc.collect()
    assert alive() is not None
    clock[0] += 1  # the thaw interval has passed: this collection walks everything
    gc.collect()
    assert alive() is None
    assert gc.get_freeze_count() > 0, "and freezes again after it"


def test_install_replaces_and_zero_removes() -> None:
    try:
        first = install_gc_freeze(3600)
        second = install_gc_freeze(3600)
        mine = [c for c in gc.callbacks if isinstance(c, FreezePolicy)]
        assert mine == [second] and first is not second
        assert gc.get_freeze_count() > 0, "the start-up heap is frozen at once"
        assert install_gc_freeze(0) is None
        assert not [c for c in gc.callbacks if isinstance(c, FreezePolicy)]
        assert gc.get_freeze_count() == 0
    finally:
        install_gc_freeze(0)
