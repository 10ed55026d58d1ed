"""How the client shows status.progress: list cells, status lines, the bar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from trainjobs.api.models import ProgressStatus
from trainjobs.client.progress_text import (
    eta_text,
    progress_bar,
    progress_cells,
    progress_lines,
    progress_plain,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
P = ProgressStatus(step=1200, total_steps=5000, epoch=2, percent=24.0, eta_seconds=3800,
                   summary="1200/5000 (24%)", metrics={"acc": 0.91, "loss": 0.3121},
                   replica="mnist-worker-0", last_report_time=NOW - timedelta(seconds=12),
                   last_progress_time=NOW - timedelta(seconds=75))


def test_list_cells() -> None:
    assert progress_cells(P) == ("1200/5000 (24%)", "1h03m")
    assert progress_cells(None) == ("-", "-")
    no_total = ProgressStatus(step=7, summary="7")
    assert progress_cells(no_total) == ("7", "-")
    assert progress_cells(ProgressStatus(step=7)) == ("7", "-")  # written by another tool


def test_eta_is_none_once_the_steps_are_done() -> None:
    assert eta_text(P.model_copy(update={"step": 5000, "eta_seconds": 0})) == "-"
    assert eta_text(P.model_copy(update={"eta_seconds": 59})) == "59s"


def test_status_lines() -> None:
    assert progress_lines(P, NOW) == [
        "step 1200/5000 (24%), epoch 2, ETA 1h03m",
        "reported by mnist-worker-0, last report 12s ago, step last advanced 1m15s ago",
        "acc=0.91 loss=0.3121"]
    assert progress_lines(None, NOW) == []
    bare = progress_lines(ProgressStatus(step=3), NOW)
    assert bare == ["step 3", "reported by ?, last report ?, step last advanced ?"]


def test_plain_and_bar() -> None:
    assert progress_plain(P) == (
        "step 1200/5000 (24%), epoch 2, ETA 1h03m, acc=0.91 loss=0.3121 [from mnist-worker-0]")
    assert progress_bar(P) == "[####................] 24% 1200/5000 ETA 1h03m"
    assert progress_bar(P.model_copy(update={"percent": 100.0, "step": 5000})) == \
        "[####################] 100% 5000/5000"
    assert progress_bar(ProgressStatus(step=9)) == "step 9"
