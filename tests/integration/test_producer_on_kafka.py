"""engine's Kafka producer on a real broker: batches sent whole; keyed records where aiokafka puts them."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from engine.errors import DeliveryFailed
from engine.transport import open_transport
from tests.integration.helpers import consume_until, create_topics, read_all, unique


async def test_a_batch_larger_than_a_request_arrives_whole_in_order_and_reports_its_last_offset(kafka):
    topic = unique("batches")
    await create_topics(kafka.bootstrap, [topic], partitions=2)
    producer = open_transport(kafka.url).producer("batch-test")  # transactional, like a task's
    await producer.start()
    try:
        first = [(b"before", b"0")]
        await producer.send_batch(topic, 1, first)
        records = [(f"k{i}".encode(), b"x" * 1000) for i in range(600)]  # 600 kB: past one 256 kB batch
        last = await producer.send_batch(topic, 1, records)
        await producer.commit_transaction({}, "batch-test-group")
        assert last.result() == len(first) + len(records) - 1
    finally:
        await producer.stop()
    stored = [r for r in await read_all(kafka.bootstrap, topic) if r.partition == 1]
    assert [(r.key, r.value) for r in stored] == first + records
    assert [r.offset for r in stored][-1] == len(first) + len(records) - 1


async def test_keyed_records_land_where_aiokafkas_default_partitioner_puts_them(kafka):
    topic = unique("keyed")
    await create_topics(kafka.bootstrap, [topic], partitions=5)
    keys = [f"key-{i}".encode() for i in range(200)]
    engine_producer = open_transport(kafka.url).producer(None)
    await engine_producer.start()
    reference = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await reference.start()
    try:
        expected = {}
        for key in keys:
            expected[key] = (await (await reference.send(topic, b"ref", key=key))).partition
            await engine_producer.send(topic, key, b"engine")
        await engine_producer.flush()
    finally:
        await reference.stop()
        await engine_producer.stop()
    placed = {r.key: r.partition for r in await read_all(kafka.bootstrap, topic) if r.value == b"engine"}
    assert placed == expected


async def test_every_kind_of_record_arrives_as_sent_and_only_with_its_transaction(kafka):
    """Sends take aiokafka's accumulator directly when they can, its full send otherwise: either way every
    field arrives, the partition joins the open transaction, and a record too large fails clearly."""
    topic = unique("kinds")
    await create_topics(kafka.bootstrap, [topic], partitions=3)
    producer = open_transport(kafka.url).producer("kinds-test")  # transactional, like a task's
    await producer.start()
    sent = [  # key, value, headers, partition, timestamp
        (b"timed", b"v", None, None, 1_234),
        (b"tombstone", None, None, None, None),
        (None, b"unkeyed", None, None, None),
        (b"placed", b"on 2", None, 2, None),
        (b"headed", b"v", [("trace", b"1")], None, None),
        (b"headed-tuple", b"v", (("trace", b"2"),), None, None),  # (an event's headers are a tuple)
        (b"big", b"x" * 900_000, None, None, None),
    ]
    try:
        for key, value, headers, partition, timestamp in sent:
            await producer.send(topic, key, value, headers=headers, partition=partition,
                                timestamp_ms=timestamp)
        await producer.flush()
        assert await read_all(kafka.bootstrap, topic) == []  # not committed yet
        await producer.commit_transaction({}, "kinds-group")
        with pytest.raises(DeliveryFailed, match=repr(topic)):
            await producer.send(topic, b"huge", b"x" * 2_000_000)
    finally:
        await producer.stop()
    # (The commit's markers reach the partitions just after it returns: read until all are committed.)
    found = await consume_until(kafka.bootstrap, topic, lambda records: len(records) >= len(sent))
    stored = {r.key: r for r in found}
    assert len(stored) == len(sent)
    for key, value, headers, partition, timestamp in sent:
        record = stored[key]
        assert record.value == value
        assert list(record.headers) == list(headers or [])
        if partition is not None:
            assert record.partition == partition
        if timestamp is not None:
            assert record.timestamp == timestamp


async def test_records_sent_many_at_once_land_where_send_puts_them_with_every_field_and_their_transaction(
        kafka):
    """`send_many` (a fused group_by's forwarding): each record in its key's partition, as `send` and
    aiokafka place it, in order, with its headers (a tuple or a list, a value None) and timestamp, more than
    a batch's worth per partition, and only once the transaction commits; records without a key too."""
    from engine.partitioner import partition_for

    topic = unique("many")
    await create_topics(kafka.bootstrap, [topic], partitions=3)
    producer = open_transport(kafka.url).producer("many-test")  # transactional, like a task's
    await producer.start()
    keyed = [(f"k{i % 40}".encode(), b"x" * 1000 + str(i).encode(),
              ((("n", str(i).encode()),) if i % 2 else [("n", str(i).encode()), ("none", None)]) if i % 3
              else (), 1_700_000_000_000 + i) for i in range(900)]  # 900 kB, 3 partitions: past a batch each
    keyless = [(None, b"unkeyed", (), 1_234)]
    try:
        await producer.send_many(topic, keyed)
        await producer.send_many(topic, keyless)
        await producer.flush()
        assert await read_all(kafka.bootstrap, topic) == []  # not committed yet
        await producer.commit_transaction({}, "many-group")
    finally:
        await producer.stop()
    found = await consume_until(kafka.bootstrap, topic,
                                lambda records: len(records) >= len(keyed) + len(keyless))
    for partition in range(3):
        expected = [(key, value, [(k, v) for k, v in headers], at) for key, value, headers, at in keyed
                    if partition_for(key, 3) == partition]
        got = [(r.key, r.value, list(r.headers), r.timestamp) for r in found
               if r.partition == partition and r.key is not None]
        assert got == expected
    assert [(r.value, r.timestamp) for r in found if r.key is None] == [(b"unkeyed", 1_234)]


async def test_a_record_too_large_for_send_many_is_refused_before_any_of_its_records_is_enqueued(kafka):
    """So that its sender can send the records before it and deal with its event alone (a fused group_by
    dead-letters it as `send` would have)."""
    from engine.errors import RecordTooLarge

    topic = unique("large")
    await create_topics(kafka.bootstrap, [topic], partitions=2)
    producer = open_transport(kafka.url).producer(None)
    await producer.start()
    records = [(b"a", b"small", (), None), (b"b", b"x" * 2_000_000, (), None), (b"c", b"small", (), None)]
    try:
        await producer.send(topic, b"warm", b"metadata")  # (send_many checks sizes once it has metadata)
        with pytest.raises(RecordTooLarge, match=rf"a record for {topic!r} of 2000001 bytes") as refused:
            await producer.send_many(topic, records)
        assert refused.value.index == 1
        await producer.flush()
    finally:
        await producer.stop()
    assert [r.key for r in await read_all(kafka.bootstrap, topic)] == [b"warm"]


async def test_a_send_many_cancelled_while_it_waits_for_room_has_enqueued_none_of_its_records(kafka):
    """A fused group_by's send is cancelled when its agent is abandoned, and the run goes back to the
    mailbox to be sent again: a send_many that had enqueued part of it (one partition's batch went, the
    next waited for room) would send that part twice. A batch lingering on one target partition makes the
    run wait; cancelled there, none of the run's records is ever delivered. Sent again, each is, once."""
    import asyncio

    from engine.partitioner import partition_for
    from engine.transport.kafka_producer import KafkaProducer

    topic = unique("all-or-none")
    await create_topics(kafka.bootstrap, [topic], partitions=2)
    first = next(f"a{i}".encode() for i in range(100) if partition_for(f"a{i}".encode(), 2) == 0)
    second = next(f"b{i}".encode() for i in range(100) if partition_for(f"b{i}".encode(), 2) == 1)
    producer = KafkaProducer(kafka.bootstrap, {}, linger=3.0)  # a batch waits 3 s before it goes
    await producer.start()
    run = [(first, b"run", (), None), (second, b"run", (), None)]  # partition 0's batch first, then 1's
    try:
        await producer.send(topic, second, b"lingering", partition=1)  # room on partition 1: none for 3 s
        sending = asyncio.ensure_future(producer.send_many(topic, run))
        await asyncio.sleep(0)  # it runs until it first waits: for partition 1's room, the batches built
        assert not sending.done()
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        await producer.flush()  # the lingering record goes now
        assert [(r.key, r.value) for r in await read_all(kafka.bootstrap, topic)] == [(second, b"lingering")]
        await producer.send_many(topic, run)  # given back and sent again: once
        await producer.flush()
    finally:
        await producer.stop()
    assert sorted((r.key, r.value) for r in await read_all(kafka.bootstrap, topic)) == sorted(
        [(second, b"lingering"), (first, b"run"), (second, b"run")])
