"""bench.preemption's reading of the cluster and its arithmetic: which job a pod is of (ours
or the Job controller's), a Workload's conditions and owner, pods running or marked, the
checkpoint's outcome; the breakdown starts the stop at the answer, else the request, else the
eviction, and leaves out steps whose marks are missing; the summary is per phase."""

from __future__ import annotations

from typing import Any

import pytest

from bench.preemption import (
    STEPS,
    breakdown,
    checkpoint_outcome,
    condition_status,
    marked,
    owned_by,
    parse_args,
    pod_job,
    running,
    summarize,
)


def pod(labels: dict[str, str], phase: str = "Running", deleting: bool = False
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T09:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_a_pod_is_of_the_operators_job_or_the_job_controllers() -> None:
    assert pod_job(pod({"trainjobs.io/job-name": "low-0"})) == "low-0"
    assert pod_job(pod({"batch.kubernetes.io/job-name": "high-1", "job-name": "high-1"})) \
        == "high-1"
    assert pod_job(pod({"job-name": "old"})) == "old"
    assert pod_job(pod({})) == "" and pod_job({}) == ""


def test_running_counts_pods_running_and_not_marked_marked_counts_the_marked() -> None:
    pods = [pod({}), pod({}, deleting=True), pod({}, phase="Pending"), pod({})]
    assert running(pods) == 2
    assert marked(pods) == 1


def test_conditions_and_owners_of_workloads() -> None:
    wl = {"metadata": {"ownerReferences": [{"kind": "TfJob", "name": "low-0"}]},
          "status": {"conditions": [{"type": "Evicted", "status": "True"},
                                    {"type": "QuotaReserved", "status": "False"}]}}
    other = {"metadata": {"ownerReferences": [{"kind": "Job", "name": "high-0"}]}}
    assert condition_status(wl, "Evicted") == "True"
    assert condition_status(wl, "QuotaReserved") == "False"
    assert condition_status(wl, "Admitted") == "" and condition_status(None, "Evicted") == ""
    assert owned_by([other, wl], "low-0") is wl
    assert owned_by([other, wl], "low-1") is None


def test_checkpoint_outcome_reads_the_request_or_nothing() -> None:
    assert checkpoint_outcome({"status": {"checkpointRequest": {"outcome": "Pending"}}}) \
        == "Pending"
    assert checkpoint_outcome({"status": {}}) == "" and checkpoint_outcome(None) == ""


def test_the_stop_starts_at_the_answer_else_the_request_else_the_eviction() -> None:
    common = {"low_first_delete": 5.0, "low_gone": 5.5, "low_released": 5.75,
              "high_admitted": 6.0, "high_running": 7.0}
    stop = STEPS[4][0]
    acked = breakdown({"evicted": 0.5, "requested": 1.0, "chief_asked": 2.0, "acked": 4.0,
                       **common})
    assert acked[stop] == 1.0 and acked[STEPS[3][0]] == 2.0 and acked[STEPS[2][0]] == 1.0
    silent = breakdown({"evicted": 0.5, "requested": 1.0, **common})
    assert silent[stop] == 4.0 and STEPS[2][0] not in silent and STEPS[3][0] not in silent
    off = breakdown({"evicted": 0.5, **common})
    assert off[stop] == 4.5 and STEPS[1][0] not in off
    assert off[STEPS[0][0]] == 0.5 and off[STEPS[-1][0]] == 1.0
    # The steps of a scenario add up to t0 -> high Running.
    for steps in (acked, silent, off):
        assert sum(steps.values()) == pytest.approx(7.0)


def test_summary_per_phase_with_the_chiefs_answer_only_where_it_answered() -> None:
    def scenario(phase: str, running_at: float, answer: float | None = None
                 ) -> dict[str, Any]:
        marks = {"evicted": 0.25, "low_first_delete": 1.0, "low_gone": 1.5,
                 "low_released": 1.75, "high_admitted": 2.0, "high_running": running_at}
        out: dict[str, Any] = {"phase": phase, "marks": marks}
        if answer is not None:
            out["chief"] = {"answer_seconds": answer}
        return out

    summary = summarize([scenario("off", 3.0), scenario("ack", 4.0, 0.5),
                         scenario("off", 5.0), scenario("ack", 6.0, 0.25)])
    assert list(summary) == ["off", "ack"]
    assert summary["off"]["preemption_to_high_running"]["median"] == 4.0
    assert summary["off"]["evicted_to_high_running"]["min"] == 2.75
    assert summary["ack"]["chief_answer_seconds"]["max"] == 0.5
    assert "chief_answer_seconds" not in summary["off"]
    assert summary["off"]["repeats"] == 2


def test_unknown_phases_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--phases", "off,nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert "unknown ['nope']" in err[-1]
    assert [p.name for p in parse_args(["--phases", "ack"]).phase_list] == ["ack"]
