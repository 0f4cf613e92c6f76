"""Delta Lake exports on a real broker, read back by Spark (Delta's own Spark connector): a running worker
exports every table of its app again and again while events flow (the first export full, then one MERGE of
what changed each time, deleted keys and expired windows included); every version, read by time travel,
equals the table's changelog up to the offsets that version records."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer
from pyspark.sql import functions as F  # Spark's own convention

import engine
from engine import export, testing
from engine.codecs import dumps
from engine.tables.keys import META_PREFIX, split_window_key, window_bounds
from tests.integration.helpers import create_topics, read_all, unique

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.kafka

WORDS = 60


@dataclass
class Hit:
    word: str
    at: float  # event time, seconds
    drop: bool = False  # remove the word's count


def make_app(app_id: str, topic: str) -> engine.App:
    app = engine.App(app_id, commit_interval=0.2)
    hits = app.topic(topic, key_type=str, value_type=Hit, timestamp=lambda hit: hit.at)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(60, expires=600)

    @app.agent(hits)
    async def count(stream):
        async for hit in stream:
            if hit.drop:
                counts.pop(hit.word, None)
            else:
                counts[hit.word] += 1
                per_minute[hit.word] += 1

    return app


def changelog_state(records: list[Any], upto: dict[int, int | None], windowed: bool) -> dict[Any, int]:
    """A table's rows from its changelog, up to each partition's offset in `upto` (None: nothing)."""
    state: dict[bytes, int] = {}
    for record in records:
        limit = upto.get(record.partition)
        if limit is None or record.offset > limit or record.key.startswith(META_PREFIX):
            continue
        if record.value is None:
            state.pop(record.key, None)
        else:
            state[record.key] = int(record.value)
    if not windowed:
        return {key.decode(): value for key, value in state.items()}
    return {(split_window_key(key)[0].decode(), window_bounds(key, 60_000)[0] // 1000): value
            for key, value in state.items()}


def spark_state(spark: Any, path: Path, version: int, windowed: bool) -> dict[Any, int]:
    frame = spark.read.format("delta").option("versionAsOf", version).load(str(path))
    if not windowed:
        return {row["key"]: row["value"] for row in frame.collect()}
    rows = frame.select("key", F.col("window_start").cast("long").alias("start"), "value").collect()
    return {(row["key"], row["start"]): row["value"] for row in rows}


async def test_delta_versions_exported_while_writing_equal_the_changelog_at_their_offsets(
        kafka, tmp_path, spark) -> None:
    app_id, topic = unique("lake"), unique("hits")
    await create_topics(kafka.bootstrap, [topic])
    app = make_app(app_id, topic)
    counts = app.tables["counts"]
    rng = random.Random(5)
    stop = asyncio.Event()
    sent = 0

    async def write_until_stopped() -> None:
        nonlocal sent
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5)
        await producer.start()
        try:
            while not stop.is_set():
                for _ in range(100):
                    hit = Hit(f"w{rng.randrange(WORDS)}", 1_000_000 + sent * 1.7, rng.random() < 0.05)
                    await producer.send(topic, dumps(hit), key=hit.word.encode())
                    sent += 1
                await producer.flush()
                await asyncio.sleep(0.02)
        finally:
            await producer.stop()

    lake = tmp_path / "lake"
    versions: list[dict[str, export.ExportResult]] = []
    async with testing.running(app, broker=kafka.url, store="rocksdb://", data_dir=tmp_path / "data",
                               commit_interval=0.2):
        await testing.eventually(lambda: len(counts.active) == 4, 60)
        writer = asyncio.create_task(write_until_stopped())
        try:
            for round_ in range(4):
                await testing.eventually(lambda n=round_: sent > 1500 * (n + 1), 60)
                versions.append(await export.export_app(app, f"delta:{lake}"))
        finally:
            stop.set()
            await writer
    assert [v["counts"].commit.mode for v in versions] == ["full"] + ["incremental"] * 3
    assert sum(v["counts"].deleted for v in versions[1:]) > 0  # dropped words
    assert sum(v["per-minute"].deleted for v in versions[1:]) > 0  # expired windows
    for name, windowed in (("counts", False), ("per-minute", True)):
        changelog = await read_all(kafka.bootstrap, f"{app_id}-{name}-changelog")
        for done in versions:
            result = done[name]
            assert isinstance(result, export.LakeExport)
            expected = changelog_state(changelog, result.offsets, windowed)
            assert len(expected) > 20
            got = spark_state(spark, lake / name, result.version, windowed)
            assert got == expected, (name, result.version)
            positions = result.commit.partitions
            assert sorted(positions) == [0, 1, 2, 3]
            assert all(set(where.inputs) == {topic} for where in positions.values())
    status = export.lake_status(f"delta:{lake / 'counts'}")
    assert status[0].startswith(f"delta:{lake / 'counts'}: version 3, incremental export from worker")
