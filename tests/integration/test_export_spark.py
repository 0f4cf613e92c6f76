"""The Spark bridge on a real broker and a real local PySpark session: a live export taken while writes go on
is exactly the changelog up to the offsets in its manifest; offline and from-changelog exports (through the
CLI) equal the live one; windowed tables arrive in Spark with correct window columns."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter

import pytest

pytest.importorskip("pyspark", reason="the spark extra: pip install 'engine-streams[spark]'")

from aiokafka import AIOKafkaProducer
from pyspark.sql import functions as F  # Spark's own convention
from pyspark.sql.types import LongType, StringType, TimestampType

from engine import export, testing
from engine.codecs import dumps
from tests.integration.export_apps import make_app
from tests.integration.helpers import ROOT, create_topics, latest, produce, read_all, unique

pytestmark = pytest.mark.kafka


def hit(i: int, words: int) -> dict[str, object]:
    return {"word": f"w{i % words}", "at": 1_000_000 + i * 1.7}


async def test_live_export_while_writing_matches_its_offsets_exactly(kafka, tmp_path, spark):
    app_id, topic = unique("export-live"), unique("hits")
    await create_topics(kafka.bootstrap, [topic])
    app = make_app(app_id, topic)
    counts = app.tables["counts"]
    stop = asyncio.Event()
    sent = 0

    async def write_until_stopped() -> None:
        nonlocal sent
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5)
        await producer.start()
        try:
            while not stop.is_set():
                for _ in range(200):
                    value = hit(sent, 300)
                    await producer.send(topic, dumps(value), key=str(value["word"]).encode())
                    sent += 1
                await producer.flush()
                await asyncio.sleep(0.02)
        finally:
            await producer.stop()

    def total() -> int:
        return sum(v for _, v in counts.items())

    async with testing.running(app, broker=kafka.url, store="rocksdb://", data_dir=tmp_path / "data",
                               commit_interval=0.2):
        writer = asyncio.create_task(write_until_stopped())
        try:
            await testing.eventually(lambda: total() > 3000, 60)
            manifest = await export.export_table(counts, tmp_path / "live")
            exported_at = total()
            await testing.eventually(lambda: total() > exported_at + 3000, 60)  # writes went on
        finally:
            stop.set()
            await writer
    changelog = await read_all(kafka.bootstrap, f"{app_id}-counts-changelog")
    expected = latest(changelog, upto=manifest.offsets)
    frame = export.read_export(spark, tmp_path / "live")
    got = {row["key"]: row["value"] for row in frame.collect()}
    assert got == expected
    assert frame.count() == manifest.rows == len(expected)
    assert 0 < sum(got.values()) < sent
    assert sorted(manifest.offsets) == [0, 1, 2, 3]
    assert manifest.source == "worker"
    assert frame.schema["key"].dataType == StringType()
    assert frame.schema["value"].dataType == LongType()


def cli_export(app_id: str, topic: str, broker: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "export", "-A", "tests.integration.export_apps:app",
         "--broker", broker, "--loglevel", "WARNING", *args],
        cwd=ROOT, env={**os.environ, "ITEST_APP": app_id, "ITEST_TOPIC": topic},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    if "--spark" in args:  # Spark's and py4j's chatter is kept out of the command's output
        for noise in ("Setting default log level", " WARN ", "INFO py4j", "NativeCodeLoader"):
            assert noise not in result.stderr, result.stderr
    return result.stdout


def same_rows(left, right) -> bool:
    return left.count() == right.count() and left.exceptAll(right).count() == 0 and \
        right.exceptAll(left).count() == 0


async def test_offline_and_changelog_exports_equal_the_live_one_in_spark(kafka, tmp_path, spark):
    app_id, topic = unique("export-three"), unique("hits")
    await create_topics(kafka.bootstrap, [topic])
    hits = [hit(i, 25) for i in range(3000)]  # 85 minutes of event time, in order
    await produce(kafka.bootstrap, topic, [(h["word"], h) for h in hits])
    app = make_app(app_id, topic)
    counts = app.tables["counts"]
    data_dir = tmp_path / "data"
    async with testing.running(app, broker=kafka.url, store="rocksdb://", data_dir=data_dir) as worker:
        await testing.eventually(lambda: sum(v for _, v in counts.items()) == len(hits), 60)
        await worker.checkpoint()
        for name in ("counts", "per-minute"):
            await export.export_table(app.tables[name], tmp_path / "live" / name)

    for name in ("counts", "per-minute"):
        out = cli_export(app_id, topic, kafka.url, name, "--to", str(tmp_path / "offline" / name),
                         "--data-dir", str(data_dir))
        assert f"from store to {tmp_path / 'offline' / name}" in out
    target = tmp_path / "changelog" / "per-minute"
    out = cli_export(app_id, topic, kafka.url, "per-minute", "--to", str(target), "--from-changelog",
                     "--spark")
    assert "window_start: timestamp" in out
    windows = Counter((h["word"], int(h["at"]) // 60 * 60) for h in hits)
    assert f"spark rows: {len(windows)}" in out
    cli_export(app_id, topic, kafka.url, "counts", "--to", str(tmp_path / "changelog" / "counts"),
               "--from-changelog")

    for name in ("counts", "per-minute"):
        live = export.read_export(spark, tmp_path / "live" / name)
        for source in ("offline", "changelog"):
            assert same_rows(live, export.read_export(spark, tmp_path / source / name)), (name, source)

    frame = export.read_export(spark, tmp_path / "live" / "per-minute")
    assert frame.schema["window_start"].dataType == TimestampType()
    assert frame.schema["window_end"].dataType == TimestampType()
    rows = frame.select("key", F.col("window_start").cast("long").alias("start"),
                        F.col("window_end").cast("long").alias("end"), "value").collect()
    assert {(r["key"], r["start"]): r["value"] for r in rows} == dict(windows)
    assert all(r["end"] - r["start"] == 60 for r in rows)
    busiest = frame.groupBy("window_start").agg(F.sum("value").alias("hits")).orderBy(F.desc("hits")).first()
    assert busiest["hits"] == max(Counter(int(h["at"]) // 60 for h in hits).values())
