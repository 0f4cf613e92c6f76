"""A streams member's heartbeat is shielded (its answer is acted on even when its caller stops waiting: the
worker stopping, a membership check timed out); what such a beat then fails with is read, not left for
asyncio to report as never retrieved (seen in a worker stopping after a full disk: the heartbeat in flight
met the connection closed by the stop)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from aiokafka.errors import KafkaConnectionError

from engine.transport.kafka_streams_member import StreamsMember


async def test_a_beat_whose_caller_stopped_waiting_and_that_then_fails_is_read(caplog):
    member = StreamsMember.__new__(StreamsMember)  # (no client: the beat itself is replaced)
    answer = asyncio.Event()

    async def beat_now(leave: int | None, first: bool) -> None:
        await answer.wait()
        raise KafkaConnectionError("Connection at 127.0.0.1:9 closed")

    member._beat_now = beat_now  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(member._beat())
    await asyncio.sleep(0)
    waiting.cancel()  # (the heartbeat loop cancelled at stop)
    with pytest.raises(asyncio.CancelledError):
        await waiting
    answer.set()
    for _ in range(3):
        await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
        await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text


async def test_a_beat_still_waited_for_gives_its_failure_to_its_caller():
    member = StreamsMember.__new__(StreamsMember)

    async def beat_now(leave: int | None, first: bool) -> None:
        raise KafkaConnectionError("Connection at 127.0.0.1:9 closed")

    member._beat_now = beat_now  # type: ignore[method-assign]
    with pytest.raises(KafkaConnectionError):
        await member._beat()
