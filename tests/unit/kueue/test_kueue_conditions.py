"""The Workload status the operator writes: PodsReady (generatePodsReadyCondition), Finished,
the quota release after an eviction (reconciler.go:586-615), apimeta.SetStatusCondition."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.kueue_fixtures import (
    PREEMPTED_MESSAGE,
    T0,
    admission,
    admitted_cond,
    cond,
    quota_reserved,
    with_status,
)
from trainjobs.kueue.conditions import (
    MAX_CONDITION_MESSAGE,
    finished_conditions,
    pods_ready_condition,
    release_quota_patch,
    set_condition,
    truncate_message,
)

NOW = datetime(2026, 11, 25, 10, 10, tzinfo=UTC)
MANIFEST: dict[str, Any] = {"metadata": {"name": "wl", "namespace": "ns"},
                            "spec": {"podSets": [{"name": "worker", "count": 2}]}}


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conditions}


@pytest.mark.parametrize(("admitted", "current", "ready", "want"), [
    (False, None, True, ("False", "WaitForStart")),
    (True, None, False, ("False", "WaitForStart")),
    (True, None, True, ("True", "Started")),
    (True, ("True", "Started"), False, ("False", "WaitForRecovery")),
    (True, ("False", "WaitForRecovery"), False, ("False", "WaitForRecovery")),
    (True, ("False", "WaitForRecovery"), True, ("True", "Recovered")),
    (True, ("True", "Recovered"), True, ("True", "Recovered")),
    (True, ("False", "WaitForStart"), False, ("False", "WaitForStart")),
    (True, ("False", "PodsReady"), False, ("False", "WaitForStart")),  # the old reason
])
def test_pods_ready_follows_kueue(admitted: bool, current: tuple[str, str] | None,
                                  ready: bool, want: tuple[str, str]) -> None:
    conditions = [quota_reserved()] + ([admitted_cond()] if admitted else [])
    if current is not None:
        conditions.append(cond("PodsReady", current[0], current[1]))
    got = pods_ready_condition(with_status(MANIFEST, *conditions), ready)
    assert (got.status, got.reason) == want


def test_pods_ready_is_written_only_when_status_or_reason_change() -> None:
    wl = with_status(MANIFEST, quota_reserved(), admitted_cond(),
                     cond("PodsReady", "True", "Started", "old message"))
    assert not pods_ready_condition(wl, True).differs_from(wl)
    stale = pods_ready_condition(wl, False)
    assert stale.differs_from(wl)
    new = by_type(stale.apply(wl, NOW))["PodsReady"]
    assert new == {"type": "PodsReady", "status": "False", "reason": "WaitForRecovery",
                   "message": "At least one pod has failed, waiting for recovery",
                   "observedGeneration": 1, "lastTransitionTime": "2026-11-25T10:10:00Z"}


def test_finished_condition() -> None:
    wl = with_status(MANIFEST, quota_reserved(), admitted_cond())
    finished = by_type(finished_conditions(wl, "Failed", "replica Worker 1 failed", NOW))
    assert finished["Finished"] == {
        "type": "Finished", "status": "True", "reason": "Failed",
        "message": "replica Worker 1 failed", "observedGeneration": 1,
        "lastTransitionTime": "2026-11-25T10:10:00Z"}
    assert finished["Admitted"] == admitted_cond()  # other conditions untouched


def evicted(reason: str, message: str) -> Any:
    return with_status(MANIFEST, quota_reserved(), admitted_cond(),
                       cond("Evicted", "True", reason, message),
                       adm=admission(worker="default-flavor"), rv="42",
                       accumulatedPastExecutionTimeSeconds=30)


def test_quota_release_after_a_preemption() -> None:
    patch = release_quota_patch(evicted("Preempted", PREEMPTED_MESSAGE), NOW)
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "42"}
    status = patch["status"]
    assert status["admission"] is None
    conds = by_type(status["conditions"])
    assert conds["Requeued"]["status"] == "True"
    assert (conds["Requeued"]["reason"], conds["Requeued"]["message"]) == (
        "Preempted", PREEMPTED_MESSAGE)
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"],
            conds["QuotaReserved"]["message"]) == ("False", "Pending", PREEMPTED_MESSAGE)
    assert conds["QuotaReserved"]["lastTransitionTime"] == "2026-11-25T10:10:00Z"
    assert (conds["Admitted"]["status"], conds["Admitted"]["reason"],
            conds["Admitted"]["message"]) == ("False", "NoReservation",
                                              "The workload has no reservation")
    assert conds["Evicted"]["status"] == "True"  # Kueue resets it on the next reservation
    # Admitted since T0 (10:00), released at 10:10: 600 s more than the 30 s before.
    assert status["accumulatedPastExecutionTimeSeconds"] == 630


def test_quota_release_after_a_pods_ready_timeout_is_not_requeued_true() -> None:
    patch = release_quota_patch(evicted("PodsReadyTimeout",
                                        "Exceeded the PodsReady timeout ns/wl"), NOW)
    assert patch is not None
    assert by_type(patch["status"]["conditions"])["Requeued"]["status"] == "False"


def test_nothing_to_release_without_eviction_or_reservation() -> None:
    assert release_quota_patch(with_status(MANIFEST, quota_reserved(), admitted_cond()),
                               NOW) is None
    released = with_status(MANIFEST, cond("QuotaReserved", "False", "Pending"),
                           cond("Evicted", "True", "Preempted", PREEMPTED_MESSAGE))
    assert release_quota_patch(released, NOW) is None


def test_set_condition_keeps_the_transition_time_unless_the_status_changes() -> None:
    conditions = [cond("PodsReady", "False", "WaitForStart", "x", at=T0)]
    assert set_condition(conditions, {"type": "PodsReady", "status": "False",
                                      "reason": "WaitForRecovery", "message": "y"}, NOW)
    assert conditions[0]["lastTransitionTime"] == T0 and conditions[0]["reason"] == (
        "WaitForRecovery")
    assert not set_condition(conditions, {"type": "PodsReady", "status": "False",
                                          "reason": "WaitForRecovery", "message": "y"}, NOW)
    assert set_condition(conditions, {"type": "PodsReady", "status": "True",
                                      "reason": "Started", "message": "z"}, NOW)
    assert conditions[0]["lastTransitionTime"] == "2026-11-25T10:10:00Z"


def test_long_messages_are_cut_as_kueue_cuts_them() -> None:
    cut = truncate_message("x" * (MAX_CONDITION_MESSAGE + 10))
    assert len(cut) == MAX_CONDITION_MESSAGE and cut.endswith(" ...")
