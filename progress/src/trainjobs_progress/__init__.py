"""Report a training program's progress to trainjobs (`trainjobs run` locally; the operator
later, issue 37.3).

    import trainjobs_progress as progress
    progress.report(step, total=steps, epoch=epoch, loss=loss, accuracy=acc)

Where to report comes from the environment trainjobs injects into every replica (see
`ENVIRONMENT` and docs/progress.md); outside trainjobs every call is a cheap no-op.

Checkpoint, then stop (issue 38): when trainjobs is about to stop the job it asks the
checkpointing replica, in the reply to one of its reports, to save. The training loop checks

    if progress.checkpoint_requested():
        save(...); progress.checkpoint_saved(step, uri)

and a resumed run finds what was saved with `progress.last_checkpoint()`. No call
ever raises or waits for the network: problems become one warning each (logger
"trainjobs_progress") and dropped reports. Standard library only, Python >= 3.8; the
framework adapters (`trainjobs_progress.keras`, `trainjobs_progress.mxnet`) import their
framework only when used.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterable, Iterator, Mapping, TypeVar

from trainjobs_progress._reporter import DEFAULT_INTERVAL, DEFAULT_TIMEOUT, Reporter, http_sender
from trainjobs_progress._wire import MAX_BODY_BYTES, MAX_METRICS, VERSION

__all__ = ["ENVIRONMENT", "MAX_BODY_BYTES", "MAX_METRICS", "VERSION", "Reporter",
           "checkpoint_requested", "checkpoint_saved", "enabled", "flush", "from_environment",
           "identity", "last_checkpoint", "report", "reporter", "track"]
__version__ = "0.1.0"

# The environment contract (docs/api.md); the URL alone switches reporting on.
URL = "TRAINJOBS_PROGRESS_URL"
INTERVAL = "TRAINJOBS_PROGRESS_INTERVAL"
TIMEOUT = "TRAINJOBS_PROGRESS_TIMEOUT"
TOKEN_FILE = "TRAINJOBS_PROGRESS_TOKEN_FILE"
CA = "TRAINJOBS_PROGRESS_CA"
CA_FILE = "TRAINJOBS_PROGRESS_CA_FILE"
ENVIRONMENT = {
    URL: "where to POST reports; unset: reporting is off",
    INTERVAL: "fewest seconds between two reports of one process (default 5)",
    TIMEOUT: "seconds one POST may take (default 2)",
    TOKEN_FILE: "a file holding the bearer token to send, read on every send (on a cluster: "
                "the pod's projected service-account token)",
    CA: "PEM of the CA that signed the receiver's certificate (https URLs; default: the "
        "system's CAs)",
    CA_FILE: "the same in a file (if TRAINJOBS_PROGRESS_CA is unset)",
    "TRAINJOBS_JOB_NAMESPACE": "the job's namespace",
    "TRAINJOBS_JOB_NAME": "the job's name",
    "TRAINJOBS_JOB_UID": "the job's uid (a new job of the same name is another job)",
    "TRAINJOBS_REPLICA_NAME": "this replica's pod name, e.g. mnist-worker-0",
    "TRAINJOBS_REPLICA_TYPE": "this replica's type as the spec spells it, e.g. Worker",
    "TRAINJOBS_REPLICA_INDEX": "this replica's index within its type",
    "TRAINJOBS_ATTEMPT": "the job's attempt (grows when the whole job restarts)",
    "TRAINJOBS_CHECKPOINT_STEP": "the step of the checkpoint to resume from (a resumed run)",
    "TRAINJOBS_CHECKPOINT_URI": "where that checkpoint is, as its program reported it",
}
CHECKPOINT_STEP = "TRAINJOBS_CHECKPOINT_STEP"
CHECKPOINT_URI = "TRAINJOBS_CHECKPOINT_URI"

T = TypeVar("T")
_default: Reporter | None = None
_default_lock = threading.Lock()


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        value = float(env.get(name, ""))
    except ValueError:
        return default
    return value if 0 < value < 3600 else default


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def identity(env: Mapping[str, str]) -> dict[str, Any]:
    """Who is reporting, as the wire format names it, read from the environment."""
    return {
        "job": {"namespace": env.get("TRAINJOBS_JOB_NAMESPACE", ""),
                "name": env.get("TRAINJOBS_JOB_NAME", ""),
                "uid": env.get("TRAINJOBS_JOB_UID", "")},
        "replica": {"name": env.get("TRAINJOBS_REPLICA_NAME", ""),
                    "type": env.get("TRAINJOBS_REPLICA_TYPE", ""),
                    "index": _int(env.get("TRAINJOBS_REPLICA_INDEX", "0"))},
        "attempt": _int(env.get("TRAINJOBS_ATTEMPT", "0")),
    }


def from_environment(env: Mapping[str, str] | None = None) -> Reporter:
    """A reporter configured by `env` (default: os.environ); disabled without a URL."""
    env = os.environ if env is None else env
    url = env.get(URL, "").strip()
    sender = http_sender(url, env.get(TOKEN_FILE, "").strip(), env.get(CA, "").strip(),
                         env.get(CA_FILE, "").strip()) if url else None
    return Reporter(identity(env), sender,
                    interval=_seconds(env, INTERVAL, DEFAULT_INTERVAL),
                    timeout=_seconds(env, TIMEOUT, DEFAULT_TIMEOUT))


def reporter() -> Reporter:
    """The process's reporter, made from the environment on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = from_environment()
    return _default


def enabled() -> bool:
    """Whether reports go anywhere (trainjobs gave this process a receiver)."""
    try:
        return reporter().enabled
    except Exception:
        return False


def report(step: int, total: int | None = None, epoch: int | None = None,
           **metrics: Any) -> bool:
    """Report that training reached `step` (a count that only grows) of `total`, in
    `epoch`, with numeric `metrics` (NaN, infinities and non-numbers are dropped; at most
    MAX_METRICS names). Returns at once; True if the report will be sent."""
    try:
        return reporter().report(step, total, epoch, **metrics)
    except Exception:
        return False


def flush(timeout: float = 2.0) -> bool:
    """Send what is pending now, waiting at most `timeout` seconds (also done at exit)."""
    try:
        return reporter().flush(timeout)
    except Exception:
        return False


def track(iterable: Iterable[T], total: int | None = None, start: int = 1,
          **metrics: Any) -> Iterator[T]:
    """Yield from `iterable`, reporting step `start`, `start`+1, ... after each item
    (`total`: len(iterable) when it has one). For loops with no framework callbacks."""
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    step = start
    for item in iterable:
        yield item
        report(step, total=None if total is None else total + start - 1, **metrics)
        step += 1


def checkpoint_requested() -> bool:
    """True once trainjobs has asked this process for a checkpoint it has not yet answered
    with `checkpoint_saved`. Cheap (no I/O): call it every step. The request comes in the
    reply to a report, so it is seen at most one reporting interval after the next
    `report()`; a program that never reports is never asked (it gets SIGTERM at the stop)."""
    try:
        return reporter().checkpoint_requested
    except Exception:
        return False


def checkpoint_saved(step: int, uri: str, timeout: float = 2.0) -> bool:
    """Tell trainjobs the checkpoint it asked for is saved: training state at `step`, at `uri`
    (a path or URL your program can load from; at most 1024 characters). Sent at once,
    waiting at most `timeout` seconds; True if trainjobs accepted it. Keep training (or
    wait) afterwards: trainjobs stops the processes itself."""
    try:
        return reporter().checkpoint_saved(step, uri, timeout)
    except Exception:
        return False


def last_checkpoint(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The checkpoint this run resumes from, `{"step": int, "uri": str}`, from the
    environment `trainjobs run --resume` sets; None when there is none."""
    try:
        env = os.environ if env is None else env
        step, uri = env.get(CHECKPOINT_STEP, "").strip(), env.get(CHECKPOINT_URI, "")
        if not step.isdigit() or not uri:
            return None
        return {"step": int(step), "uri": uri}
    except Exception:
        return None
