"""The live display of `trainjobs submit --wait`: counts redrawn in place on a terminal, one
plain line per change otherwise; notes never mix with a half-drawn counts line."""

from __future__ import annotations

import io

from trainjobs.api.models import ProgressStatus
from trainjobs.client.follow import Display


def test_plain_lines_only_when_the_counts_change() -> None:
    out = io.StringIO()
    display = Display(out)
    assert not display.live  # a StringIO is not a terminal
    display.progress("Worker 0/2 running, 2 pending")
    display.progress("Worker 0/2 running, 2 pending")
    display.note("Running")
    display.progress("Worker 2/2 running")
    assert out.getvalue().splitlines() == [
        "[trainjobs] Worker 0/2 running, 2 pending", "[trainjobs] Running",
        "[trainjobs] Worker 2/2 running"]


def test_terminal_redraws_the_counts_and_keeps_notes_above() -> None:
    out = io.StringIO()
    display = Display(out, live=True, colour=False)
    display.progress("Worker 0/2 running")
    display.progress("Worker 1/2 running")
    display.note("Normal Scheduled Pod/j-worker-1")
    assert out.getvalue() == (
        "Worker 0/2 running" "\r\033[K" "Worker 1/2 running" "\r\033[K"
        "[trainjobs] Normal Scheduled Pod/j-worker-1\n" "Worker 1/2 running")


def _progress(step: int, total: int | None = 400, eta: int | None = 65) -> ProgressStatus:
    percent = None if not total else round(100 * step / total, 1)
    return ProgressStatus(step=step, total_steps=total, percent=percent, eta_seconds=eta,
                          summary=f"{step}/{total}", metrics={"loss": 0.3121},
                          replica="j-worker-0")


def test_terminal_leads_the_counts_with_a_progress_bar() -> None:
    out = io.StringIO()
    display = Display(out, live=True, colour=False)
    display.progress("Worker 2/2 running")
    display.job_progress(_progress(120))
    display.job_progress(_progress(120))  # unchanged: not redrawn
    display.job_progress(None)  # a status without progress leaves the bar
    assert out.getvalue() == (
        "Worker 2/2 running" "\r\033[K"
        "[######..............] 30% 120/400 ETA 1m05s | Worker 2/2 running")


def test_plain_progress_lines_only_when_it_changes() -> None:
    out = io.StringIO()
    display = Display(out)
    display.job_progress(None)
    display.job_progress(_progress(120))
    display.job_progress(_progress(120))
    display.job_progress(_progress(400, eta=0))
    assert out.getvalue().splitlines() == [
        "[trainjobs] progress: step 120/400 (30%), ETA 1m05s, loss=0.3121 [from j-worker-0]",
        "[trainjobs] progress: step 400/400 (100%), loss=0.3121 [from j-worker-0]"]
