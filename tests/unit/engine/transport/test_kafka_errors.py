"""A failed read of offsets from Kafka: a broker away or moving is BrokerUnavailable (a task's set-up waits it
out: a broker restarting must not stop the worker), anything else a TransportError that stops it."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    NotCoordinatorForGroupError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)

from engine.errors import BrokerUnavailable, TransportError
from engine.events import TP
from engine.transport import kafka_connect
from engine.transport.kafka_consumer import KafkaConsumer
from engine.transport.kafka_errors import read_failed, retriable


@pytest.mark.parametrize("error", [NodeNotReadyError("node 1 not ready"), KafkaConnectionError("closed"),
                                   RequestTimedOutError(), NotCoordinatorForGroupError(),
                                   KafkaTimeoutError("Failed to get offsets by times in 40000 ms")])
def test_a_read_that_meets_a_broker_away_or_moving_is_broker_unavailable(error: Exception) -> None:
    failed = read_failed("cannot read committed offsets of t[0]", error)
    assert isinstance(failed, BrokerUnavailable)
    assert str(failed).startswith("cannot read committed offsets of t[0]: ")
    assert "a broker restarting or moving" in str(failed)


@pytest.mark.parametrize("error", [GroupAuthorizationFailedError(), TopicAuthorizationFailedError(),
                                   ValueError("a bug")])
def test_any_other_failed_read_is_a_transport_error(error: Exception) -> None:
    failed = read_failed("cannot read offsets of t[0]", error)
    assert type(failed) is TransportError


class RestartingBroker:
    """aiokafka's consumer while its broker restarts: every read fails with NodeNotReadyError."""

    async def beginning_offsets(self, partitions: Any) -> Any:
        raise NodeNotReadyError("Attempt to send a request to node which is not ready (node id 1).")

    end_offsets = offsets_for_times = beginning_offsets

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {0, 1}  # (what its metadata still says of the topic)


async def test_the_consumers_offset_reads_while_its_broker_restarts_are_broker_unavailable() -> None:
    consumer = KafkaConsumer.__new__(KafkaConsumer)
    consumer._client = RestartingBroker()
    with pytest.raises(BrokerUnavailable, match=r"cannot read offsets of \[TP"):
        await consumer.offsets([TP("t", 0)])
    with pytest.raises(BrokerUnavailable, match="cannot find offsets at 5 ms"):
        await consumer.offsets_at([TP("t", 0)], 5)


class GaveUp:
    """aiokafka's consumer once it retried a read for its request timeout: KafkaTimeoutError, whether the
    broker is away or the partitions are gone from its metadata (a topic deleted)."""

    def __init__(self, known: dict[str, set[int]]) -> None:
        self.known = known

    async def beginning_offsets(self, partitions: Any) -> Any:
        raise KafkaTimeoutError("Failed to get offsets by times in 40000 ms")

    end_offsets = offsets_for_times = beginning_offsets

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.known.get(topic)


@pytest.mark.parametrize("read", ["offsets", "offsets_at"])
async def test_a_read_given_up_on_is_waited_out_unless_its_partitions_are_gone(read: str) -> None:
    """A broker away past aiokafka's request timeout is still only away; partitions the broker no longer has
    (a changelog deleted under the app) would be waited for for ever: the worker stops, naming them."""
    consumer = KafkaConsumer.__new__(KafkaConsumer)

    async def reading(tps: list[TP]) -> Any:
        return await (consumer.offsets(tps) if read == "offsets" else consumer.offsets_at(tps, 5))

    consumer._client = GaveUp({"t": {0, 1}})
    with pytest.raises(BrokerUnavailable, match="KafkaTimeoutError"):
        await reading([TP("t", 0), TP("t", 1)])
    consumer._client = GaveUp({"t": {0}})
    with pytest.raises(TransportError, match=r"does not have \[TP\(topic='t', partition=1\)\]") as gone:
        await reading([TP("t", 0), TP("t", 1)])
    assert not isinstance(gone.value, BrokerUnavailable)
    consumer._client = GaveUp({})
    with pytest.raises(TransportError, match=r"does not have \[TP\(topic='t', partition=0\)\]") as gone:
        await reading([TP("t", 0)])
    assert not isinstance(gone.value, BrokerUnavailable)


def wrapped(cause: Exception) -> KafkaError:
    """What aiokafka's producer raises when its search for a transaction coordinator fails: a plain
    KafkaError from the error it met (`Sender._find_coordinator`)."""
    try:
        raise KafkaError(repr(cause)) from cause
    except KafkaError as exc:
        return exc


def test_a_plain_kafka_error_raised_from_a_retriable_one_is_a_broker_away() -> None:
    assert retriable(wrapped(KafkaConnectionError("Connection at 127.0.0.1:9 closed")))
    assert isinstance(read_failed("cannot start", wrapped(NodeNotReadyError("node 2"))), BrokerUnavailable)
    assert not retriable(wrapped(GroupAuthorizationFailedError()))
    assert not retriable(KafkaError("a plain failure"))


class StartFails:
    """A client whose start fails with `error` (a task's transactional producer whose start met its
    transaction coordinator's broker going away: seen in the 3-node restart storm, where the worker stopped
    instead of waiting it out)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.stopped = False

    async def start(self) -> None:
        raise self.error

    async def stop(self) -> None:
        self.stopped = True


async def test_a_client_start_that_meets_a_broker_going_is_broker_unavailable_and_stops_it() -> None:
    going = StartFails(wrapped(KafkaConnectionError("Connection at 127.0.0.1:9 closed")))
    with pytest.raises(BrokerUnavailable, match=r"cannot start a Kafka client of '127\.0\.0\.1:9'"):
        await kafka_connect.start_client(going, "127.0.0.1:9", {})
    assert going.stopped
    failed = StartFails(KafkaError("a plain failure"))
    with pytest.raises(KafkaError, match="a plain failure"):
        await kafka_connect.start_client(failed, "127.0.0.1:9", {})
