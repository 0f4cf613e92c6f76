"""The worker's session and transaction timeouts and its poll interval reach the aiokafka clients it builds
(no broker needed: the clients are only constructed)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine.errors import ConfigError
from engine.settings_load import load_settings
from engine.transport import ClientTuning
from engine.transport.kafka import KafkaTransport


def test_timeouts_are_settings_in_seconds_from_arguments_or_the_environment():
    given = load_settings("a", {"session_timeout": 3}, environ={"ENGINE_TRANSACTION_TIMEOUT": "6.5",
                                                                "ENGINE_MAX_POLL_INTERVAL": "2"})
    assert given.session_timeout == timedelta(seconds=3)
    assert given.transaction_timeout == timedelta(seconds=6.5)
    assert given.max_poll_interval == timedelta(seconds=2)
    defaults = load_settings("a", {}, environ={})
    assert (defaults.session_timeout, defaults.transaction_timeout, defaults.max_poll_interval) == (
        timedelta(seconds=10), timedelta(seconds=15), timedelta(minutes=5))
    with pytest.raises(ConfigError, match="setting 'session_timeout' is 0s; expected a positive duration"):
        load_settings("a", {"session_timeout": 0})


async def test_the_consumer_and_transactional_producers_are_built_with_them():
    transport = KafkaTransport("kafka://127.0.0.1:1", {}, ClientTuning(
        session_timeout=3.0, transaction_timeout=6.0, max_poll_interval=2.0))
    consumer = transport.consumer(group_id="g")._client
    assert (consumer._session_timeout_ms, consumer._heartbeat_interval_ms) == (3000, 1000)
    assert consumer._max_poll_interval_ms == 2000
    producer = transport.producer("app-task-0")
    try:
        assert producer._client._txn_manager.transaction_timeout_ms == 6000
    finally:
        await producer.stop()
