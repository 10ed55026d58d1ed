"""`trainjobs run`'s checkpoint, then stop (issue 38): what a run saved, where, and how the
next run finds it.

Why a file: the run directory is the only thing that outlives `trainjobs run`; the
checkpoint's data is wherever the program put it (its URI), and `checkpoint.json` beside the
logs records what the program reported, so `trainjobs run --resume` can hand it to the next
run's replicas (TRAINJOBS_CHECKPOINT_STEP, TRAINJOBS_CHECKPOINT_URI).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainjobs.core.checkpoint import SavedCheckpoint
from trainjobs.core.progress import ENV_CHECKPOINT_STEP, ENV_CHECKPOINT_URI, MAX_CHECKPOINT_URI
from trainjobs.errors import NoCheckpoint

__all__ = ["CHECKPOINT_FILE", "ResumePoint", "find_resume", "resume_command",
           "write_checkpoint"]

CHECKPOINT_FILE = "checkpoint.json"
MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class ResumePoint:
    """A saved checkpoint, read back: the step and URI the program reported, and the file."""

    step: int
    uri: str
    path: Path

    def env(self) -> dict[str, str]:
        """What every replica of the resumed run gets (the environment contract)."""
        return {ENV_CHECKPOINT_STEP: str(self.step), ENV_CHECKPOINT_URI: self.uri}


def write_checkpoint(run_dir: Path, saved: SavedCheckpoint, job: str, uid: str) -> Path:
    """Record `saved` in `run_dir`/checkpoint.json (written whole, then renamed)."""
    doc = {"job": job, "uid": uid, "step": saved.step, "uri": saved.uri,
           "time": saved.at.isoformat().replace("+00:00", "Z"), "attempt": saved.attempt,
           "replica": saved.replica, "id": saved.id}
    path = run_dir / CHECKPOINT_FILE
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(doc, indent=2) + "\n")
    partial.replace(path)
    return path


def resume_command(job_file: str, run_root: str) -> str:
    """The command that resumes the job, as the user would type it."""
    extra = "" if run_root == "runs" else f" --run-dir {run_root}"
    return f"trainjobs run --resume {job_file}{extra}"


def _runs_of(run_root: Path, job: str) -> list[Path]:
    """The job's run directories (`<job>-YYYYmmdd-HHMMSS`), newest first: the name's time
    sorts as text; a job whose name extends this one's (`mx` and `mx-big`) is not matched."""
    pattern = re.compile(re.escape(job) + r"-\d{8}-\d{6}")
    try:
        found = [p for p in run_root.iterdir() if pattern.fullmatch(p.name) and p.is_dir()]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name, reverse=True)


def _read(path: Path, job: str) -> ResumePoint:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"over {MAX_FILE_BYTES} bytes")
        doc: Any = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NoCheckpoint(f"cannot read {path}: {exc}") from None
    step = doc.get("step") if isinstance(doc, dict) else None
    uri = doc.get("uri") if isinstance(doc, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0 or \
            not isinstance(uri, str) or not uri or len(uri) > MAX_CHECKPOINT_URI:
        raise NoCheckpoint(f"{path} is not a checkpoint record (a step and a uri)")
    if doc.get("job") != job:
        raise NoCheckpoint(f"{path} records a checkpoint of job {doc.get('job')!r}, not {job!r}")
    return ResumePoint(step, uri, path)


def find_resume(run_root: Path, job: str) -> ResumePoint:
    """The checkpoint of the newest run of `job` under `run_root` that saved one, or
    `NoCheckpoint` saying where it looked."""
    for run_dir in _runs_of(run_root, job):
        path = run_dir / CHECKPOINT_FILE
        if path.is_file():
            return _read(path, job)
    raise NoCheckpoint(f"no checkpoint of job {job} to resume from: no {run_root}/{job}-*/"
                       f"{CHECKPOINT_FILE} (one is written when Ctrl-C stops a job with "
                       f"runPolicy.checkpointTimeoutSeconds and its program answers)")
