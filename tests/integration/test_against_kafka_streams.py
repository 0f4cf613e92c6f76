"""Differential tests: engine and Kafka Streams itself (tests/kafka/reference) run the same aggregation on
the same seeded input topic, with out-of-order and late records; engine under exactly-once, with a second
worker joining mid-stream, or SIGKILLed mid-stream and restarted. Every final result must be equal, none
missing, none repeated. Engine runs first; Kafka Streams then, alone, on the complete input (its results
depend on the input only; alone, since a JVM sharing two busy cores with engine's workers crawls)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.differential import (
    PARTITIONS,
    Result,
    engine_results,
    join_input,
    reference_results,
    seeded_input,
    stop_all,
)
from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    committed_to_end,
    consume_until,
    create_topics,
    placed_over,
    read_all,
    unique,
)
from tests.kafka.reference import StreamsReference

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.kafka.broker import KafkaCluster

# Each case under one group protocol, the two taking turns (what differs between them at a move is
# test_rebalances.py's): each protocol sees a worker join and a SIGKILL, in sessions and in the join.
pytestmark = [pytest.mark.kafka]


async def produce_timed(bootstrap: str, topic: str, records: list[tuple[str, int]],
                        partition: int | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        for key, at in records:
            await producer.send(topic, b"v", key=key.encode(), timestamp_ms=at, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


async def run_engine(kafka: KafkaCluster, tmp_path: Path, mode: str, a_ms: int, b_ms: int,
                     records: list[tuple[str, int]], closing_ms: int, topic: str, *,
                     fault: str = "join") -> list:
    """Engine on `records`, produced to `topic` as it runs: the first half of `records` is produced; then
    the fault: "join" starts a second worker and produces the third quarter paced until it was
    assigned partitions; "sigkill" waits for some of engine's results to commit, produces the third quarter
    paced, SIGKILLs the worker right after (its commits are 0.2 s apart: a transaction is open) and starts
    it again on the same data directory. Then the rest, and a record at `closing_ms` on every
    partition. Returns engine's raw output records, once it committed the input to its end."""
    app_id = unique(mode)
    results = f"{app_id}-counts-closed"
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)
    half, three_quarters = len(records) // 2, len(records) * 3 // 4
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_MODE": mode, "ITEST_A_MS": str(a_ms),
           "ITEST_B_MS": str(b_ms), **SHORT_SESSION}

    def worker(name: str, data: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.reference_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / data)}, tmp_path / f"{name}.log")

    workers = [worker("first", "first")]
    try:
        await workers[0].wait_for_output("running")
        await produce_timed(kafka.bootstrap, topic, records[:half])
        sent = half
        if fault == "join":
            workers.append(worker("second", "second"))
            while sent < three_quarters and "assigned" not in workers[1].output():
                await produce_timed(kafka.bootstrap, topic, records[sent:sent + 10])
                sent += 10
                await asyncio.sleep(0.05)
            await workers[1].wait_for_output("assigned")
        else:  # killed while records flow in: with results committed, and a transaction open
            await consume_until(kafka.bootstrap, results, lambda rs: len(rs) >= 20, workers=workers)
            while sent < three_quarters:
                await produce_timed(kafka.bootstrap, topic, records[sent:sent + 10])
                sent += 10
                await asyncio.sleep(0.05)
            workers[0].kill()
            workers.append(worker("restarted", "first"))
        await produce_timed(kafka.bootstrap, topic, records[sent:])
        live = [w for w in workers if w.process.poll() is None]
        await placed_over(live, PARTITIONS)
        for partition in range(PARTITIONS):
            await produce_timed(kafka.bootstrap, topic, [("closer", closing_ms)], partition=partition)
        await committed_to_end(kafka.bootstrap, app_id, topic, PARTITIONS, workers=live)
        engine = await read_all(kafka.bootstrap, results)
    finally:
        stop_all(workers)
    return engine


async def reference_run(kafka: KafkaCluster, tmp_path: Path, mode: str, a_ms: int, b_ms: int, topic: str,
                        results: Callable[[list], Counter[Any]], right: str | None = None) -> Counter[Any]:
    """Kafka Streams' results on the (complete) input, once it committed all of it."""
    reference_id, reference_out = unique(f"{mode}-ref"), unique(f"{mode}-ref-out")
    await create_topics(kafka.bootstrap, [reference_out], partitions=PARTITIONS)
    with StreamsReference(kafka.bootstrap, reference_id, mode, topic, reference_out, a_ms, b_ms,
                          *([right] if right is not None else []),
                          log=tmp_path / "reference.log") as reference:
        await reference.wait_running()
        for source in (topic, right) if right is not None else (topic,):
            await committed_to_end(kafka.bootstrap, reference_id, source, PARTITIONS)
        return results(await read_all(kafka.bootstrap, reference_out))


async def differential(kafka: KafkaCluster, tmp_path: Path, mode: str, a_ms: int, b_ms: int,
                       records: list[tuple[str, int]], closing_ms: int, fault: str,
                       size_ms: int | None = None) -> None:
    """Engine with `fault`, then Kafka Streams, on one input: every final result equal."""
    topic = unique(f"{mode}-in")
    engine = engine_results(await run_engine(kafka, tmp_path, mode, a_ms, b_ms, records, closing_ms, topic,
                                             fault=fault), size_ms)
    expected = await reference_run(kafka, tmp_path, mode, a_ms, b_ms, topic, reference_results)
    assert_equal(engine, expected)


def assert_equal(got: Counter[Result], expected: Counter[Result]) -> None:
    assert sum(expected.values()) > 200  # results enough to mean something, from Kafka Streams itself
    assert [r for r, n in got.items() if n > 1] == []  # none repeated
    assert sorted(got - expected) == []  # none that Kafka Streams does not have
    assert sorted(expected - got) == []  # none missing


@pytest.mark.parametrize("group_protocol", ["classic"])
async def test_session_counts_equal_kafka_streams_with_a_worker_joining_mid_stream(
        kafka: KafkaCluster, tmp_path: Path, group_protocol: str) -> None:
    gap_ms, grace_ms = 5_000, 3_000
    records = seeded_input(11, gap_ms, grace_ms)
    closing = max(at for _, at in records) + gap_ms + grace_ms + 1_000  # closes every session
    await differential(kafka, tmp_path, "session-count", gap_ms, grace_ms, records, closing, "join")


@pytest.mark.parametrize("group_protocol", ["streams"])
async def test_session_counts_equal_kafka_streams_exactly_once_across_a_sigkill(
        kafka: KafkaCluster, tmp_path: Path, group_protocol: str) -> None:
    gap_ms, grace_ms = 5_000, 3_000
    records = seeded_input(13, gap_ms, grace_ms)
    closing = max(at for _, at in records) + gap_ms + grace_ms + 1_000
    await differential(kafka, tmp_path, "session-count", gap_ms, grace_ms, records, closing, "sigkill")


@pytest.mark.parametrize("group_protocol", ["streams"])
async def test_sliding_counts_equal_kafka_streams_with_a_worker_joining_mid_stream(
        kafka: KafkaCluster, tmp_path: Path, group_protocol: str) -> None:
    size_ms, grace_ms = 5_000, 3_000
    records = seeded_input(12, size_ms, grace_ms)
    closing = max(at for _, at in records) + size_ms + grace_ms + 1_000  # closes every window
    await differential(kafka, tmp_path, "sliding-count", size_ms, grace_ms, records, closing, "join",
                       size_ms=size_ms)


def pairs(records: list[Any]) -> Counter[tuple[str, str]]:
    """A join's results as (key, "left|right") with how often each came."""
    return Counter((r.key.decode(), r.value.decode()) for r in records)


async def produce_values(bootstrap: str, topic: str, records: list[tuple[str, int]], side: str) -> None:
    """Records whose value names them: "<side>-<key>-<time>"."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        for key, at in records:
            await producer.send(topic, f"{side}-{key}-{at}".encode(), key=key.encode(), timestamp_ms=at)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.mark.parametrize(("fault", "group_protocol"), [("join", "streams"), ("sigkill", "classic")])
async def test_a_left_join_equals_kafka_streams_exactly_once(kafka: KafkaCluster, tmp_path: Path,
                                                              fault: str, group_protocol: str) -> None:
    """Both streams are in their topics before either system starts (a backlog, as reprocessing is): each
    takes them in timestamp order, so each one's results are determined by the input alone (Kafka Streams
    runs after engine, on its own). Mid-stream, a second engine worker joins, or the worker is SIGKILLed (a
    transaction open: its commits are 0.2 s apart) and started again on its data directory."""
    within_ms, grace_ms = 4_000, 2_000
    left_records, right_records = join_input(21, within_ms, grace_ms)
    left, right, app_id = unique("orders"), unique("payments"), unique("left-join")
    results = f"{app_id}-joined"
    await create_topics(kafka.bootstrap, [left, right, results], partitions=PARTITIONS)
    closing = max(at for _, at in left_records + right_records) + 2 * (within_ms + grace_ms)
    await produce_values(kafka.bootstrap, left, left_records, "L")
    await produce_values(kafka.bootstrap, right, right_records, "R")
    for partition in range(PARTITIONS):  # one left record far ahead per task: every wait ends
        await produce_timed(kafka.bootstrap, left, [("closer", closing)], partition=partition)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": left, "ITEST_RIGHT": right, "ITEST_MODE": "left-join",
           "ITEST_A_MS": str(within_ms), "ITEST_B_MS": str(grace_ms), "ITEST_DELAY": "0.003"}

    def worker(name: str, data: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.reference_apps:app", kafka.url,
                             {**env, **SHORT_SESSION, "ENGINE_DATA_DIR": str(tmp_path / data)},
                             tmp_path / f"{name}.log")

    workers = [worker("first", "first")]
    try:
        await consume_until(kafka.bootstrap, results, lambda rs: len(rs) >= 50, workers=workers)  # mid-stream
        if fault == "join":
            workers.append(worker("second", "second"))
        else:
            workers[0].kill()
            workers.append(worker("restarted", "first"))
        live = [w for w in workers if w.process.returncode != -9]
        await placed_over(live, PARTITIONS)
        for topic in (left, right):
            await committed_to_end(kafka.bootstrap, app_id, topic, PARTITIONS, workers=live)
        got = pairs(await read_all(kafka.bootstrap, results))
    finally:
        stop_all(workers)
    expected = await reference_run(kafka, tmp_path, "left-join", within_ms, grace_ms, left, pairs, right)
    assert sum(expected.values()) > 500  # results enough to mean something, from Kafka Streams itself
    assert sum(1 for _, value in expected if value.endswith("|null")) > 20  # records alone among them
    assert sorted((got - expected).items()) == []  # none that Kafka Streams does not have (nor more often)
    assert sorted((expected - got).items()) == []  # none missing
