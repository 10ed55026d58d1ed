"""The `trainjobs run` flags, apart from the runner so the CLI parser stays cheap to build."""

from __future__ import annotations

import argparse

__all__ = ["add_run_arguments"]


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job YAML file (one job)")
    parser.add_argument("--run-dir", default="runs", metavar="DIR",
                        help="logs go to DIR/<job>-<time>/ (default: ./runs)")
    parser.add_argument("--no-color", action="store_true", help="plain output")
    parser.add_argument("--resume", action="store_true",
                        help="start from the checkpoint the job's newest run under --run-dir "
                             "saved on Ctrl-C (runPolicy.checkpointTimeoutSeconds): every "
                             "replica gets TRAINJOBS_CHECKPOINT_STEP and _URI")
    parser.add_argument("--inject", action="append", default=[], metavar="SPEC",
                        help="rehearse a failure, e.g. 'kill Worker-1 at-step=200', "
                             "'exit=3 PS after=30s', 'hang Worker-0 after=1m', "
                             "'kill Worker-1 after=10s times=2 attempt=0' (repeatable; "
                             "docs/local.md, --inject)")
