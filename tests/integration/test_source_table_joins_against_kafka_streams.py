"""Differential tests of table joins: engine and Kafka Streams itself (tests/kafka/reference, mode
"table-joins") join tables over source topics (Kafka Streams' `builder.table`) on the same seeded input:
keys updated many times, one record in four a tombstone (a null value: the key is deleted and its join
results retracted). By key (inner, left, outer; two tables of 4 partitions) and by foreign key (inner, left;
a table of 3 partitions naming rows of one of 4). Engine runs under exactly-once through `engine worker`s,
the input produced as they run, with a second worker joining mid-stream or the worker SIGKILLed and started
again (there with the right table a global table over its topic, which engine joins as a table over that
topic); Kafka Streams then, alone, on the complete input. Each join's final value per key must be equal, and
equal to the join of the topics' final states computed here from the input."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.differential import PARTITIONS, stop_all
from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    consume_until,
    create_topics,
    placed_over,
    read_all,
    unique,
)
from tests.integration.table_join_differential import (
    Update,
    expected_joins,
    final_rows,
    settled,
    table_updates,
)
from tests.kafka.reference import StreamsReference

if TYPE_CHECKING:
    from pathlib import Path

    from tests.kafka.broker import KafkaCluster

pytestmark = pytest.mark.kafka

ORDER_PARTITIONS = 3
JOINS = ("inner", "left", "outer", "fk-inner", "fk-left")  # as Reference.java tags them, engine names them
COMPACTED = {"cleanup.policy": "compact"}


async def produce_updates(bootstrap: str, topics: dict[str, str], updates: list[Update]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        for table, key, value in updates:
            await producer.send(topics[table], None if value is None else value.encode(), key=key.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def run_engine(kafka: KafkaCluster, tmp_path: Path, topics: dict[str, str], updates: list[Update],
                     fault: str) -> dict[str, str]:
    """Engine's joins (every join's final rows) on `updates`, produced as its workers run, with `fault`."""
    app_id = unique("table-joins")
    env = {"ITEST_APP": app_id, "ITEST_MODE": "table-joins", "ITEST_TOPIC": topics["left"],
           "ITEST_RIGHT": topics["right"], "ITEST_ORDERS": topics["orders"], **SHORT_SESSION}
    if fault == "sigkill":
        env["ITEST_GLOBAL_RIGHT"] = "1"  # (a global table over the right topic: joined as a table over it)

    def worker(name: str, data: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.reference_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / data)}, tmp_path / f"{name}.log")

    half, three_quarters = len(updates) // 2, len(updates) * 3 // 4
    workers = [worker("first", "first")]
    try:
        await workers[0].wait_for_output("running")
        await produce_updates(kafka.bootstrap, topics, updates[:half])
        sent = half
        if fault == "join":
            workers.append(worker("second", "second"))
            while sent < three_quarters and "assigned" not in workers[1].output():
                await produce_updates(kafka.bootstrap, topics, updates[sent:sent + 10])
                sent += 10
                await asyncio.sleep(0.05)
            await workers[1].wait_for_output("assigned")
        else:  # killed while records flow in: with results committed, and a transaction open
            await consume_until(kafka.bootstrap, f"{app_id}-fk-left-changelog", lambda rs: len(rs) >= 20,
                                workers=workers)
            while sent < three_quarters:
                await produce_updates(kafka.bootstrap, topics, updates[sent:sent + 10])
                sent += 10
                await asyncio.sleep(0.05)
            workers[0].kill()
            workers.append(worker("restarted", "first"))
        await produce_updates(kafka.bootstrap, topics, updates[sent:])
        live = [w for w in workers if w.process.returncode != -9]
        await placed_over(live, PARTITIONS)
        await settled(kafka.bootstrap, app_id, [
            list(topics.values()),
            [f"{app_id}-fk-{how}-subscription" for how in ("inner", "left")],
            [f"{app_id}-fk-{how}-response" for how in ("inner", "left")]], live)
        rows: dict[str, str] = {}
        for join in JOINS:
            rows.update(final_rows(await read_all(kafka.bootstrap, f"{app_id}-{join}-changelog"), join))
    finally:
        stop_all(workers)
    return rows


async def reference_run(kafka: KafkaCluster, tmp_path: Path, topics: dict[str, str]) -> dict[str, str]:
    """Kafka Streams' joins (every join's final rows) on the complete input, once it committed all of it
    and what its foreign-key joins wrote on the way."""
    reference_id, reference_out = unique("table-joins-ref"), unique("table-joins-ref-out")
    await create_topics(kafka.bootstrap, [reference_out], partitions=PARTITIONS)
    with StreamsReference(kafka.bootstrap, reference_id, "table-joins", topics["left"], reference_out, 0, 0,
                          topics["right"], topics["orders"], log=tmp_path / "reference.log") as reference:
        await reference.wait_running()
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await admin.start()
        try:
            internal = [name for name in await admin.list_topics() if name.startswith(f"{reference_id}-")]
        finally:
            await admin.close()
        stages = [sorted(name for name in internal if f"-{kind}-" in name and name.endswith("-topic"))
                  for kind in ("SUBSCRIPTION-REGISTRATION", "SUBSCRIPTION-RESPONSE")]
        assert all(len(stage) == 2 for stage in stages), internal  # one of each per foreign-key join
        await settled(kafka.bootstrap, reference_id, [list(topics.values()), *stages])
        return final_rows(await read_all(kafka.bootstrap, reference_out))


@pytest.mark.parametrize("fault", ["join", "sigkill"])
async def test_joins_of_source_tables_equal_kafka_streams_with_tombstones(kafka: KafkaCluster, tmp_path: Path,
                                                                         fault: str) -> None:
    updates = table_updates(31 if fault == "join" else 32)
    topics = {"left": unique("left"), "right": unique("right"), "orders": unique("orders")}
    await create_topics(kafka.bootstrap, [topics["left"], topics["right"]], partitions=PARTITIONS,
                        config=COMPACTED)
    await create_topics(kafka.bootstrap, [topics["orders"]], partitions=ORDER_PARTITIONS, config=COMPACTED)
    got = await run_engine(kafka, tmp_path, topics, updates, fault)
    expected = await reference_run(kafka, tmp_path, topics)
    assert sum(1 for _, _, value in updates if value is None) > 300  # tombstones enough to matter
    for join in JOINS:  # rows of every join, some with a missing side where a join keeps one
        assert sum(1 for key in expected if key.startswith(f"{join}:")) > 10, join
    assert any(value.endswith("|null") for key, value in expected.items() if key.startswith("fk-left:"))
    assert any(value.startswith("null|") for key, value in expected.items() if key.startswith("outer:"))
    assert sorted(set(got.items()) - set(expected.items())) == []  # none that Kafka Streams does not have
    assert sorted(set(expected.items()) - set(got.items())) == []  # none missing
    assert expected == expected_joins(updates)  # and both are the join of the tables' final states
