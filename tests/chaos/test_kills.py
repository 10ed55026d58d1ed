"""Operator SIGKILLs: pods recreated under kills are created once per failure (issue 15.8: the
fake kubelet used to delete the operator's recreated pods), and a storm of kills loses no job,
duplicates no pod and leaves no orphan."""

from __future__ import annotations

import pytest

from tests.chaos.harness import ChaosEnv
from tests.chaos.scenarios import sigkill_storm

pytestmark = pytest.mark.integration


def test_pods_recreated_under_operator_kills_are_created_once_per_failure(
    chaos_env: ChaosEnv,
) -> None:
    figures = chaos_env.record(sigkill_storm(
        chaos_env, jobs=8, kills=5, budget=90, failing_every=2, backoff=3))
    assert figures.problems() == []
    # The scenario did exercise recreation: 4 failing jobs, each Worker failing 4 times.
    assert figures.failures_recreated >= 4 * 3, figures
    assert figures.max_creates_per_pod_name == 4, figures


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_sigkill_storm_200_jobs_20_kills(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(sigkill_storm(
        chaos_env, jobs=200, kills=20, budget=400, failing_every=10, backoff=2))
    assert figures.problems() == []
    assert figures.finished == 200
