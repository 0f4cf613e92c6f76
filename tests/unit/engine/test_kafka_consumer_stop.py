"""A consumer's stop is bounded: aiokafka's stop leaves the group through its coordinator and was seen waiting
on it for over a minute after the brokers restarted, so the worker did not stop on SIGTERM."""

from __future__ import annotations

import asyncio
import logging

import pytest

from engine.transport import kafka
from engine.transport.kafka import KafkaConsumer


class NeverLeaves:
    """aiokafka's consumer whose stop waits for a coordinator that never answers."""

    def __init__(self) -> None:
        self.stopping = False

    async def stop(self) -> None:
        self.stopping = True
        await asyncio.Event().wait()


async def test_a_consumer_whose_stop_hangs_is_given_up_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(kafka, "CONSUMER_STOP_TIMEOUT", 0.05)
    consumer = KafkaConsumer.__new__(KafkaConsumer)  # (the real aiokafka client is never built)
    fake = NeverLeaves()
    consumer._client = fake
    consumer._member = None  # (classic)
    with caplog.at_level(logging.WARNING, logger="engine.transport.kafka"):
        await asyncio.wait_for(consumer.stop(), 5)
    assert fake.stopping
    assert "did not stop within" in caplog.text
    assert "without leaving the group" in caplog.text


async def test_a_stop_cancelled_from_outside_is_still_a_cancellation():
    consumer = KafkaConsumer.__new__(KafkaConsumer)
    consumer._client = NeverLeaves()
    consumer._member = None
    stopping = asyncio.ensure_future(consumer.stop())
    await asyncio.sleep(0.01)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
