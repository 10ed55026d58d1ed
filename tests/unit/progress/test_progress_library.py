"""trainjobs_progress, the client: never raises into the training loop, never blocks it, keeps
bounded state, cleans what it sends, and delivers to a real HTTP receiver (stdlib server)."""

from __future__ import annotations

import collections
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
import trainjobs_progress
from trainjobs_progress import Reporter, from_environment
from trainjobs_progress._wire import MAX_METRICS, clean_metrics
from trainjobs_progress.mxnet import BatchEndCallback, EpochEndCallback

IDENTITY = {"TRAINJOBS_JOB_NAMESPACE": "local", "TRAINJOBS_JOB_NAME": "mnist",
            "TRAINJOBS_JOB_UID": "u1", "TRAINJOBS_REPLICA_NAME": "mnist-worker-1",
            "TRAINJOBS_REPLICA_TYPE": "Worker", "TRAINJOBS_REPLICA_INDEX": "1",
            "TRAINJOBS_ATTEMPT": "0"}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there now: connections are refused


def _reporter(url: str, **env: str) -> Reporter:
    return from_environment({**IDENTITY, "TRAINJOBS_PROGRESS_URL": url, **env})


def _assert_quick(took: list[float]) -> None:
    """99% of reports return in under 2 ms, none waits anywhere near a network timeout
    (the worst case is thread scheduling on a loaded 2-CPU machine, not the network)."""
    took = sorted(took)
    p99, worst = took[int(len(took) * 0.99)], took[-1]
    assert p99 < 0.002, f"p99 {p99 * 1e3:.2f} ms"
    assert worst < 0.1, f"worst {worst * 1e3:.2f} ms"


class Receiver:
    """A real HTTP receiver: records bodies, answers `status` with `reply`."""

    def __init__(self, status: int = 200, reply: dict[str, Any] | None = None,
                 delay: float = 0.0) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                outer.bodies.append(json.loads(self.rfile.read(length)))
                time.sleep(delay)
                body = json.dumps(reply if reply is not None else {"accepted": True}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/progress"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_without_a_url_reporting_is_off_and_costs_nothing() -> None:
    r = from_environment({})
    assert not r.enabled
    assert r.report(1, total=10, loss=0.5) is False
    assert r._thread is None


def test_an_unreachable_receiver_neither_raises_nor_blocks(
        caplog: pytest.LogCaptureFixture) -> None:
    r = _reporter(f"http://127.0.0.1:{_closed_port()}/v1/progress",
                  TRAINJOBS_PROGRESS_INTERVAL="0.01")
    took: list[float] = []
    with caplog.at_level(logging.WARNING, logger="trainjobs_progress"):
        for step in range(2000):
            started = time.perf_counter()
            assert r.report(step, total=2000, loss=1.0 / (step + 1)) is True
            took.append(time.perf_counter() - started)
            if step % 500 == 0:
                time.sleep(0.05)  # let the sender try (and fail) meanwhile
        started = time.perf_counter()
        r.flush(2.0)
        flushed_in = time.perf_counter() - started
    _assert_quick(took)
    assert flushed_in < 0.5  # a receiver known to be away is not waited for
    assert r.dropped >= 1 and r.sent == 0
    warnings = [m for m in caplog.messages if "cannot reach" in m]
    assert len(warnings) == 1, caplog.messages  # once, not once per step
    r.close(0.1)


def test_a_receiver_that_never_answers_does_not_block_reports() -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        r = _reporter(f"http://127.0.0.1:{silent.getsockname()[1]}/v1/progress",
                      TRAINJOBS_PROGRESS_INTERVAL="0.01", TRAINJOBS_PROGRESS_TIMEOUT="0.2")
        took: list[float] = []
        for step in range(300):
            started = time.perf_counter()
            r.report(step, loss=1.0)
            took.append(time.perf_counter() - started)
            time.sleep(0.001)
        _assert_quick(took)
        r.close(0.5)


def test_pending_state_is_one_merged_report_whatever_the_number_of_calls() -> None:
    sent: list[bytes] = []
    gate = threading.Event()

    def slow_sender(body: bytes, timeout: float) -> dict[str, Any]:
        gate.wait(5)
        sent.append(body)
        return {}

    r = Reporter({"job": {}}, slow_sender, interval=0.0)
    for step in range(10_000):
        r.report(step, total=10_000, loss=float(step), **{f"m{step % 100}": 1.0})
    assert r._pending is not None and len(r._metrics) <= MAX_METRICS
    gate.set()
    assert r.flush(5.0)
    last = json.loads(sent[-1])
    assert last["step"] == 9999 and last["metrics"]["loss"] == 9999.0
    assert len(last["metrics"]) == MAX_METRICS
    assert len(sent) <= 3 and r.coalesced >= 9990
    r.close(0.1)


def test_nan_inf_bools_strings_and_bad_names_are_dropped() -> None:
    kept, dropped = clean_metrics({"loss": 0.5, "nan": float("nan"), "inf": float("inf"),
                                   "flag": True, "text": "0.3", "bad name": 1.0,
                                   "acc/top-1": 0.9, "n": 3})
    assert kept == {"loss": 0.5, "acc/top-1": 0.9, "n": 3.0}
    assert len(dropped) == 5
    kept, dropped = clean_metrics({f"m{i}": i for i in range(1000)})
    assert len(kept) == MAX_METRICS and len(dropped) == 1000 - MAX_METRICS


def test_invalid_steps_and_steps_going_backwards_are_dropped_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    r = Reporter({"job": {}}, lambda body, timeout: {}, interval=60.0)
    with caplog.at_level(logging.WARNING, logger="trainjobs_progress"):
        assert r.report(10) is True
        assert r.report(5) is False and r.report(4) is False
        assert r.report(-1) is False and r.report(1.5) is False  # type: ignore[arg-type]
        assert r.report("7") is False  # type: ignore[arg-type]
        assert r.report(11, total=0) is True  # sent without the total
    assert sum("backwards" in m for m in caplog.messages) == 1
    assert r._pending == {"step": 11, "total": None, "epoch": None}
    r.close(0.1)


def test_reports_arrive_with_identity_and_the_last_step_is_flushed(
        receiver: Receiver) -> None:
    r = _reporter(receiver.url, TRAINJOBS_PROGRESS_INTERVAL="0.05")
    for step in range(1, 101):
        r.report(step, total=100, epoch=step // 50, loss=1.0 / step)
    assert r.flush(3.0)
    last = receiver.bodies[-1]
    assert last["step"] == 100 and last["total"] == 100 and last["epoch"] == 2
    assert last["metrics"] == {"loss": 0.01}
    assert last["job"] == {"namespace": "local", "name": "mnist", "uid": "u1"}
    assert last["replica"] == {"name": "mnist-worker-1", "type": "Worker", "index": 1}
    assert last["version"] == 1 and last["attempt"] == 0
    assert [b["seq"] for b in receiver.bodies] == list(range(1, len(receiver.bodies) + 1))
    assert len({b["session"] for b in receiver.bodies}) == 1
    r.close(0.1)


def test_the_receiver_may_ask_for_a_longer_interval_and_extra_fields_are_kept() -> None:
    rec = Receiver(reply={"accepted": True, "interval": 7, "checkpoint": {"requested": False}})
    try:
        r = _reporter(rec.url, TRAINJOBS_PROGRESS_INTERVAL="0.05")
        r.report(1)
        assert r.flush(3.0)
        assert r.interval == 7.0
        assert r.last_reply["checkpoint"] == {"requested": False}
        r.close(0.1)
    finally:
        rec.close()


def test_a_refused_report_is_a_warning_not_an_exception(
        caplog: pytest.LogCaptureFixture) -> None:
    rec = Receiver(status=409, reply={"accepted": False, "error": "step went backwards"})
    try:
        r = _reporter(rec.url, TRAINJOBS_PROGRESS_INTERVAL="0.01")
        with caplog.at_level(logging.WARNING, logger="trainjobs_progress"):
            for step in range(5):
                r.report(step)
                r.flush(2.0)
        refused = [m for m in caplog.messages if "refused" in m]
        assert len(refused) == 1 and "HTTP 409: step went backwards" in refused[0]
        assert r.dropped == 5
        r.close(0.1)
    finally:
        rec.close()


def test_module_level_report_uses_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                  receiver: Receiver) -> None:
    for key, value in IDENTITY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TRAINJOBS_PROGRESS_URL", receiver.url)
    monkeypatch.setattr(trainjobs_progress, "_default", None)
    assert trainjobs_progress.enabled()
    seen = list(trainjobs_progress.track(range(3), loss=0.5))
    assert seen == [0, 1, 2]
    assert trainjobs_progress.flush(3.0)
    assert receiver.bodies[-1]["step"] == 3 and receiver.bodies[-1]["total"] == 3
    trainjobs_progress.reporter().close(0.1)


def test_mxnet_callbacks_count_batches_over_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(trainjobs_progress, "report",
                        lambda step, total=None, epoch=None, **m: calls.append(
                            (step, total, epoch, m)))
    Param = collections.namedtuple("Param", "epoch nbatch eval_metric locals")
    metric = SimpleNamespace(get_name_value=lambda: [("accuracy", 0.5), ("ce", 1.25)])
    batches = BatchEndCallback(total=4, every=2)
    epochs = EpochEndCallback(batches)
    for epoch in range(2):
        for nbatch in range(2):
            batches(Param(epoch, nbatch, metric, None))
        epochs(epoch)
    assert calls == [(2, 4, 0, {"accuracy": 0.5, "ce": 1.25}), (2, 4, 0, {}),
                     (4, 4, 1, {"accuracy": 0.5, "ce": 1.25}), (4, 4, 1, {})]


def test_keras_callback_reports_batches_and_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainjobs_progress.keras import ProgressCallback

    class Callback:  # the shape of keras.callbacks.Callback that the adapter relies on
        def __init__(self) -> None:
            self.params: dict[str, Any] = {}

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(trainjobs_progress, "report",
                        lambda step, total=None, epoch=None, **m: calls.append(
                            (step, total, epoch, m)))
    fake_keras = SimpleNamespace(callbacks=SimpleNamespace(Callback=Callback))
    cb = ProgressCallback(keras=fake_keras)
    assert isinstance(cb, Callback) and type(cb).__name__ == "ProgressCallback"
    cb.params = {"steps": 2, "epochs": 3}
    cb.on_train_begin()
    for epoch in range(3):
        cb.on_epoch_begin(epoch)
        for batch in range(2):
            cb.on_train_batch_end(batch, {"loss": 1.0})
        cb.on_epoch_end(epoch, {"loss": 0.5, "val_loss": 0.7})
    assert calls[0] == (1, 6, 0, {"loss": 1.0})
    assert calls[-1] == (6, 6, 2, {"loss": 0.5, "val_loss": 0.7})
    assert len(calls) == 9


def test_the_library_is_standard_library_only_and_python_3_8() -> None:
    """Installable into any training image: Python 3.8 syntax, and no import at module level
    outside the standard library (the adapters import their framework when used)."""
    import ast
    import sys
    from pathlib import Path

    package = Path(trainjobs_progress.__file__).parent
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        for node in tree.body:  # module level only
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("__future__",
                                                                 "trainjobs_progress"), \
                    f"{path.name} imports {name}"
