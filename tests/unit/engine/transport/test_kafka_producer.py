"""engine's Kafka producer against a recording stand-in for aiokafka's: the order of a commit's steps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.errors import DeliveryFailed, MembershipLost
from engine.events import TP
from engine.transport.kafka_producer import KafkaProducer


class SlowAcks:
    """aiokafka's producer as far as a commit sees it: a record's acknowledgement comes when `ack` is set,
    and EndTxn is sent as soon as `commit_transaction` is called (aiokafka does not wait for batches)."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.ack = asyncio.Event()
        self.delivery: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def flush(self) -> None:
        self.steps.append("flush")

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        self.steps.append("offsets")

    async def commit_transaction(self) -> None:
        self.steps.append("commit" if self.delivery.done() else "commit with a record unacknowledged")

    async def begin_transaction(self) -> None:
        self.steps.append("begin")


async def test_a_commit_waits_for_every_record_of_its_transaction_before_ending_it():
    producer = KafkaProducer("127.0.0.1:9", {}, transactional_id="t-task-0")
    fake = SlowAcks()
    producer._client = fake  # the recording stand-in (the real one is never started)
    producer._deliveries.add(fake.delivery)  # a record sent, its batch not yet acknowledged
    asyncio.get_running_loop().call_later(0.05, fake.delivery.set_result, None)
    await producer.commit_transaction({TP("words", 0): 10}, "group")
    assert fake.steps == ["flush", "offsets", "commit", "begin"]


class NoCoordinator(SlowAcks):
    """aiokafka's producer with the transaction's coordinator never found: EndTxn never answered, and its
    stop (which first delivers what it holds) never ends."""

    class _message_accumulator:  # (what engine reads of a stopped producer: nothing held)
        _batches: dict[Any, Any] = {}
        _pending_batches: list[Any] = []

    _txn_manager = None

    class client:  # (its metadata: nothing waited for)
        _md_update_fut = None

    async def commit_transaction(self) -> None:
        self.steps.append("commit")
        await asyncio.Event().wait()

    async def stop(self) -> None:
        self.steps.append("stop")
        await asyncio.Event().wait()


async def test_a_commit_that_cannot_end_fails_at_the_transaction_timeout_and_the_stop_is_bounded_too():
    """Seen in a broker restart storm: one such commit held its task's sends and the worker's checkpoint,
    and through them the revocation of every task, for good."""
    producer = KafkaProducer("127.0.0.1:9", {}, transactional_id="t-task-0", transaction_timeout=0.05)
    fake = NoCoordinator()
    producer._client = fake
    with pytest.raises(DeliveryFailed, match="transaction timeout"):
        await asyncio.wait_for(producer.commit_transaction({TP("words", 0): 10}, "group"), 5)
    assert producer._open.is_set()  # sends made meanwhile go on (into a transaction the task will rewind)
    await asyncio.wait_for(producer.stop(), 5)
    assert fake.steps == ["flush", "offsets", "commit", "stop"]


class Member:
    """A streams group's member as the producer sees it."""

    member_id, instance_id, epoch, generation = "m-1", None, 5, 0


async def test_a_transaction_begun_before_its_member_lost_its_tasks_does_not_commit_after_the_rejoin():
    """The member lost its tasks (its coordinator silent past the session) while a checkpoint waited on the
    broker, then joined again under a new epoch: the checkpoint's offsets, processed under the old one, must
    not be committed with the new (the group would take them: the epoch is current)."""
    member = Member()
    producer = KafkaProducer("127.0.0.1:9", {}, transactional_id="t-task-0", members={"group": member})
    fake = SlowAcks()
    producer._client = fake
    await producer._begin_transaction()
    member.generation, member.epoch = 1, 7  # fenced, joined again
    with pytest.raises(MembershipLost, match="lost its tasks"):
        await producer.commit_transaction({TP("words", 0): 10}, "group")
    assert fake.steps == ["begin", "flush"]  # no offsets sent, nothing committed


async def test_a_send_waiting_for_a_topics_metadata_fails_when_the_producer_stops():
    """Seen in a restart storm: agents' sends into a task's new producer waited for the output topic's
    metadata while no broker answered; the task was lost and its producer stopped, and the closed client
    never ended the wait: the agents stayed inside their events for good, their partitions behind them."""
    producer = KafkaProducer("127.0.0.1:9", {})  # no broker there: no metadata ever comes
    sending = asyncio.ensure_future(producer.send("out", b"k", b"v"))
    await asyncio.sleep(0.05)
    assert not sending.done()
    await asyncio.wait_for(producer.stop(), 5)
    with pytest.raises(DeliveryFailed, match="closed"):
        await asyncio.wait_for(sending, 5)
