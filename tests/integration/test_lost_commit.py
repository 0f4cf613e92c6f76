"""A store that reflects a commit the broker no longer has, under exactly-once.

A task's store is written only once the transaction holding its changelog writes and its input offsets
committed. A broker can lose a committed transaction's markers: a single broker restarted under load was
seen doing it (the restart storm's counts above the truth: the transaction coordinator recorded the commit,
none of the five partitions kept its marker, and the producer's next epoch aborted what was left), and an
unclean leader election can (KAFKA-20716). Readers then see that transaction as aborted, its input offsets
included, so its events are processed again; a store that kept its writes would count them twice.

The test makes that state by hand, as the broker left it: more events after what the worker committed, and,
as a worker that processed them would have left them, one partition's store written with their counts and
the input offset past them, while the changelog holds those writes in a transaction the broker aborted.
Started again, the worker rebuilds that store from what its changelog holds committed (saying so) and
counts the events once."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from engine.events import TP
from engine.stores import open_store_backend
from tests.integration.helpers import (
    WorkerProcess,
    committed_offsets,
    committed_to_end,
    create_topics,
    latest,
    produce,
    read_all,
    unique,
    until_done,
)
from tests.integration.table_apps import make_app

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def worker(kafka_url: str, app_id: str, topic: str, tmp_path: Path, name: str, data: Path) -> WorkerProcess:
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(data),
           "ENGINE_PROCESSING_GUARANTEE": "exactly_once"}
    return WorkerProcess("tests.integration.table_apps:app", kafka_url, env, tmp_path / f"{name}.log")


async def lose_a_commit(kafka: Any, app_id: str, topic: str, data: Path, partition: int,
                        counts: dict[str, int], resumes_at: int) -> None:
    """What a worker that counted up to `counts` and the broker that then lost its commit leave: the
    changelog's writes in an aborted transaction of the task's own transactional id, and the store written
    with them, at their changelog offset, and the input offset they were committed with."""
    changelog = f"{app_id}-counts-changelog"
    app = make_app(app_id, topic=topic)
    table: Any = app.counts  # type: ignore[attr-defined]
    encoded = {table.key_codec.encode(key): table.value_codec.encode(value) for key, value in counts.items()}
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap,
                                transactional_id=f"{app_id}-task-{partition}")
    await producer.start()
    try:
        await producer.begin_transaction()
        sent = [await producer.send(changelog, value, key=key, partition=partition)
                for key, value in encoded.items()]
        last = (await sent[-1]).offset
        await producer.abort_transaction()
    finally:
        await producer.stop()
    settings = app.settings({"broker": kafka.url, "data_dir": str(data)})
    backend = open_store_backend(settings.store, settings.app_dir, settings.store_memory)
    store = backend.open("counts", partition)
    try:
        store.write(encoded, last, {TP(topic, partition): resumes_at})
    finally:
        store.close()


async def test_a_store_ahead_of_its_committed_offsets_is_rebuilt_and_its_events_counted_once(kafka, tmp_path):
    app_id, topic = unique("lostcommit"), unique("words")
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)
    data = tmp_path / "data"
    first = [(f"k{i % 24}", 1) for i in range(480)]
    await produce(kafka.bootstrap, topic, first)
    one = worker(kafka.url, app_id, topic, tmp_path, "one", data)
    try:
        await one.wait_for_output("tables ready", 90)  # (the group exists: its offsets can be read)
        await committed_to_end(kafka.bootstrap, app_id, topic, PARTITIONS, workers=[one])
    finally:
        one.stop()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    committed = {tp.partition: offset for tp, offset in (await committed_offsets(kafka.bootstrap, app_id,
                                                                                   tps)).items()}

    second = [(f"k{i % 24}", 1) for i in range(240)]
    await produce(kafka.bootstrap, topic, second)
    records = await read_all(kafka.bootstrap, topic)
    by_partition = Counter(r.partition for r in records if r.offset >= committed.get(r.partition, 0))
    partition = by_partition.most_common(1)[0][0]
    ends = {p: max(r.offset for r in records if r.partition == p) + 1 for p in by_partition}
    truth = Counter(key for key, _ in [*first, *second])
    in_partition = {r.key.decode() for r in records if r.partition == partition}
    await lose_a_commit(kafka, app_id, topic, data, partition,
                        {key: truth[key] for key in in_partition}, ends[partition])

    again = worker(kafka.url, app_id, topic, tmp_path, "again", data)
    try:
        async def counted() -> tuple[bool, Any]:
            changelog = await read_all(kafka.bootstrap, f"{app_id}-counts-changelog")
            state = latest(changelog)
            return all(state.get(key, 0) >= n for key, n in truth.items()), state

        await until_done(counted, "the counts reaching the truth", workers=[again])
        await committed_to_end(kafka.bootstrap, app_id, topic, PARTITIONS, workers=[again])
    finally:
        again.stop()
    state = latest(await read_all(kafka.bootstrap, f"{app_id}-counts-changelog"))
    assert {key: n for key, n in state.items() if n != truth[key]} == {}, "each event counted once"
    said = [line for line in again.output().splitlines()
            if "reflects input past where its task resumes" in line]
    assert len(said) == 1, again.output()[-3000:]
    assert f"changelog[{partition}]" in said[0]
    assert f"{topic}[{partition}] at {ends[partition]}" in said[0]
