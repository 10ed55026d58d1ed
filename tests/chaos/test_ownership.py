"""Ownership conflicts: two kinds under one name, a pod squatting a job's pod name, a stray
labelled pod, a job recreated at once under its name. Nothing is adopted, counted or deleted
that the job does not own; the loser fails with NameConflict."""

from __future__ import annotations

import pytest

from tests.chaos.harness import ChaosEnv
from tests.chaos.scenarios import ownership_conflicts

pytestmark = pytest.mark.integration


def test_ownership_conflicts(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(ownership_conflicts(chaos_env, rounds=1, budget=90))
    assert figures.problems() == []


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_ownership_conflicts_10_rounds(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(ownership_conflicts(chaos_env, rounds=10, budget=240))
    assert figures.problems() == []
