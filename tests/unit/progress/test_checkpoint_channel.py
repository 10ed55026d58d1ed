"""Checkpoint, then stop (issue 38), on the progress channel: the acknowledgement's wire
format and its refusals, the desk that asks one replica of one attempt, the library calls
(`checkpoint_requested`, `checkpoint_saved`, `last_checkpoint`), and the whole exchange
between the real client and the local receiver over HTTP."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
import trainjobs_progress
from trainjobs_progress import from_environment

from tests.unit.local.test_progress_receiver import body, raw, refusal
from tests.unit.progress.test_progress_library import IDENTITY, Receiver, _closed_port
from trainjobs.core.checkpoint import CheckpointDesk, SavedCheckpoint
from trainjobs.core.progress import (
    MAX_CHECKPOINT_URI,
    CheckpointAck,
    ProgressBoard,
    ReportRefused,
    parse_report,
)
from trainjobs.local.receiver import ProgressReceiver

NOW = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)


def ack(**fields: Any) -> bytes:
    return raw(checkpoint={"id": 1, "step": 10, "uri": "/ckpt/10", **fields})


def test_an_acknowledgement_parses() -> None:
    assert parse_report(ack()).checkpoint == CheckpointAck(1, 10, "/ckpt/10")
    assert parse_report(raw()).checkpoint is None


@pytest.mark.parametrize(("fields", "words"), [
    ({"id": 0}, "checkpoint.id: must be a positive integer"),
    ({"id": "1"}, "checkpoint.id: must be a positive integer"),
    ({"id": 2**60}, "checkpoint.id: at most"),
    ({"step": -1}, "checkpoint.step: must be a non-negative integer"),
    ({"step": 1.5}, "checkpoint.step: must be a non-negative integer"),
    ({"uri": ""}, "checkpoint.uri: must be a non-empty string"),
    ({"uri": "x" * (MAX_CHECKPOINT_URI + 1)}, "at most 1024 characters"),
    ({"uri": 7}, "checkpoint.uri"),
])
def test_a_bad_acknowledgement_is_refused_400_in_one_line(fields: dict[str, Any],
                                                          words: str) -> None:
    refused = refusal(ack(**fields))
    assert refused.status == 400 and words in refused.message and "\n" not in refused.message


def test_a_checkpoint_that_is_not_an_object_is_refused() -> None:
    refused = refusal(raw(checkpoint=[1, 10, "/x"]))
    assert refused.status == 400 and "checkpoint: must be an object" in refused.message


def test_the_desk_asks_only_the_replica_and_attempt_it_asked() -> None:
    desk = CheckpointDesk()
    report = parse_report(raw())
    assert desk.ask_for(report) is None
    asked = desk.request("mnist-worker-0", 0)
    assert desk.ask_for(report) == {"id": asked.id}
    other = parse_report(json.dumps(body(replica={"name": "mnist-worker-1", "type": "Worker",
                                                  "index": 1})).encode())
    assert desk.ask_for(other) is None
    assert desk.ask_for(parse_report(raw(attempt=1))) is None
    again = desk.request("mnist-worker-0", 0)
    assert again.id > asked.id
    desk.cancel()
    assert desk.ask_for(report) is None


def status_of(desk: CheckpointDesk, data: bytes) -> int:
    with pytest.raises(ReportRefused) as caught:
        desk.check(parse_report(data))
    return caught.value.status


def test_a_stale_or_foreign_acknowledgement_is_refused_409() -> None:
    desk = CheckpointDesk()
    assert status_of(desk, ack()) == 409  # nothing asked
    asked = desk.request("mnist-worker-0", 1)
    assert status_of(desk, ack(id=asked.id + 1)) == 409  # unknown id
    assert status_of(desk, raw(attempt=0, checkpoint={"id": asked.id, "step": 3,
                                                      "uri": "/c"})) == 409  # older attempt
    assert status_of(desk, json.dumps(body(
        attempt=1, replica={"name": "mnist-worker-1", "type": "Worker", "index": 1},
        checkpoint={"id": asked.id, "step": 3, "uri": "/c"})).encode()) == 409
    good = parse_report(raw(attempt=1, checkpoint={"id": asked.id, "step": 3, "uri": "/c"}))
    desk.check(good)
    assert desk.accept(good, NOW) == SavedCheckpoint(asked.id, 3, "/c", 1, "mnist-worker-0",
                                                     NOW)
    assert desk.pending is None and desk.ask_for(good) is None
    with pytest.raises(ReportRefused, match="answered already"):
        desk.check(good)  # the same acknowledgement twice


def test_last_checkpoint_from_the_environment() -> None:
    assert trainjobs_progress.last_checkpoint({}) is None
    assert trainjobs_progress.last_checkpoint({"TRAINJOBS_CHECKPOINT_STEP": "12"}) is None
    assert trainjobs_progress.last_checkpoint({"TRAINJOBS_CHECKPOINT_STEP": "x",
                                               "TRAINJOBS_CHECKPOINT_URI": "/c"}) is None
    assert trainjobs_progress.last_checkpoint({"TRAINJOBS_CHECKPOINT_STEP": "12",
                                               "TRAINJOBS_CHECKPOINT_URI": "/c/12"}) == \
        {"step": 12, "uri": "/c/12"}


def test_the_library_notes_a_request_and_sends_the_acknowledgement_at_once() -> None:
    receiver = Receiver(reply={"accepted": True, "checkpoint": {"id": 4}})
    try:
        client = from_environment({**IDENTITY, "TRAINJOBS_PROGRESS_URL": receiver.url,
                                   "TRAINJOBS_PROGRESS_INTERVAL": "60"})
        assert not client.checkpoint_requested
        assert client.checkpoint_saved(5, "/c/5") is False  # nothing asked: not sent
        client.report(5, total=100)
        assert client.flush(3.0)
        assert client.checkpoint_requested
        client.report(6, total=100)  # pending behind a 60 s interval
        assert client.checkpoint_saved(6, "/c/6", timeout=3.0)  # sent at once all the same
        assert not client.checkpoint_requested  # the same id in later replies is answered
        acks = [b for b in receiver.bodies if "checkpoint" in b]
        assert acks[0]["checkpoint"] == {"id": 4, "step": 6, "uri": "/c/6"}
        assert acks[0]["step"] == 6 and acks[0]["total"] == 100
        client.report(7)
        assert client.flush(3.0)
        # The receiver asked for 4 again after the answer (as a new operator leader would):
        # the same answer went once more, never a second save, and never more than once.
        acks = [b for b in receiver.bodies if "checkpoint" in b]
        assert [a["checkpoint"] for a in acks] == [{"id": 4, "step": 6, "uri": "/c/6"}] * 2
        assert "checkpoint" not in receiver.bodies[-1] and not client.checkpoint_requested
        client.close(0.1)
    finally:
        receiver.close()


def test_the_library_never_raises_and_is_off_without_a_url() -> None:
    off = from_environment({})
    assert not off.checkpoint_requested and off.checkpoint_saved(1, "/c") is False
    away = from_environment({**IDENTITY,
                             "TRAINJOBS_PROGRESS_URL": f"http://127.0.0.1:{_closed_port()}/"})
    away._asked = 3  # as if a reply had asked, then the receiver went away
    assert away.checkpoint_saved(1, "/c", timeout=0.5) is False
    assert away.checkpoint_saved("x", None) is False  # type: ignore[arg-type]
    away.close(0.1)


async def test_the_exchange_between_the_real_client_and_the_local_receiver() -> None:
    board = ProgressBoard("local", "mnist", "u1")
    saved: list[SavedCheckpoint] = []
    receiver = ProgressReceiver(board, lambda: None, interval=0.05, on_checkpoint=saved.append)
    await receiver.start()
    try:
        env = {**IDENTITY, "TRAINJOBS_PROGRESS_URL": receiver.endpoint.url,
               "TRAINJOBS_PROGRESS_INTERVAL": "0.05", "TRAINJOBS_REPLICA_NAME": "mnist-worker-0"}
        saver, other = from_environment(env), from_environment(
            {**env, "TRAINJOBS_REPLICA_NAME": "mnist-worker-1"})
        asked = receiver.desk.request("mnist-worker-0", 0)
        step = 0
        while not saver.checkpoint_requested and step < 200:
            step += 1
            saver.report(step, total=1000)
            other.report(step, total=1000)
            await asyncio.sleep(0.01)
        assert saver.checkpoint_requested and 0 < step < 200
        assert not other.checkpoint_requested  # only the checkpointing replica is asked
        assert await asyncio.to_thread(saver.checkpoint_saved, step, f"/c/{step}", 3.0)
        assert [(s.id, s.step, s.uri, s.replica) for s in saved] == \
            [(asked.id, step, f"/c/{step}", "mnist-worker-0")]
        assert receiver.desk.pending is None
        refused = receiver.refused
        assert not await asyncio.to_thread(other.checkpoint_saved, step, "/x", 1.0)
        assert receiver.refused == refused  # not asked: the client sent nothing
        saver.close(0.1)
        other.close(0.1)
    finally:
        await receiver.stop()


async def test_the_receiver_refuses_a_stale_answer_409_and_applies_nothing_of_it() -> None:
    board = ProgressBoard("local", "mnist", "u1")
    receiver = ProgressReceiver(board, lambda: None, interval=0.05)
    await receiver.start()
    try:
        asked = receiver.desk.request("mnist-worker-0", 0)
        async with aiohttp.ClientSession() as http:
            async def post(data: bytes) -> tuple[int, Any]:
                async with http.post(receiver.endpoint.url, data=data,
                                     headers={"Content-Type": "application/json"}) as r:
                    return r.status, await r.json()

            assert await post(raw(step=5)) == (200, {"accepted": True, "interval": 0.05,
                                                     "checkpoint": {"id": asked.id}})
            status, reply = await post(ack(id=asked.id + 1, step=9))
            assert status == 409 and "was not asked for" in reply["error"]
            view = board.view()
            assert view is not None and view.step == 5  # the refused report changed nothing
            assert receiver.desk.pending == asked
            assert (await post(ack(id=asked.id, step=9)))[0] == 200
            assert receiver.desk.saved is not None and receiver.desk.saved.step == 9
            assert await post(raw(step=11)) == (200, {"accepted": True, "interval": 0.05})
    finally:
        await receiver.stop()
