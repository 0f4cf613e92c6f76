"""One contract, every transport: memory:// and kafka:// (the real broker) must behave the same."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from engine.events import TP
from engine.transport import TopicSpec, Transport, open_transport

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping


@pytest.fixture(params=["memory", pytest.param("kafka", marks=pytest.mark.kafka)])
def transport(request) -> Transport:
    if request.param == "memory":
        return open_transport(f"memory://{uuid.uuid4().hex}")
    kafka = request.getfixturevalue("kafka")
    return open_transport(kafka.url)


async def make_topic(transport: Transport, partitions: int = 2) -> str:
    name = f"contract-{uuid.uuid4().hex[:8]}"
    admin = transport.admin()
    try:
        assert (await admin.create_topics([TopicSpec(name, partitions)]))[name] == partitions
        assert (await admin.create_topics([TopicSpec(name, partitions)]))[name] == partitions  # idempotent
    finally:
        await admin.close()
    return name


async def fill(transport: Transport, topic: str, count: int, partition: int) -> None:
    producer = transport.producer()
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, f"k{i}".encode(), str(i).encode(),
                                headers=[("h", b"v")], partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


class Got:
    """A record fetched, with the partition of the batch it came in (a record does not say it); the
    record's own attributes read through."""

    def __init__(self, partition: int, record: Any) -> None:
        self.partition = partition
        self.record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.record, name)


def fetched(batches: Mapping[TP, list[Any]]) -> list[Got]:
    return [Got(tp.partition, record) for tp, batch in batches.items() for record in batch]


async def read(consumer, want: int, timeout: float = 20.0) -> list[Got]:
    records: list[Got] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(records) < want and loop.time() < deadline:
        records += fetched(await consumer.getmany(0.2, 1000))
    return records


async def test_assign_seek_and_offsets(transport):
    topic = await make_topic(transport)
    await fill(transport, topic, 10, partition=1)
    consumer = transport.consumer(group_id=None)
    await consumer.start()
    try:
        tp = TP(topic, 1)
        consumer.assign([tp, TP(topic, 0)])
        offsets = await consumer.offsets([tp, TP(topic, 0)])
        assert offsets[tp] == (0, 10)
        assert offsets[TP(topic, 0)] == (0, 0)
        consumer.seek(tp, 7)
        consumer.seek(TP(topic, 0), 0)
        records = await read(consumer, 3)
        assert [(r.offset, r.key, r.value) for r in records] == [
            (7, b"k7", b"7"), (8, b"k8", b"8"), (9, b"k9", b"9")]
        assert list(records[0].headers) == [("h", b"v")]
        assert records[0].timestamp > 0
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def reading_two_partitions(transport: Transport) -> AsyncIterator[tuple[Any, str]]:
    """A consumer outside any group reading both partitions of a new topic from the start (5 records each)."""
    topic = await make_topic(transport)
    await fill(transport, topic, 5, partition=0)
    await fill(transport, topic, 5, partition=1)
    consumer = transport.consumer(group_id=None)
    await consumer.start()
    try:
        consumer.assign([TP(topic, 0), TP(topic, 1)])
        consumer.seek(TP(topic, 0), 0)
        consumer.seek(TP(topic, 1), 0)
        yield consumer, topic
    finally:
        await consumer.stop()


async def test_pause_holds_back_a_partition_until_resumed(transport):
    async with reading_two_partitions(transport) as (consumer, topic):
        consumer.pause([TP(topic, 1)])
        records = await read(consumer, 5)
        await asyncio.sleep(0.3)
        records += await read(consumer, 1, timeout=0.5)
        assert {r.partition for r in records} == {0}
        consumer.resume([TP(topic, 1)])
        more = await read(consumer, 5)
        assert {r.partition for r in more} == {1}
        assert len(more) == 5


async def fetch_until_records(consumer: Any) -> list:
    """`getmany(None)` until it returns records: a transport that sees every change returns at the change,
    another returns empty after its poll interval (the caller looks again)."""
    while not (batches := await consumer.getmany(None, 1000)):
        pass
    return fetched(batches)


async def test_a_fetch_waiting_as_long_as_nothing_changes_returns_what_a_resume_or_a_new_record_brings(
        transport):
    async with reading_two_partitions(transport) as (consumer, topic):
        consumer.pause([TP(topic, 1)])
        assert {r.partition for r in await read(consumer, 5)} == {0}
        waiting = asyncio.ensure_future(fetch_until_records(consumer))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "nothing changed: it waits"
        consumer.resume([TP(topic, 1)])
        resumed = await asyncio.wait_for(waiting, 20)
        resumed += await read(consumer, 5 - len(resumed))
        assert [(r.partition, r.offset) for r in resumed] == [(1, offset) for offset in range(5)]
        waiting = asyncio.ensure_future(fetch_until_records(consumer))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await fill(transport, topic, 1, partition=0)
        assert [(r.partition, r.offset) for r in await asyncio.wait_for(waiting, 20)] == [(0, 5)]


async def test_hold_back_leaves_a_partition_out_until_let_through_and_then_gives_each_record_once(transport):
    async with reading_two_partitions(transport) as (consumer, topic):
        consumer.hold_back([TP(topic, 1)])
        records = await read(consumer, 5)
        await asyncio.sleep(0.3)  # (partition 1 fetched meanwhile, in the background)
        records += await read(consumer, 1, timeout=0.5)
        assert {r.partition for r in records} == {0}
        consumer.hold_back([TP(topic, 0)])
        assert await consumer.getmany(0.2, 1000) == {}, "everything held back: nothing, not everything"
        consumer.let_through([TP(topic, 0), TP(topic, 1)])
        more = await read(consumer, 5)
        await asyncio.sleep(0.3)
        more += await read(consumer, 1, timeout=0.5)
        assert [(r.partition, r.offset) for r in more] == [(1, offset) for offset in range(5)]


async def test_group_consumer_commits_and_a_new_member_resumes_there(transport):
    topic = await make_topic(transport, partitions=1)
    await fill(transport, topic, 6, partition=0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    assigned: list[set[TP]] = []

    async def on_assigned(tps: set[TP]) -> None:
        assigned.append(tps)

    first = transport.consumer(group_id=group, on_assigned=on_assigned)
    first.subscribe([topic])
    await first.start()
    try:
        records = await read(first, 6)
        assert [r.offset for r in records] == list(range(6))
        await first.commit({TP(topic, 0): 4})
    finally:
        await first.stop()
    assert assigned
    assert TP(topic, 0) in assigned[0]
    second = transport.consumer(group_id=group)
    second.subscribe([topic])
    await second.start()
    try:
        records = await read(second, 2)
        assert [r.offset for r in records] == [4, 5]
    finally:
        await second.stop()
