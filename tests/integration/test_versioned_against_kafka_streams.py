"""Differential tests of a versioned table and a stream joined with it on event time: engine and Kafka Streams
itself (tests/kafka/reference, mode "versioned-join": `Stores.persistentVersionedKeyValueStore` and
`leftJoin(table, Joined.withGracePeriod)`) on the same seeded input, and both against the join computed here
from the input alone.

The input: prices and orders of 12 symbols, produced interleaved, each up to 1.5 s out of order; one price in
ten a tombstone (no price from then on); some prices more than the history (60 s) behind (left out), some
orders more than the grace (5 s) behind (joined at once). Each order must be joined with the price valid at
its own time, and the results of each key come in the order of their orders' times (the grace buffer's). The
grace is longer than any disorder, so the results do not depend on which topic a system reads first: a live
run and a run over a backlog must give the same results. Engine runs as `engine worker`s, exactly-once under
both group protocols (streams and classic): over a backlog with two workers; live with one SIGKILLed and
started again; live with a second one joining; over the backlog, then again after `engine reset`. Then each
worker is asked over HTTP for every key's price as of times within the history, and for the versions valid
since: the owner's answers, routed. In the last two, engine's versioned table is over the prices' topic (as
Kafka Streams' `builder.table` is); in the first two an agent writes each price into it."""

from __future__ import annotations

import asyncio
import os
import random
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer

from engine.partitioner import partition_for
from tests.integration.differential import stop_all
from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    committed_to_end,
    consume_until,
    create_topics,
    engine_cli,
    placed_over,
    read_all,
    unique,
    web_address,
)
from tests.kafka.reference import StreamsReference

if TYPE_CHECKING:
    from pathlib import Path

    from tests.kafka.broker import KafkaCluster

pytestmark = [pytest.mark.kafka]

PARTITIONS = 4
HISTORY_MS, GRACE_MS = 60_000, 5_000
START_MS = 1_700_000_000_000
# The scenarios where engine's versioned table is over the prices' topic itself, as Kafka Streams' is (in the
# others an agent writes each price into it).
OVER_THE_TOPIC = {"join", "reset"}
Record = tuple[str, str, str | None, int]  # (topic: "prices" or "orders", key, value or None, timestamp ms)


def versioned_input(seed: int, count: int = 1200) -> list[Record]:
    """The records in the order they are produced, every timestamp distinct, then one order per partition far
    enough ahead that every other order's grace passes (its own stays waiting)."""
    rng = random.Random(seed)
    used: set[int] = set()
    records: list[Record] = []
    for n in range(count):
        nominal = START_MS + n * 60
        key = f"k{rng.randrange(12)}"
        if rng.random() < 0.45:
            behind = rng.randrange(0, 1500)
            if n > count // 4 and rng.random() < 0.05:
                behind = rng.randrange(70_000, 90_000)  # older than the history: left out
            topic, value = "prices", None if rng.random() < 0.1 else f"p{n}"
        else:
            behind = rng.randrange(0, 1500)
            if rng.random() < 0.05:
                behind = rng.randrange(15_000, 25_000)  # older than the grace: joined at once
            topic, value = "orders", f"o{n}"
        at = nominal - behind
        while at in used:
            at += 1
        used.add(at)
        records.append((topic, key, value, at))
    end = START_MS + count * 60 + 2 * GRACE_MS
    closers = {partition_for(f"close{n}".encode(), PARTITIONS): f"close{n}" for n in range(40)}
    records += [("orders", closers[p], "closer", end + p) for p in range(PARTITIONS)]
    return records


def kept_prices(records: list[Record]) -> dict[str, dict[int, str | None]]:
    """Per key, the prices kept by time (None: a tombstone): per partition, those not older than the
    partition's newest price time minus the history when they come."""
    kept: dict[str, dict[int, str | None]] = {}
    price_time: dict[int, int] = {}
    for topic, key, value, at in records:
        if topic == "prices":
            partition = partition_for(key.encode(), PARTITIONS)
            newest = price_time.get(partition)
            if newest is not None and at < newest - HISTORY_MS:
                continue
            price_time[partition] = at if newest is None else max(newest, at)
            kept.setdefault(key, {})[at] = value
    return kept


def price_at(kept: dict[str, dict[int, str | None]], key: str, at: int) -> str | None:
    times = [t for t in kept.get(key, {}) if t <= at]
    return kept[key][max(times)] if times else None


def expected_joins(records: list[Record]) -> dict[str, list[str]]:
    """Per key, the "order|price" results in order, computed from the input: the prices kept, and the orders
    in the grace buffer's order: one older than the partition's newest order time minus the grace at once,
    the others once that newest time passes theirs by the grace (by time, then key bytes, then arrival)."""
    kept = kept_prices(records)

    def price_of(key: str, at: int) -> str:
        found = price_at(kept, key, at)
        return "null" if found is None else found

    results: dict[str, list[str]] = {}
    order_time: dict[int, int] = {}
    waiting: dict[int, list[tuple[int, bytes, int, str, str]]] = {}
    for arrival, (topic, key, value, at) in enumerate(records):
        if topic != "orders":
            continue
        assert value is not None
        partition = partition_for(key.encode(), PARTITIONS)
        newest = order_time.get(partition)
        if newest is not None and newest - GRACE_MS > at:
            results.setdefault(key, []).append(f"{value}|{price_of(key, at)}")
            continue
        order_time[partition] = at if newest is None else max(newest, at)
        buffer = waiting.setdefault(partition, [])
        buffer.append((at, key.encode(), arrival, key, value))
        buffer.sort()
        while buffer and buffer[0][0] <= order_time[partition] - GRACE_MS:
            at_, _, _, key_, value_ = buffer.pop(0)
            results.setdefault(key_, []).append(f"{value_}|{price_of(key_, at_)}")
    return results


def per_key(records: list[Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        found.setdefault(record.key.decode(), []).append(record.value.decode())
    return found


async def produce(bootstrap: str, topics: dict[str, str], records: list[Record], *, pace: float = 0) -> None:
    """Each record to its key's partition with its timestamp; `pace` seconds between batches of 20."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for start in range(0, len(records), 20):
            for topic, key, value, at in records[start:start + 20]:
                raw = None if value is None else value.encode()
                await producer.send(topics[topic], raw, key=key.encode(),
                                    partition=partition_for(key.encode(), PARTITIONS), timestamp_ms=at)
            await producer.flush()
            if pace:
                await asyncio.sleep(pace)
    finally:
        await producer.stop()


async def run_engine(kafka: KafkaCluster, tmp_path: Path, topics: dict[str, str], records: list[Record],
                     scenario: str) -> dict[str, list[str]]:
    """Engine's results (read_committed) once it committed both topics to their ends."""
    app_id = unique("versioned")
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topics["orders"], "ITEST_RIGHT": topics["prices"],
           "ITEST_MODE": "versioned-join", "ITEST_A_MS": str(HISTORY_MS), "ITEST_B_MS": str(GRACE_MS),
           "ENGINE_WEB_PORT": "0", **SHORT_SESSION}
    if scenario in OVER_THE_TOPIC:
        env["ITEST_SOURCE"] = "1"

    def worker(name: str, data: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.reference_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / data)}, tmp_path / f"{name}.log")

    half = len(records) // 2
    workers: list[WorkerProcess] = []
    try:
        if scenario == "backlog":
            await produce(kafka.bootstrap, topics, records)
            workers = [worker("first", "first"), worker("second", "second")]
        elif scenario == "reset":  # a run over the backlog, `engine reset`, and the same run again
            await produce(kafka.bootstrap, topics, records)
            first = worker("first", "first")
            for name in topics.values():
                await committed_to_end(kafka.bootstrap, app_id, name, PARTITIONS, workers=[first])
            assert first.terminate() == 0, first.output()[-3000:]
            before = await read_all(kafka.bootstrap, f"{app_id}-joined")
            assert per_key(before) == expected_joins(records)
            reset = await asyncio.to_thread(
                engine_cli, {**os.environ, **env, "ENGINE_DATA_DIR": str(tmp_path / "first")}, "reset", "-A",
                "tests.integration.reference_apps:app", "--broker", kafka.url, "--execute")
            assert reset.returncode == 0, reset.stdout + reset.stderr
            workers = [worker("again", "first")]
            for name in topics.values():
                await committed_to_end(kafka.bootstrap, app_id, name, PARTITIONS, workers=workers)
            seen = {(r.partition, r.offset) for r in before}
            return per_key([r for r in await read_all(kafka.bootstrap, f"{app_id}-joined")
                            if (r.partition, r.offset) not in seen])
        else:
            workers = [worker("first", "first")]
            await placed_over(workers, PARTITIONS)
            await produce(kafka.bootstrap, topics, records[:half], pace=0.02)
            if scenario == "sigkill":  # with results committed, and a transaction open
                await consume_until(kafka.bootstrap, f"{app_id}-joined", lambda rs: len(rs) >= 20,
                                    workers=workers)
                await produce(kafka.bootstrap, topics, records[half:half + 100], pace=0.02)
                workers[0].kill()
                workers.append(worker("restarted", "first"))
            else:
                workers.append(worker("second", "second"))
                await produce(kafka.bootstrap, topics, records[half:half + 100], pace=0.02)
            await produce(kafka.bootstrap, topics, records[half + 100:], pace=0.02)
        live = [w for w in workers if w.process.poll() is None]
        await placed_over(live, PARTITIONS)
        for name in topics.values():
            await committed_to_end(kafka.bootstrap, app_id, name, PARTITIONS, workers=live)
        await ask_prices(live, records)
        return per_key(await read_all(kafka.bootstrap, f"{app_id}-joined"))
    finally:
        stop_all(workers)


async def ask_prices(workers: list[WorkerProcess], records: list[Record]) -> None:
    """Each worker, asked over HTTP for every key's price as of times in the last 20 s of the input (within
    the history) and for its versions valid then, answers for every key (the owner's answer, forwarded)."""
    kept = kept_prices(records)
    end = max(at for topic, _, _, at in records if topic == "prices")
    times = [end - 20_000 + 2_500 * n for n in range(9)]
    async with aiohttp.ClientSession() as session:
        async def ask(address: str, path: str) -> tuple[int, Any]:
            """The answer, asked again while the key's partition moves or recovers (503: a follow-up
            assignment after the run)."""
            for _ in range(600):
                async with session.get(f"http://{address}{path}") as got:
                    if got.status != 503:
                        return got.status, await got.json()
                await asyncio.sleep(0.1)
            raise AssertionError(f"{path}: still 503 after 60 s")

        for worker in workers:
            address = web_address(worker)
            for key in sorted(kept):
                for at in times:
                    status, body = await ask(address, f"/tables/prices/{key}?as_of={at / 1000}")
                    expected = price_at(kept, key, at)
                    answer = (200, expected) if expected is not None else (404, None)
                    assert (status, body.get("value")) == answer, (key, at, body)
                _, body = await ask(address, f"/tables/prices/{key}?from={times[0] / 1000}")
                ordered = sorted(kept[key])
                wanted = [(at, kept[key][at]) for n, at in enumerate(ordered)
                          if kept[key][at] is not None
                          and (n + 1 == len(ordered) or ordered[n + 1] > times[0])]
                versions = body.get("versions", [])
                assert [(round(v["valid_from"] * 1000), v["value"]) for v in versions] == wanted, key


async def reference_run(kafka: KafkaCluster, tmp_path: Path, topics: dict[str, str]) -> dict[str, list[str]]:
    """Kafka Streams' results on the complete input, once it committed both topics to their ends."""
    reference_id, reference_out = unique("versioned-ref"), unique("versioned-ref-out")
    await create_topics(kafka.bootstrap, [reference_out], partitions=PARTITIONS)
    log = tmp_path / "reference.log"
    with StreamsReference(kafka.bootstrap, reference_id, "versioned-join", topics["orders"], reference_out,
                          HISTORY_MS, GRACE_MS, topics["prices"], log=log) as reference:
        await reference.wait_running()
        for name in topics.values():
            await committed_to_end(kafka.bootstrap, reference_id, name, PARTITIONS)
        return per_key(await read_all(kafka.bootstrap, reference_out))


# Each scenario under one group protocol (the join and its store see no difference between them; the
# protocols' own differences at moves are test_rebalances.py's): both see a move, a SIGKILL and a join.
@pytest.mark.parametrize(("scenario", "group_protocol"), [
    ("backlog", "classic"), ("sigkill", "streams"), ("join", "classic"), ("reset", "streams")])
async def test_a_join_with_a_versioned_table_equals_kafka_streams_and_the_input(
        kafka: KafkaCluster, tmp_path: Path, scenario: str, group_protocol: str) -> None:
    records = versioned_input({"backlog": 21, "sigkill": 22, "join": 23, "reset": 24}[scenario])
    expected = expected_joins(records)
    results = [r for rs in expected.values() for r in rs]
    assert len(results) > 500
    assert sum(r.endswith("|null") for r in results) > 20  # (before any price, or after a tombstone)
    topics = {"prices": unique("prices"), "orders": unique("orders")}
    await create_topics(kafka.bootstrap, [topics["orders"]], partitions=PARTITIONS)
    await create_topics(kafka.bootstrap, [topics["prices"]], partitions=PARTITIONS, config={
        "cleanup.policy": "compact", "min.compaction.lag.ms": str(HISTORY_MS)})  # (a table's topic)
    engine = await run_engine(kafka, tmp_path, topics, records, scenario)
    assert engine == expected
    assert await reference_run(kafka, tmp_path, topics) == expected
