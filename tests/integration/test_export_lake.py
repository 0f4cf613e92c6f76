"""Delta Lake exports on a real broker, read back by Spark (Delta's own Spark connector) and by delta-rs: a
running worker exports every table of its app again and again while events flow (the first export full, then
one MERGE of what changed each time, deleted keys and expired windows included); two workers export on a
schedule, one version a round holding both workers' partitions, while one is SIGKILLed. Every version, read
by time travel, equals the table's changelog up to the offsets that version records; an export after the
changelog lost records since the last one is full, and exact."""

from __future__ import annotations

import asyncio
import os
import random
import re
import sys
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra: pip install 'engine-streams[spark]'")

from aiokafka import AIOKafkaProducer
from deltalake import DeltaTable
from pyspark.sql import functions as F  # Spark's own convention

from engine import export, testing
from engine.codecs import dumps
from engine.export.delta import DeltaTarget
from engine.export.iceberg import IcebergTarget
from engine.export.lake import lake_position
from engine.tables.keys import META_PREFIX, split_window_key, window_bounds
from tests.integration.helpers import (
    ROOT,
    SHORT_SESSION,
    WorkerProcess,
    committed_to_end,
    create_topics,
    placed_over,
    read_all,
    unique,
    until_done,
    web_address,
)
from tests.integration.lake_apps import Hit, make_app

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

pytestmark = pytest.mark.kafka

WORDS = 60


class Writer:
    """Hits produced until stopped, about 5,000 a second; one in 20 drops its word's count."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.sent = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rng = random.Random(5)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        await producer.start()
        try:
            while not self._stop.is_set():
                for _ in range(100):
                    hit = Hit(f"w{self._rng.randrange(WORDS)}", 1_000_000 + self.sent * 1.7,
                              self._rng.random() < 0.05)
                    await producer.send(self.topic, dumps(hit), key=hit.word.encode())
                    self.sent += 1
                await producer.flush()
                await asyncio.sleep(0.02)
        finally:
            await producer.stop()


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


def spark_state(spark: Any, path: Path | str, version: int, windowed: bool, kind: str = "delta"
                ) -> dict[Any, int]:
    """A version of a lake table read by Spark (an Iceberg table by its current metadata file)."""
    frame = spark.read.format(kind).option("versionAsOf", version).load(str(path))
    if not windowed:
        return {row["key"]: row["value"] for row in frame.collect()}
    rows = frame.select("key", F.col("window_start").cast("long").alias("start"), "value").collect()
    return {(row["key"], row["start"]): row["value"] for row in rows}


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
async def test_lake_versions_exported_while_writing_equal_the_changelog_at_their_offsets(
        kafka, tmp_path, spark, kind) -> None:
    app_id, topic = unique("lake"), unique("hits")
    await create_topics(kafka.bootstrap, [topic])
    app = make_app(app_id, topic)
    counts = app.tables["counts"]
    writer = Writer(kafka.bootstrap, topic)
    lake = tmp_path / "lake"
    target = f"delta:{lake}" if kind == "delta" else "iceberg:lake"
    versions: list[dict[str, export.ExportResult]] = []
    async with testing.running(app, broker=kafka.url, store="rocksdb://", data_dir=tmp_path / "data",
                               commit_interval=0.2) as worker:
        await testing.eventually(lambda: len(counts.active) == 4, 60)
        writer.start()
        try:
            for round_ in range(4):
                await testing.eventually(lambda n=round_: writer.sent > 1500 * (n + 1), 60)
                versions.append(await export.export_app(app, target))
        finally:
            await writer.stop()
        settings = worker.settings
    assert [v["counts"].commit.mode for v in versions] == ["full"] + ["incremental"] * 3
    assert sum(v["counts"].deleted for v in versions[1:]) > 0  # dropped words
    assert sum(v["per-minute"].deleted for v in versions[1:]) > 0  # expired windows
    for name, windowed in (("counts", False), ("per-minute", True)):
        changelog = await read_all(kafka.bootstrap, f"{app_id}-{name}-changelog")
        if kind == "delta":
            source: Path | str = lake / name
        else:
            iceberg = IcebergTarget(f"lake.{name}", settings)
            source = iceberg.catalog.load_table(iceberg.name).metadata_location
        for done in versions:
            result = done[name]
            assert isinstance(result, export.LakeExport)
            expected = changelog_state(changelog, result.offsets, windowed)
            assert len(expected) > 20
            got = spark_state(spark, source, result.version, windowed, kind)
            assert got == expected, (name, result.version)
            positions = result.commit.partitions
            assert sorted(positions) == [0, 1, 2, 3]
            assert all(set(where.inputs) == {topic} for where in positions.values())
    counts_target = f"delta:{lake / 'counts'}" if kind == "delta" else "iceberg:lake.counts"
    status = export.lake_status(counts_target, settings)
    version = versions[-1]["counts"].version
    assert status[0].startswith(f"{counts_target}: version {version}, incremental export from worker")


def partition_rows(path: Path | Any, version: int, windowed: bool) -> dict[int, dict[Any, int]]:
    """A version's rows per table partition, read with delta-rs (a path) or pyiceberg (an Iceberg table)."""
    found: dict[int, dict[Any, int]] = {}
    if isinstance(path, IcebergTarget):
        rows = path.catalog.load_table(path.name).scan(snapshot_id=version).to_arrow().to_pylist()
    else:
        rows = DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist()
    for row in rows:
        key = (row["key"], int(row["window_start"].timestamp())) if windowed else row["key"]
        found.setdefault(row["partition"], {})[key] = row["value"]
    return found


def offsets_of(commit: Any) -> dict[int, int | None]:
    """Each partition's changelog offset in a version (a round's records every partition)."""
    return {n: where.changelog_offset for n, where in commit.partitions.items()}


class SharedLake:
    """The lake both workers of a test export into, configured for them by environment as a user would
    (`env`; the test's process gets the same): a Delta directory, or an Iceberg namespace in a SQL catalog
    both share."""

    def __init__(self, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
        self.kind, self.settings = kind, settings
        self.env: dict[str, str] = {}
        self.delta: str = str(tmp_path / "lake")
        if kind.startswith("iceberg"):
            from pyiceberg import catalog
            from pyiceberg.utils.config import Config

            (tmp_path / "warehouse").mkdir()
            self.env = {"PYICEBERG_CATALOG__SHARED__URI": f"sqlite:///{tmp_path / 'catalog.db'}",
                        "PYICEBERG_CATALOG__SHARED__WAREHOUSE": (tmp_path / "warehouse").as_uri()}
        for name, value in self.env.items():
            monkeypatch.setenv(name, value)
        if kind.startswith("iceberg"):
            monkeypatch.setattr(catalog, "_ENV_CONFIG", Config())  # (pyiceberg reads it once, at import)
        self.target = f"delta:{self.delta}" if kind.startswith("delta") else "iceberg:shared.lake"

    def table(self, name: str) -> Any:
        """A table's Delta location, or its IcebergTarget."""
        if self.kind.startswith("delta"):
            return f"{self.delta}/{name}"
        return IcebergTarget(f"shared.lake.{name}", self.settings)

    def history(self, name: str) -> list[tuple[int, Any]]:
        found = self.table(name)
        return DeltaTarget(found).history() if self.kind.startswith("delta") else found.history()


async def test_two_workers_exporting_on_a_schedule_one_sigkilled_leave_every_version_consistent(
        kafka, tmp_path, spark, monkeypatch) -> None:
    """Both workers export every second (`app.export("all", ..., every=1)`): each round, each stages the
    partitions it owns and the owner of partition 0 commits them as one version; one worker is SIGKILLed
    while events and exports go on, its partitions move to the other. Every version of both tables records
    all four partitions at one round and, read by time travel, holds for each partition exactly the
    changelog up to the offset it records (none half-written); once the events stop the lake catches up
    with the changelogs' ends. Into Iceberg, in a SQL catalog both workers share, configured by environment
    (the live exports below go to Delta: the rounds are the same above either format, and both formats'
    commits by two workers are tests/unit/engine/export/test_export_delta.py's, on a directory and on an S3
    endpoint)."""
    app_id, topic = unique("lake-workers"), unique("hits")
    await create_topics(kafka.bootstrap, [topic])
    lake = SharedLake("iceberg", tmp_path, monkeypatch, make_app(app_id, topic).settings())
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_LAKE": lake.target, "ITEST_EVERY": "1",
           **SHORT_SESSION, **lake.env}
    history = lake.history
    workers = [WorkerProcess("tests.integration.lake_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")
               for name in ("first", "second")]
    writer = Writer(kafka.bootstrap, topic)
    try:
        await placed_over(workers, 4)
        writer.start()

        async def versions_beyond(count: int) -> None:
            async def probe() -> tuple[bool, Any]:
                found = len(await asyncio.to_thread(history, "counts"))
                return found > count, found
            await until_done(probe, f"more than {count} lake versions", workers=workers)

        await versions_beyond(6)
        workers[1].kill()  # while events flow and exports run every second
        killed_at = len(history("counts"))
        await placed_over(workers[:1], 4)
        await versions_beyond(killed_at + 6)
        await writer.stop()
        await committed_to_end(kafka.bootstrap, app_id, topic, 4, workers=workers[:1])  # changelogs final
        await lake_caught_up(kafka.bootstrap, app_id, lake, workers[:1])
    finally:
        await writer.stop()
        code = workers[0].terminate()
    assert code == 0, workers[0].output()[-3000:]
    await check_every_version(kafka.bootstrap, app_id, lake, spark, more_than=12)


async def test_live_exports_asked_from_the_cli_while_a_worker_is_sigkilled_leave_every_version_consistent(
        kafka, tmp_path, spark, monkeypatch) -> None:
    """`engine export --live --all` asked, while events flow, of one of two `engine worker`s (no schedule):
    each answer is one version holding both workers' partitions at one round. Then one worker is SIGKILLed:
    asked of the survivor while the partitions move, a round may miss some (the CLI exits 1 naming them and
    commits nothing), until one commits all four again. Every version equals the changelog at the offsets it
    records; asked once more after the events stop, the lake is at the changelogs' ends. Into Delta (the
    scheduled rounds above go to Iceberg)."""
    app_id, topic = unique("lake-live"), unique("hits")
    await create_topics(kafka.bootstrap, [topic])
    lake = SharedLake("delta", tmp_path, monkeypatch, make_app(app_id, topic).settings())
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_WEB_PORT": "0", **SHORT_SESSION, **lake.env}
    workers = [WorkerProcess("tests.integration.lake_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")
               for name in ("first", "second")]
    writer = Writer(kafka.bootstrap, topic)
    answers: list[tuple[int, str]] = []

    async def export_live(worker: WorkerProcess) -> int:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cli.main", "export", "-A", "tests.integration.lake_apps:app", "--all",
            "--to", lake.target, "--live", "--url", f"http://{web_address(worker)}", "--wait", "10",
            "--broker", kafka.url, "--loglevel", "WARNING", cwd=ROOT, env={**os.environ, **env},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await process.communicate()
        answers.append((process.returncode or 0, out.decode()))
        return process.returncode or 0

    try:
        await placed_over(workers, 4)
        writer.start()
        for n in range(4):  # asked of either worker: the other takes part all the same
            await testing.eventually(lambda m=n: writer.sent > 1000 * (m + 1), 60)
            assert await export_live(workers[n % 2]) == 0, answers[-1][1]
            assert answers[-1][1].count("4 of 4 partitions") == 2, answers[-1][1]  # both tables
        workers[1].kill()  # while events flow

        async def committed_again() -> tuple[bool, Any]:  # a round while partitions move may miss some
            return await export_live(workers[0]) == 0, len(answers)
        await until_done(committed_again, "a live export committing every partition again",
                         workers=workers[:1])
        await placed_over(workers[:1], 4)
        assert await export_live(workers[0]) == 0, answers[-1][1]
        await writer.stop()
        await committed_to_end(kafka.bootstrap, app_id, topic, 4, workers=workers[:1])  # changelogs final
        await lake_caught_up(kafka.bootstrap, app_id, lake, workers[:1], lambda: export_live(workers[0]))
    finally:
        await writer.stop()
        code = workers[0].terminate()
    assert code == 0, workers[0].output()[-3000:]
    moving = (r"round \d+ committed nothing of \S+: partitions \[[\d, ]+\] were not staged within 10s",
              r"did not answer", r"round \d+ exported nothing: no worker holds partitions of any table now",
              # (partition 0's new owner not set up yet when the round was asked: it stages nothing)
              r"round \d+ committed nothing of \S+: the worker that holds partition 0 did not take part")
    for returned, said in answers:  # each failed answer says why, and only partitions moving are why
        assert returned == 0 or any(re.search(why, said) for why in moving), said
    await check_every_version(kafka.bootstrap, app_id, lake, spark, more_than=5)


async def lake_caught_up(bootstrap: str, app_id: str, lake: SharedLake, workers: list[WorkerProcess],
                         export: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Wait until both lake tables are at their changelogs' ends (`export`: how each try asks for a version;
    without it, scheduled rounds make them)."""
    for name in ("counts", "per-minute"):
        changelog = await read_all(bootstrap, f"{app_id}-{name}-changelog")
        ends = {p: max(r.offset for r in changelog if r.partition == p) for p in range(4)}

        async def caught_up(table_name: str = name, last: dict[int, int] = ends) -> tuple[bool, Any]:
            if export is not None:
                await export()
            found = await asyncio.to_thread(lake.history, table_name)
            now = {n: w.changelog_offset for n, w in lake_position(c for _, c in found).items()}
            return now == last, now
        await until_done(caught_up, f"the {name} lake table catching up", workers=workers)


async def check_every_version(bootstrap: str, app_id: str, lake: SharedLake, spark: Any, more_than: int
                              ) -> None:
    """Every version of both tables of the lake (more than `more_than` each) records all four partitions at
    one round, one version a round, and, read by time travel, holds for each partition exactly the changelog
    up to the offset it records (none half-written); the newest reads the same in Spark (not on S3)."""
    kind, table = lake.kind, lake.table
    for name, windowed in (("counts", False), ("per-minute", True)):
        changelog = await read_all(bootstrap, f"{app_id}-{name}-changelog")
        versions = lake.history(name)
        assert len(versions) > more_than, (name, len(versions))
        rounds = [commit.round for _, commit in versions]
        assert None not in rounds
        assert rounds == sorted(set(rounds), reverse=True)  # one version a round
        for version, commit in versions:
            assert sorted(commit.partitions) == [0, 1, 2, 3], (name, version)  # every partition, one round
            position = offsets_of(commit)
            rows = partition_rows(table(name), version, windowed)
            for number, offset in position.items():
                expected = changelog_state([r for r in changelog if r.partition == number], {number: offset},
                                           windowed)
                assert rows.get(number, {}) == expected, (name, version, number)
            assert set(rows) <= set(position)  # no rows of a partition no version recorded
        newest = versions[0][0]  # in Spark too: every partition, at the changelog's end
        source = table(name) if kind == "delta" else table(name).catalog.load_table(
            table(name).name).metadata_location
        assert spark_state(spark, source, newest, windowed, kind) == changelog_state(
            changelog, offsets_of(versions[0][1]), windowed)


async def test_an_export_after_the_changelog_lost_records_since_the_last_one_is_full_and_exact(
        kafka, tmp_path) -> None:
    """The records between two exports deleted from the changelog (retention; here DeleteRecords on a topic
    made compact,delete for the test): the changes since the last export can no longer be read, so the
    next export is a full one, and its rows are the table's, exactly."""
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    app_id, topic = unique("lake-gone"), unique("hits")
    await create_topics(kafka.bootstrap, [topic])
    app = make_app(app_id, topic)
    counts = app.tables["counts"]
    lake = tmp_path / "lake"
    changelog = f"{app_id}-counts-changelog"
    writer = Writer(kafka.bootstrap, topic)
    async with testing.running(app, broker=kafka.url, store="rocksdb://", data_dir=tmp_path / "data",
                               commit_interval=0.2):
        await testing.eventually(lambda: len(counts.active) == 4, 60)
        writer.start()
        try:
            await testing.eventually(lambda: writer.sent > 1500, 60)
            first = await export.export_table(counts, f"delta:{lake}")
            await testing.eventually(lambda: writer.sent > 3000, 60)
        finally:
            await writer.stop()
        await committed_to_end(kafka.bootstrap, app_id, topic, 4)  # every event processed
        expected = dict(counts.items())
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        await admin.start()
        try:
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, changelog,
                                                      configs={"cleanup.policy": "compact,delete"})])
            ends = {n: max(r.offset for r in await read_all(kafka.bootstrap, changelog) if r.partition == n)
                    for n in range(4)}
            await admin.delete_records({TopicPartition(changelog, n): RecordsToDelete(end)
                                        for n, end in ends.items()})
        finally:
            await admin.close()
        second = await export.export_table(counts, f"delta:{lake}")
    assert isinstance(first, export.LakeExport)
    assert isinstance(second, export.LakeExport)
    assert (first.commit.mode, second.commit.mode) == ("full", "full")
    assert len(expected) > 20
    assert expected == {k: v for rows in partition_rows(lake, second.version, False).values()
                        for k, v in rows.items()}
