"""trainjobs_progress against a cluster's receiver: it sends the pod's token (read again on
every send: the kubelet rotates it), verifies TLS with the CA it is given, and turns 401, 403,
429 and 503 into one warning each, never into an exception; 429/503 hold sending until their
Retry-After and then send the newest state once more."""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from trainjobs_progress import Reporter, from_environment

from trainjobs.testing._pki import make_serving_cert

IDENTITY = {"TRAINJOBS_JOB_NAMESPACE": "team-a", "TRAINJOBS_JOB_NAME": "mnist",
            "TRAINJOBS_JOB_UID": "u1", "TRAINJOBS_REPLICA_NAME": "mnist-worker-0",
            "TRAINJOBS_REPLICA_TYPE": "Worker", "TRAINJOBS_REPLICA_INDEX": "0"}


class Scripted:
    """A real HTTP(S) receiver answering a script of (status, headers), then 200s; it
    records each request's Authorization header, step and arrival time."""

    def __init__(self, script: list[tuple[int, dict[str, str]]],
                 tls: ssl.SSLContext | None = None) -> None:
        self.seen: list[tuple[str, int, float]] = []
        outer, script = self, list(script)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((self.headers.get("Authorization", ""), doc["step"],
                                   time.monotonic()))
                status, headers = script.pop(0) if script else (200, {})
                body = json.dumps({"accepted": status == 200, "error": f"scripted {status}"})
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/v1/progress"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def reporter(url: str, **env: str) -> Reporter:
    return from_environment({**IDENTITY, "TRAINJOBS_PROGRESS_URL": url,
                             "TRAINJOBS_PROGRESS_INTERVAL": "0.01", **env})


def test_the_token_is_sent_and_read_again_on_every_send(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    rec = Scripted([])
    try:
        r = reporter(rec.url, TRAINJOBS_PROGRESS_TOKEN_FILE=str(token))
        r.report(1)
        assert r.flush(3.0)
        token.write_text("rotated")
        r.report(2)
        assert r.flush(3.0)
        assert [(auth, step) for auth, step, _ in rec.seen] == \
            [("Bearer first", 1), ("Bearer rotated", 2)]
        r.close(0.1)
    finally:
        rec.close()


@pytest.mark.parametrize("status", [401, 403])
def test_an_auth_refusal_is_one_warning_and_a_dropped_report(
        status: int, caplog: pytest.LogCaptureFixture) -> None:
    rec = Scripted([(status, {})] * 3)
    try:
        r = reporter(rec.url)
        with caplog.at_level(logging.WARNING, logger="trainjobs_progress"):
            for step in range(1, 4):
                r.report(step)
                r.flush(2.0)
        warned = [m for m in caplog.messages if f"HTTP {status}" in m]
        assert len(warned) == 1 and "dropped" in warned[0]
        assert r.dropped == 3 and len(rec.seen) == 3
        r.close(0.1)
    finally:
        rec.close()


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_holds_sending_then_the_state_goes_once_more(
        status: int, caplog: pytest.LogCaptureFixture) -> None:
    rec = Scripted([(status, {"Retry-After": "1"})])
    try:
        r = reporter(rec.url)
        with caplog.at_level(logging.WARNING, logger="trainjobs_progress"):
            r.report(5)
            deadline = time.monotonic() + 5
            while len(rec.seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        assert [step for _, step, _ in rec.seen] == [5, 5]
        assert rec.seen[1][2] - rec.seen[0][2] >= 0.95  # not before Retry-After
        warned = [m for m in caplog.messages if f"HTTP {status}" in m]
        assert len(warned) == 1 and "not sending for 1s, then once again" in warned[0]
        assert (r.sent, r.dropped) == (1, 0)
        r.close(0.1)
    finally:
        rec.close()


def test_an_unreadable_token_file_is_a_warning(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    rec = Scripted([])
    try:
        r = reporter(rec.url, TRAINJOBS_PROGRESS_TOKEN_FILE=str(tmp_path / "absent"))
        with caplog.at_level(logging.WARNING, logger="trainjobs_progress"):
            r.report(1)
            r.flush(1.0)
        assert any("cannot read the token file" in m for m in caplog.messages)
        assert rec.seen == [] and r.dropped == 1
        r.close(0.1)
    finally:
        rec.close()


def test_tls_is_verified_with_the_given_ca(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    ca = make_serving_cert(tmp_path / "ca", subject="/CN=trainjobs-progress-ca")
    cert = make_serving_cert(tmp_path / "tls", subject="/CN=trainjobs-progress",
                             ca_cert=ca.cert, ca_key=ca.key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    rec = Scripted([], tls=context)
    try:
        good = reporter(rec.url, TRAINJOBS_PROGRESS_CA=cert.ca_cert.read_text())
        good.report(1)
        assert good.flush(3.0) and good.sent == 1
        good.close(0.1)
        other = make_serving_cert(tmp_path / "other", subject="/CN=someone-else")
        with caplog.at_level(logging.WARNING, logger="trainjobs_progress"):
            bad = reporter(rec.url, TRAINJOBS_PROGRESS_CA_FILE=str(other.ca_cert))
            bad.report(1)
            bad.flush(1.0)
        assert bad.sent == 0 and bad.dropped == 1
        assert any("CERTIFICATE_VERIFY_FAILED" in m for m in caplog.messages)
        assert len(rec.seen) == 1
        bad.close(0.1)
    finally:
        rec.close()
