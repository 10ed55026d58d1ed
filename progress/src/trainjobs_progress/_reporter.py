"""The reporter: takes reports on the training thread, sends them from a background thread.

Why this shape: a report must never raise into the training loop nor wait for the network.
`report()` only checks its arguments and merges them into one pending state under a lock
(microseconds); a daemon thread POSTs the newest state at most once per interval, with a
short timeout, and backs off while the receiver is unreachable. Progress is a state, not a
series of events, so the pending "queue" holds exactly one merged report: the newest step,
total and epoch, and the newest value of every metric since the last send. Nothing grows
with the number of calls, and the last step is never lost to a rate limit (it is sent at the
next interval, or by the flush at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
import time
from typing import Any, Callable, Mapping

from trainjobs_progress._http import Refused, Sender, Unsendable, http_sender
from trainjobs_progress._wire import MAX_CHECKPOINT_URI, MAX_METRICS, VERSION, clean_metrics

__all__ = ["Refused", "Reporter", "Sender", "http_sender"]

log = logging.getLogger("trainjobs_progress")

# Seconds. The interval is the fewest between two sends of one process (the receiver may ask
# for more); the timeout bounds one POST; the back-off grows while the receiver is away.
DEFAULT_INTERVAL = 5.0
DEFAULT_TIMEOUT = 2.0
MAX_BACKOFF = 60.0
MAX_INTERVAL = 300.0
EXIT_FLUSH_SECONDS = 2.0

class Reporter:
    """Reports of one process to one receiver. Thread-safe; every public method is total
    (it returns, quickly, whatever happens)."""

    def __init__(self, identity: Mapping[str, Any], sender: Sender | None,
                 interval: float = DEFAULT_INTERVAL, timeout: float = DEFAULT_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.identity = dict(identity)
        self.sender = sender
        self.interval = interval
        self.timeout = timeout
        self.clock = clock
        self.session = os.urandom(8).hex()
        self.last_reply: dict[str, Any] = {}
        self.sent = 0  # accepted by the receiver
        self.dropped = 0  # refused, or lost to an unreachable receiver
        self.coalesced = 0  # replaced by a newer report before it was sent
        self._seq = 0
        self._lock = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._metrics: dict[str, float] = {}
        self._last_step = -1
        self._next_send = 0.0
        self._backoff = 0.0
        self._sending = False
        self._flushing = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        # Checkpoint, then stop (issue 38): the request a reply carried and this process has
        # not answered; the acknowledgement waiting to go out; ids already answered.
        self._asked: int | None = None
        self._ack: dict[str, Any] | None = None
        self._ack_accepted: int | None = None
        self._last_ack: dict[str, Any] | None = None  # the newest answer the receiver took
        self._resent: int | None = None  # the request whose answer went a second time
        self._answered: set[int] = set()
        self._last_state: dict[str, Any] = {"step": 0, "total": None, "epoch": None}

    @property
    def enabled(self) -> bool:
        return self.sender is not None

    def warn_once(self, key: str, message: str) -> None:
        """One warning per kind of problem, not one per step."""
        if key in self._warned:
            return
        self._warned.add(key)
        with contextlib.suppress(Exception):
            log.warning("trainjobs_progress: %s", message)

    def report(self, step: int, total: int | None = None, epoch: int | None = None,
               **metrics: Any) -> bool:
        """Queue the state at `step`; True if it will be sent (False: disabled or refused
        here, with one warning per kind of problem)."""
        if self.sender is None or self._closed:
            return False
        try:
            return self._report(step, total, epoch, metrics)
        except Exception as exc:  # never into the training loop
            self.warn_once("internal", f"report dropped: {exc!r}")
            return False

    def _report(self, step: Any, total: Any, epoch: Any, metrics: dict[str, Any]) -> bool:
        step_i = _count(step)
        if step_i is None:
            self.warn_once("step", f"step must be a non-negative integer, got {step!r}; "
                                   f"report dropped")
            return False
        total_i = None if total is None else _count(total)
        if total is not None and (total_i is None or total_i == 0):
            self.warn_once("total", f"total must be a positive integer, got {total!r}; "
                                    f"sent without it")
            total_i = None
        epoch_i = None if epoch is None else _count(epoch)
        if epoch is not None and epoch_i is None:
            self.warn_once("epoch", f"epoch must be a non-negative integer, got {epoch!r}; "
                                    f"sent without it")
        kept, dropped = clean_metrics(metrics)
        for note in dropped:
            self.warn_once("metric " + note.split(":", 1)[0], f"metric dropped: {note}")
        with self._lock:
            if step_i < self._last_step:
                self.warn_once("backwards", f"step went backwards ({step_i} after "
                                            f"{self._last_step}); report a step that only "
                                            f"grows (a global step, not a batch index)")
                return False
            self._last_step = step_i
            for name, value in kept.items():
                if name in self._metrics or len(self._metrics) < MAX_METRICS:
                    self._metrics[name] = value
            if self._pending is not None:
                self.coalesced += 1
            self._pending = {"step": step_i, "total": total_i, "epoch": epoch_i}
            self._last_state = dict(self._pending)
            self._start()
            self._lock.notify()
        return True

    @property
    def checkpoint_requested(self) -> bool:
        """True while a reply has asked for a checkpoint this process has not answered."""
        return self._asked is not None

    def checkpoint_saved(self, step: int, uri: str,
                         timeout: float = EXIT_FLUSH_SECONDS) -> bool:
        """Answer the outstanding checkpoint request: saved at `step` to `uri`. Sends it at
        once (waiting at most `timeout` seconds); True if the receiver accepted it. False,
        with one warning, when nothing was asked or the arguments are unusable."""
        if self.sender is None or self._closed:
            return False
        try:
            return self._checkpoint_saved(step, uri, timeout)
        except Exception as exc:  # never into the training loop
            self.warn_once("internal", f"checkpoint acknowledgement dropped: {exc!r}")
            return False

    def _checkpoint_saved(self, step: Any, uri: Any, timeout: float) -> bool:
        step_i = _count(step)
        if step_i is None or not isinstance(uri, str) or not uri \
                or len(uri) > MAX_CHECKPOINT_URI:
            self.warn_once("checkpoint", f"checkpoint_saved needs a non-negative integer step "
                                         f"and a URI of 1..{MAX_CHECKPOINT_URI} characters, "
                                         f"got {step!r}, {str(uri)[:60]!r}; not sent")
            return False
        with self._lock:
            asked = self._asked
            if asked is None:
                self.warn_once("unasked", "checkpoint_saved without a checkpoint request "
                                          "(checkpoint_requested() was False); not sent")
                return False
            self._asked = None
            self._answered.add(asked)
            self._ack = {"id": asked, "step": step_i, "uri": uri}
            state = dict(self._last_state)
            state["step"] = max(self._last_step, step_i, 0)
            self._last_step = state["step"]
            if self._pending is None:
                self._pending = state
            else:
                self._pending["step"] = max(self._pending["step"], state["step"])
            self._start()
            self._lock.notify_all()
        self.flush(timeout)
        with self._lock:
            return self._ack_accepted == asked

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainjobs-progress",
                                            daemon=True)
            self._thread.start()
            atexit.register(self.flush, EXIT_FLUSH_SECONDS)

    def flush(self, timeout: float = EXIT_FLUSH_SECONDS) -> bool:
        """Send the pending report now (ignoring the interval); True if nothing is left
        unsent after at most `timeout` seconds."""
        try:
            deadline = self.clock() + timeout
            with self._lock:
                self._flushing = True
                self._lock.notify_all()
                while self._pending is not None or self._sending:
                    left = deadline - self.clock()
                    if left <= 0 or self._thread is None or (self._backoff > 0
                                                             and not self._sending):
                        break  # no waiting for a receiver known to be away
                    self._lock.wait(min(left, 0.05))
                self._flushing = False
                return self._pending is None and not self._sending
        except Exception:
            return False

    def close(self, timeout: float = EXIT_FLUSH_SECONDS) -> None:
        """Flush, then stop the background thread; later reports are ignored."""
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def _run(self) -> None:
        retried = False
        while True:
            with self._lock:
                while True:
                    if self._closed:
                        return
                    if self._pending is not None:
                        wait = self._next_send - self.clock()
                        if wait <= 0 or (self._flushing and self._backoff == 0):
                            break
                        self._lock.wait(wait)
                    else:
                        self._lock.wait()
                state = self._pending
                body = self._body()
                ack, sent = self._ack, self.sent
                self._pending = None
                self._sending = True
            delay, again = self._send(body, retry=not retried)
            with self._lock:
                self._sending = False
                retried = again
                if self.sent > sent:
                    self._took(self.last_reply, ack)
                elif ack is not None and self._ack is ack:
                    if delay is None or again:  # unreachable or busy: send it again later
                        again = True
                        if self._pending is None:
                            self._pending = state
                    else:  # refused: it will never be accepted
                        self._ack = None
                if again and self._pending is None:
                    self._pending = state  # once: the newest state, after Retry-After
                if delay is None:  # unreachable
                    delay = min(max(self._backoff * 2, 1.0), MAX_BACKOFF)
                self._backoff = delay
                self._next_send = self.clock() + max(self.interval, self._backoff)
                self._lock.notify_all()

    def _took(self, reply: Mapping[str, Any], ack: dict[str, Any] | None) -> None:
        """After an accepted report (under the lock): the acknowledgement it carried is
        delivered; a checkpoint request in the reply is noted unless answered already."""
        if ack is not None and self._ack is ack:
            self._ack, self._ack_accepted = None, ack["id"]
            self._last_ack = ack
        asked = reply.get("checkpoint")
        ident = asked.get("id") if isinstance(asked, dict) else None
        if not isinstance(ident, int) or isinstance(ident, bool) or ident <= 0:
            return
        last = self._last_ack
        if last is not None and last["id"] == ident and self._ack is None and \
                self._resent != ident:
            # Asked again for what it answered: a new operator leader that did not hear the
            # answer. The same answer goes once more with the next report (not saved twice).
            self._ack, self._resent = dict(last), ident
            if self._pending is None:
                self._pending = dict(self._last_state)
            self._lock.notify_all()
        elif ident not in self._answered and len(self._answered) < 1024:
            self._asked = ident

    def _body(self) -> bytes:
        assert self._pending is not None
        self._seq += 1
        payload = dict(self.identity)
        payload.update(version=VERSION, session=self.session, seq=self._seq,
                       sentAt=round(time.time(), 3), metrics=dict(self._metrics),
                       **self._pending)
        if self._ack is not None:
            payload["checkpoint"] = dict(self._ack)
        return json.dumps(payload, separators=(",", ":"), allow_nan=False).encode("utf-8")

    def _send(self, body: bytes, retry: bool) -> tuple[float | None, bool]:
        """Send one body: (the seconds to wait before the next send, None while the
        receiver is unreachable; whether to send this state again after them)."""
        assert self.sender is not None
        try:
            reply = self.sender(body, self.timeout)
        except Refused as exc:
            wait = exc.retry_after
            again = retry and wait is not None
            if not again:
                self.dropped += 1
            if wait is not None:  # 429 too many, 503 a standby operator: come back later
                then = ", then once again" if again else ""
                self.warn_once(f"busy {exc.status}", f"the receiver cannot take reports now "
                                                     f"({exc}); not sending for {wait:g}s{then}")
                return wait, again
            # 401/403 (the token), 4xx (the report): reachable, the next may be accepted
            self.warn_once(f"refused {exc.status}", f"the receiver refused a report ({exc}); "
                                                    f"it was dropped")
            return 0.0, False
        except Unsendable as exc:
            self.dropped += 1
            self.warn_once("unsendable", f"{exc}; reports are dropped until it can be read")
            return None, False
        except Exception as exc:
            self.dropped += 1
            self.warn_once("unreachable", f"cannot reach the progress receiver ({exc}); "
                                          f"reports are dropped until it answers")
            return None, False
        self.sent += 1
        self.last_reply = reply
        wanted = reply.get("interval")
        if isinstance(wanted, (int, float)) and not isinstance(wanted, bool) \
                and self.interval < wanted <= MAX_INTERVAL:
            self.interval = float(wanted)
        return 0.0, False


def _count(value: Any) -> int | None:
    """A non-negative integer (ints and integral floats/numpy scalars), else None."""
    if isinstance(value, (bool, str, bytes)):
        return None
    try:
        as_int = int(value)
        if as_int != value and float(as_int) != float(value):
            return None
    except (TypeError, ValueError, OverflowError):
        return None
    return as_int if as_int >= 0 else None
