"""A consumer's stop is bounded: aiokafka's stop leaves the group through its coordinator and was seen waiting
on it for over a minute after the brokers restarted, so the worker did not stop on SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import TYPE_CHECKING

import pytest

from engine.transport import kafka_consumer
from tests.unit.engine.consumer_helpers import consumer_over

if TYPE_CHECKING:
    from engine.transport.kafka_consumer import KafkaConsumer


class NeverLeaves:
    """aiokafka's consumer whose stop waits for a coordinator that never answers."""

    def __init__(self) -> None:
        self.stopping = False

    async def stop(self) -> None:
        self.stopping = True
        await asyncio.Event().wait()


async def stop_cancelled(consumer: KafkaConsumer) -> asyncio.Future[None]:
    """The consumer's stop, cancelled from outside once it waits: the task, to await."""
    stopping = asyncio.ensure_future(consumer.stop())
    await asyncio.sleep(0.01)
    stopping.cancel()
    return stopping


async def test_a_consumer_whose_stop_hangs_is_given_up_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(kafka_consumer, "CONSUMER_STOP_TIMEOUT", 0.05)
    fake = NeverLeaves()
    consumer = consumer_over(fake)
    with caplog.at_level(logging.WARNING, logger="engine.transport"):
        await asyncio.wait_for(consumer.stop(), 5)
    assert fake.stopping
    assert "did not stop within" in caplog.text
    assert "without leaving the group" in caplog.text


async def test_a_stop_cancelled_from_outside_is_still_a_cancellation():
    stopping = await stop_cancelled(consumer_over(NeverLeaves()))
    with pytest.raises(asyncio.CancelledError):
        await stopping


class FailsWhenCancelled:
    """aiokafka's client whose stop, cancelled, fails with an error of its own (as a sender task that died of
    a fence does, re-raised where the stop awaits it)."""

    async def stop(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("the stop failed while it was cancelled") from None


async def test_what_a_cancelled_stop_fails_with_reaches_the_canceller_and_is_never_left_unretrieved(caplog):
    """A bounded stop waits inside the caller's own task: what the stop fails with once cancelled goes to
    whoever cancelled it. (asyncio.wait_for ran the stop as a task of its own and, cancelled, dropped that
    task's failure: asyncio logged "Task exception was never retrieved" when it was freed.)"""
    stopping = await stop_cancelled(consumer_over(FailsWhenCancelled()))
    with pytest.raises(RuntimeError, match="failed while it was cancelled"):
        await stopping
    del stopping
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
        await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text
