"""engine's Kafka producer against a recording stand-in for aiokafka's: the order of a commit's steps."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.events import TP
from engine.transport.kafka import KafkaProducer


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
