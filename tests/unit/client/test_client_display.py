"""The live display of `trainjobs submit --wait`: counts redrawn in place on a terminal, one
plain line per change otherwise; notes never mix with a half-drawn counts line."""

from __future__ import annotations

import io

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
