"""Two operators with leader election; the leader is SIGKILLed during a burst of creates: the
standby takes over within the lease and every job ends, without duplicates or orphans."""

from __future__ import annotations

import pytest

from tests.chaos.harness import ChaosEnv
from tests.chaos.scenarios import leader_kill

pytestmark = pytest.mark.integration


def test_leader_kill_during_a_burst(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(leader_kill(chaos_env, jobs=8, budget=90))
    assert figures.problems() == []
    # Lease 4 s, retry 1 s: the standby leads within lease + retry (+ slack for 2 CPUs).
    assert figures.recovery_s["leader kill to standby leading"] < 15, figures


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_leader_kill_during_a_burst_of_100(chaos_env: ChaosEnv) -> None:
    figures = chaos_env.record(leader_kill(chaos_env, jobs=100, budget=300))
    assert figures.problems() == []
    assert figures.recovery_s["leader kill to standby leading"] < 15, figures
