"""Exports to Delta Lake and Iceberg tables, on the in-memory broker with RocksDB stores: a full export, then
incremental ones (only what changed: upserts, deleted keys, expired windows) that always equal a full export
of the same checkpoint and the ground truth computed from the events; the stream position in every version's
commit metadata; every version read back by polars as of its time; a plan that never moves a partition back.
(Spark reading these tables, on a real broker, is in tests/integration/test_export_lake.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("deltalake", reason="the spark extra: pip install 'engine-streams[spark]'")

import polars as pl
import pyarrow.parquet as pq
from deltalake import DeltaTable

import engine
from engine import export, testing
from engine.export import lake, rewrite
from engine.export.delta import DeltaTarget
from engine.export.iceberg import IcebergTarget
from engine.export.optional import MissingDependency
from engine.export.sources import checkpointed
from engine.targets import parse_target
from tests.lake import S3_BUCKET, s3_catalog, s3_environment

if TYPE_CHECKING:
    from pathlib import Path

SIZE, EXPIRES = 10, 30  # the windowed table's, in seconds


def build_app() -> tuple[engine.App, engine.Table]:
    app = engine.App(f"delta-{id(object())}")
    ops = app.topic("ops", key_type=str, value_type=dict, timestamp=lambda op: op["at"])
    totals = app.Table("totals", default=int, key_type=str)
    per_window = app.Table("per-window", default=int, key_type=str).tumbling(SIZE, expires=EXPIRES)

    @app.agent(ops)
    async def apply(stream):
        async for event in stream.events():
            op = event.value
            if op["op"] == "del":
                totals.pop(event.key, None)
            else:
                totals[event.key] += op["n"]
                per_window[event.key] += op["n"]

    return app, totals


class Truth:
    """What the tables must hold, from the events alone."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.windows: dict[tuple[str, int], int] = {}  # (key, window start s): sum

    def apply(self, key: str, op: dict[str, Any]) -> None:
        if op["op"] == "del":
            self.totals.pop(key, None)
            return
        self.totals[key] = self.totals.get(key, 0) + op["n"]
        start = int(op["at"] // SIZE * SIZE)
        self.windows[(key, start)] = self.windows.get((key, start), 0) + op["n"]

    def live_windows(self, stream_time: dict[str, float]) -> dict[tuple[str, datetime], int]:
        """Windows not yet expired: a window is deleted once its partition's stream time (`stream_time` of
        its key) reaches its end plus `expires`."""
        return {(key, datetime.fromtimestamp(start, UTC)): n for (key, start), n in self.windows.items()
                if stream_time[key] < start + SIZE + EXPIRES}


def stream_times(worker: Any, topic: str) -> dict[str, float]:
    """Each key's partition's stream time: the largest event time (`at`) of the records in that partition."""
    times: dict[str, float] = {}
    for log in testing.broker_for(worker.settings.broker).topics[topic]:
        latest = max((json.loads(record.value)["at"] for record in log), default=0.0)
        times.update((record.key.decode(), latest) for record in log)
    return times


def ops_round(rng: random.Random, at: float, count: int = 120) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for _ in range(count):
        at += rng.random() * 0.5
        key = f"k{rng.randrange(30)}"
        if rng.random() < 0.1:
            out.append((key, {"op": "del", "at": at}))
        else:
            out.append((key, {"op": "add", "n": rng.randrange(1, 9), "at": at}))
    return out


class Lake:
    """Where a test's exports go, in one format, and how their tables read back."""

    def __init__(self, kind: str, root: Path, settings: engine.Settings) -> None:
        self.kind, self.root, self.settings = kind, root, settings

    def target(self, name: str) -> str:
        return f"delta:{self.root / name}" if self.kind == "delta" else f"iceberg:{name.replace('-', '_')}"

    def rows(self, name: str, table: str) -> list[dict[str, Any]]:
        if self.kind == "delta":
            found = DeltaTable(str(self.root / name / table)).to_pyarrow_table().to_pylist()
        else:
            found = IcebergTarget(f"{name.replace('-', '_')}.{table}", self.settings).catalog.load_table(
                f"{name.replace('-', '_')}.{table}").scan().to_arrow().to_pylist()
        return sorted(found, key=lambda r: tuple(str(v) for v in r.values()))

    def history(self, name: str, table: str) -> list[tuple[int, lake.LakeCommit]]:
        if self.kind == "delta":
            return DeltaTarget(str(self.root / name / table)).history()
        return IcebergTarget(f"{name.replace('-', '_')}.{table}", self.settings).history()

    def polars_rows(self, name: str, table: str, version: int) -> list[dict[str, Any]]:
        """The rows of one version (Delta) or snapshot (Iceberg) as polars reads them: a reader that is
        neither engine's nor the writers' libraries' own, travelling back in time."""
        if self.kind == "delta":
            frame = pl.read_delta(str(self.root / name / table), version=version)
        else:
            iceberg_name = f"{name.replace('-', '_')}.{table}"
            source = IcebergTarget(iceberg_name, self.settings).catalog.load_table(iceberg_name)
            frame = pl.scan_iceberg(source, snapshot_id=version).collect()
        return sorted(frame.to_dicts(), key=lambda r: tuple(str(v) for v in r.values()))


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
async def test_incremental_exports_equal_full_ones_and_the_events(tmp_path: Path, kind: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewrite, "FILE_BYTES", 300)  # exports write (and rewrite) several files
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # polars' own planner is a separate package
    app, totals = build_app()
    truth = Truth()
    rng = random.Random(7)
    at = 1_000.0
    ops = app.topics["ops"]
    rounds: list[dict[str, list[dict[str, Any]]]] = []  # each round's full export, table by table
    async with testing.running(app, store="rocksdb://", data_dir=tmp_path / "data") as worker:
        lakes = Lake(kind, tmp_path, worker.settings)
        for round_ in range(5):
            batch = ops_round(rng, at)
            at = batch[-1][1]["at"] + (40 if round_ == 2 else 1)  # a jump: every earlier window expires
            for key, op in batch:
                await ops.send(key=key, value=op)
                truth.apply(key, op)
            await testing.eventually(lambda: dict(totals.items()) == truth.totals, 10)
            await worker.checkpoint()
            fresh = f"full-{round_}"  # a full export of the same checkpoint, for comparison
            fulls = await export.export_app(app, lakes.target(fresh))
            done = await export.export_app(app, lakes.target("lake"))
            for name, result in done.items():
                assert isinstance(result, export.LakeExport)
                assert result.commit.mode == ("full" if round_ == 0 else "incremental"), (round_, name)
                assert lakes.rows("lake", name) == lakes.rows(fresh, name)
                assert result.offsets == fulls[name].offsets
            rounds.append({name: lakes.rows(fresh, name) for name in done})
            assert {r["key"]: r["value"] for r in lakes.rows("lake", "totals")} == truth.totals
            windows = {(r["key"], r["window_start"]): r["value"] for r in lakes.rows("lake", "per-window")}
            assert windows == truth.live_windows(stream_times(worker, ops.name))
            if round_ == 2:
                assert done["per-window"].deleted > 0  # expired windows were deleted
            if round_ > 0:
                assert done["totals"].deleted > 0  # and deleted keys
        history = lakes.history("lake", "totals")
        assert len(history) == 5
        if kind == "iceberg":  # rows spread over files, some rewritten without their changed keys
            lake_totals = IcebergTarget("lake.totals", worker.settings)
            assert lake_totals.catalog.load_table("lake.totals").inspect.files().num_rows > 1
        if kind == "delta":
            assert [version for version, _ in history] == [4, 3, 2, 1, 0]
        for name in rounds[0]:  # every version, read back by polars as of its round
            versions = [version for version, _ in reversed(lakes.history("lake", name))]
            assert [lakes.polars_rows("lake", name, v) for v in versions] == [r[name] for r in rounds]
        newest = history[0][1]
        assert (newest.app, newest.table, newest.source) == (app.id, "totals", "worker")
        assert sorted(newest.partitions) == [0, 1, 2, 3]
        stores = {n: part.store.changelog_offset() for n, part in totals.active.items()}
        assert {n: p.changelog_offset for n, p in newest.partitions.items()} == stores
        logs = testing.broker_for(worker.settings.broker).topics[ops.name]
        sent = {number: len(log) for number, log in enumerate(logs)}  # every event was processed
        assert {n: p.inputs for n, p in newest.partitions.items()} == {
            n: {ops.name: offset} for n, offset in sent.items()}


class FixedView:
    def __init__(self, offset: int | None) -> None:
        self.offset = offset

    def changelog_offset(self) -> int | None:
        return self.offset


def plan(offsets: dict[int, int | None], *commits: lake.LakeCommit) -> lake.ExportPlan:
    app = engine.App("plans")
    table = app.Table("t", default=int)
    snapshot = export.TableSnapshot(table, "worker", 4, {n: FixedView(o) for n, o in offsets.items()})
    return lake.plan_export(snapshot, list(commits))


def written(mode: str, offsets: dict[int, int | None], table: str = "t") -> lake.LakeCommit:
    return lake.LakeCommit("plans", table, f"plans-{table}-changelog", "worker", mode, 4,
                           {n: lake.PartitionPosition(o) for n, o in offsets.items()})


def test_an_export_plan_never_moves_a_partition_back_and_skips_what_did_not_change() -> None:
    everything = {0: 10, 1: 20, 2: None, 3: 5}
    assert plan(everything) == lake.ExportPlan([0, 1, 2, 3], None)  # a new table: full
    assert plan(everything, written("full", {0: 3}, table="other")) == lake.ExportPlan([0, 1, 2, 3], None)
    older = written("full", {0: 4, 1: 20, 2: None, 3: 5})
    assert plan(everything, older) == lake.ExportPlan([0], {0: 4})  # only partition 0 moved on
    newer = written("incremental", {0: 12})  # a newer owner of partition 0 exported it since
    assert plan(everything, newer, older) == lake.ExportPlan([], {}, ahead={0: 12})
    assert plan({0: 10, 1: 21}, written("full", {1: 20})) == lake.ExportPlan([0, 1], None)  # 0 never held
    # The newest complete export hides the versions before it.
    assert plan(everything, written("full", everything), written("full", {0: 99})).partitions == []


def test_app_export_takes_a_lake_table_and_a_positive_interval(tmp_path: Path) -> None:
    app, totals = build_app()
    with pytest.raises(engine.ConfigError, match=r"app\.export needs a lake table"):
        app.export("all", str(tmp_path / "parquet"), every=10)
    with pytest.raises(engine.ConfigError, match="export interval must be positive"):
        app.export(totals, f"delta:{tmp_path}", every=0)
    with pytest.raises(engine.ConfigError, match="takes a table or 'all'"):
        app.export("everything", f"delta:{tmp_path}", every=10)
    app.export(totals, f"delta:{tmp_path / 'totals'}", every=10)
    with pytest.raises(engine.ConfigError, match="already exports totals"):
        app.export(totals, f"delta:{tmp_path / 'totals'}", every=10)
    assert app.exports[f"export:totals:delta:{tmp_path / 'totals'}"].every.total_seconds() == 10


@pytest.mark.parametrize(("library", "target", "feature"), [("deltalake", "delta:{}", "Delta Lake export"),
                                                           ("pyiceberg", "iceberg:ns.t", "Iceberg export")])
def test_without_its_library_a_lake_export_says_how_to_install_it(tmp_path: Path, monkeypatch: Any,
                                                                   library: str, target: str,
                                                                   feature: str) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # what an import finds when it is not installed
    app, _ = build_app()
    settings = app.settings({"data_dir": tmp_path})
    with pytest.raises(MissingDependency,
                       match=rf"{feature} needs {library}.*pip install 'engine-streams\[spark\]'"):
        export.lake_table(parse_target(target.format(tmp_path / "t")), settings).history()


def test_interleaved_scans_yield_every_batch_once_and_raise_a_scans_error() -> None:
    import pyarrow as pa

    from engine.export.lake_writer import interleaved

    def scan(number: int, count: int, fail: bool = False):
        for i in range(count):
            if fail and i == 3:
                raise ValueError(f"scan {number} broke")
            yield pa.record_batch([pa.array([number * 1000 + i])], names=["n"])

    got = [batch.column(0)[0].as_py() for batch in interleaved([scan(n, 50) for n in range(5)], 2)]
    assert sorted(got) == [n * 1000 + i for n in range(5) for i in range(50)]
    with pytest.raises(ValueError, match="scan 2 broke"):
        list(interleaved([scan(0, 50), scan(1, 50), scan(2, 50, fail=True), scan(3, 50)], 2))


async def test_an_export_after_only_stream_time_moved_writes_no_version(tmp_path: Path) -> None:
    """Deletes write the plain table only; the windowed table's changelog gets only engine's own record of
    its stream time: its next export has nothing to change, so it commits nothing (and says so)."""
    app, totals = build_app()
    ops = app.topics["ops"]
    async with testing.running(app, store="rocksdb://", data_dir=tmp_path / "data") as worker:
        for n in range(8):
            await ops.send(key=f"k{n}", value={"op": "add", "n": 1, "at": 1_000.0 + n})
        await testing.eventually(lambda: len(totals) == 8)
        first = await export.export_app(app, f"delta:{tmp_path / 'lake'}")
        for n in range(8):
            await ops.send(key=f"k{n}", value={"op": "del", "at": 1_002.0 + n})
        await testing.eventually(lambda: len(totals) == 0)
        await worker.checkpoint()
        windows = app.tables["per-window"]
        moved = {n: part.store.changelog_offset() for n, part in windows.active.items()}
        assert any(moved[n] != first["per-window"].offsets[n] for n in moved)  # its changelog moved on
        second = await export.export_app(app, f"delta:{tmp_path / 'lake'}")
    result = second["per-window"]
    assert isinstance(result, export.LakeExport)
    assert not result.written
    assert result.version == first["per-window"].version
    assert second["totals"].written
    assert DeltaTable(str(tmp_path / "lake" / "totals")).to_pyarrow_table().num_rows == 0


def changelog_totals(logs: list[Any], upto: dict[int, int | None]) -> dict[int, dict[str, int]]:
    """Each partition's totals from the changelog records up to its offset in `upto`."""
    state: dict[int, dict[str, int]] = {}
    for number, log in enumerate(logs):
        rows = state.setdefault(number, {})
        limit = upto.get(number)
        for offset, record in enumerate(log):
            if limit is None or offset > limit:
                break
            if record.value is None:
                rows.pop(record.key.decode(), None)
            else:
                rows[record.key.decode()] = int(record.value)
    return state


class SharedLake:
    """A lake table both workers of a test write: a Delta path, or an Iceberg table in a SQL catalog both
    see (configured as a user would, by environment; pyiceberg reads it once, at import), its warehouse in a
    local directory or (`iceberg-s3`) in a bucket of an S3 endpoint (`s3`: its URL); a Delta table in that
    bucket for `delta-s3`."""

    def __init__(self, kind: str, root: Path, monkeypatch: pytest.MonkeyPatch, s3: str | None = None
                 ) -> None:
        self.kind, self.root = kind, root
        self.delta = f"s3://{S3_BUCKET}/delta" if kind == "delta-s3" else str(root / "lake")
        if kind == "delta-s3":
            assert s3 is not None
            for name, value in s3_environment(s3).items():
                monkeypatch.setenv(name, value)
        if kind.startswith("iceberg"):
            from pyiceberg import catalog
            from pyiceberg.utils.config import Config

            root.mkdir(parents=True)
            monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__URI", f"sqlite:///{root / 'catalog.db'}")
            if s3 is None:
                (root / "warehouse").mkdir()
                monkeypatch.setenv("PYICEBERG_CATALOG__SHARED__WAREHOUSE", (root / "warehouse").as_uri())
            else:
                for name, value in s3_catalog("SHARED", s3).items():
                    monkeypatch.setenv(name, value)
            monkeypatch.setattr(catalog, "_ENV_CONFIG", Config())

    @property
    def target(self) -> str:
        return f"delta:{self.delta}" if self.kind.startswith("delta") else "iceberg:shared.lake"

    def table(self, name: str, settings: engine.Settings) -> DeltaTarget | IcebergTarget:
        if self.kind.startswith("delta"):
            return DeltaTarget(f"{self.delta}/{name}")
        return IcebergTarget(f"shared.lake.{name}", settings)

    def rows(self, name: str, settings: engine.Settings, version: int | None = None) -> list[dict[str, Any]]:
        lake = self.table(name, settings)
        if isinstance(lake, DeltaTarget):
            if not DeltaTable.is_deltatable(lake.location):
                return []
            return DeltaTable(lake.location, version=version).to_pyarrow_table().to_pylist()
        found = lake.catalog.load_table(lake.name) if lake.history() else None
        if found is None:
            return []
        scan = found.scan() if version is None else found.scan(snapshot_id=version)
        return scan.to_arrow().to_pylist()

    def staged_rounds(self, name: str, settings: engine.Settings) -> list[int]:
        """The rounds with a stage's manifest left beside the table."""
        from engine.export import rounds

        area = rounds.staging_area(self.table(name, settings), pa_schema())
        assert area is not None
        return [r for r in area.rounds() for n in range(4)
                if area.exists(area.path(r, f"partition-{n:05d}.json"))]


def pa_schema() -> Any:
    """(Any schema: the table exists, so it is not created with it.)"""
    import pyarrow as pa

    return pa.schema([pa.field("key", pa.string())])




def rounds_consistent(lake: SharedLake, settings: engine.Settings, logs: list[Any]) -> list[int | None]:
    """Check every version of the totals lake table: one a round, all four partitions each, every partition
    exactly its changelog (`logs`) up to the offset the version records; the rounds, newest first."""
    history = lake.table("totals", settings).history()
    rounds = [found.round for _, found in history]
    assert None not in rounds
    assert rounds == sorted(set(rounds), reverse=True), rounds  # one version a round
    for version, found in history:
        assert sorted(found.partitions) == [0, 1, 2, 3], version
        by_partition: dict[int, dict[str, int]] = {n: {} for n in range(4)}
        for row in lake.rows("totals", settings, version):
            by_partition[row["partition"]][row["key"]] = row["value"]
        offsets = {n: where.changelog_offset for n, where in found.partitions.items()}
        assert by_partition == changelog_totals(logs, offsets), version
    return rounds


# Batches in the two workers' test, each waited for as a version of its own: three give versions of several
# states; six took two minutes on the S3 endpoint, the longest of the unit tests.
ROUNDS_OF_TWO_WORKERS = 3


@pytest.mark.parametrize("kind", ["delta", "delta-s3", "iceberg", "iceberg-s3"])
async def test_scheduled_rounds_of_two_workers_commit_every_partition_as_one_version(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
        caplog: pytest.LogCaptureFixture) -> None:
    """`app.export` from two workers: each tick stages both workers' partitions, the worker with partition 0
    commits them together (`-s3`: the table on an object store, staged in its own location there, through
    the catalog's file IO for Iceberg, the environment's credentials for Delta). Every version records all
    four partitions at one round, and holds for each exactly its changelog up to the recorded offset; the
    last one equals the events' outcome."""
    caplog.set_level(logging.INFO, "engine.export")  # (why rounds committed nothing, should none commit)
    app, totals = build_app()
    s3 = request.getfixturevalue("s3_endpoint") if kind.endswith("-s3") else None
    lake = SharedLake(kind, tmp_path / "shared", monkeypatch, s3)
    app.export("all", lake.target, every=0.3)
    truth, rng, at = Truth(), random.Random(11), 1_000.0
    url = testing.memory_url()
    async with testing.running(app, broker=url, store="rocksdb://", data_dir=tmp_path / "a") as first, \
            testing.running(app, broker=url, store="rocksdb://", data_dir=tmp_path / "b") as second:
        await testing.eventually(lambda: bool(first.tasks.active) and bool(second.tasks.active), 10)
        settings = first.settings

        def versions() -> int:
            return len(lake.table("totals", settings).history())
        for _ in range(ROUNDS_OF_TWO_WORKERS):
            committed = versions()
            for key, op in (batch := ops_round(rng, at)):
                await app.topics["ops"].send(key=key, value=op)
                truth.apply(key, op)
            at = batch[-1][1]["at"] + 1
            # a version after each batch (however long a round takes here): versions of several states
            try:
                await testing.eventually(lambda before=committed: versions() > before, 60, interval=0.2)
            except AssertionError:
                rounds = [r.getMessage() for r in caplog.records if r.name.startswith("engine.export")]
                raise AssertionError("no version for 60 s after a batch; the last rounds said:\n"
                                     + "\n".join(rounds[-30:])) from None
        await testing.eventually(lambda: dict(totals.items()) == truth.totals, 10)

        def exported() -> dict[str, int]:
            return {row["key"]: row["value"] for row in lake.rows("totals", settings)}
        await testing.eventually(lambda: exported() == truth.totals, 30, interval=0.2)
        logs = testing.broker_for(url).topics[totals.changelog_topic.name]
    history = lake.table("totals", settings).history()
    assert len(history) >= 2
    rounds = rounds_consistent(lake, settings, logs)
    status = export.lake_status(str(parse_target(lake.target).child("totals")), settings)
    assert status[0].endswith(f"(round {rounds[0]}: every partition at one tick)")
    staged = lake.staged_rounds("totals", settings)
    assert all(r > rounds[0] for r in staged), (staged, rounds)  # a commit removes its stages and older ones


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
async def test_a_live_export_asked_of_one_worker_is_one_version_of_both_workers_partitions(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`engine export --live --all` asks one worker's web server for a round; it asks the other worker for
    the same round, each runs a checkpoint (so every event processed before the request is in it) and stages
    its partitions, and one version holds all four. Asked again after more events (updates, deletes), the
    next version is incremental; both equal the events' outcome and, per partition, the changelog at the
    offsets they record. Asked of the other worker, after nothing changed, nothing is written."""
    from cli.main import main

    app, totals = build_app()
    monkeypatch.setattr("cli.commands.export.load_app", lambda spec: app)
    lake = SharedLake(kind, tmp_path / "shared", monkeypatch)
    truth, rng, at = Truth(), random.Random(5), 1_000.0
    url = testing.memory_url()
    options = {"broker": url, "store": "rocksdb://", "web_enabled": True, "web_port": 0}
    async with testing.running(app, data_dir=tmp_path / "a", **options) as first, \
            testing.running(app, data_dir=tmp_path / "b", **options) as second:
        def placed(worker: Any) -> bool:
            current = worker.placement.current
            return current is not None and len(current.owners) == 4 and bool(worker.tasks.active)
        await testing.eventually(lambda: placed(first) and placed(second), 10)
        settings = first.settings

        async def export_live(worker: Any) -> tuple[int, str, str]:
            capsys.readouterr()
            code = await asyncio.to_thread(main, [
                "export", "-A", "tests:app", "--all", "--to", lake.target, "--live", "--url",
                f"http://{worker.placement.endpoint}", "--wait", "20"])
            out, err = capsys.readouterr()
            return code, out, err

        for mode, worker in (("full", first), ("incremental", second)):
            for key, op in (batch := ops_round(rng, at)):
                await app.topics["ops"].send(key=key, value=op)
                truth.apply(key, op)
            at = batch[-1][1]["at"] + 1
            await testing.eventually(lambda: dict(totals.items()) == truth.totals, 10)  # processed, not
            code, out, err = await export_live(worker)  # yet checkpointed: the export's checkpoint has them
            assert code == 0, err
            line = next(line for line in out.splitlines() if " of totals " in line)
            assert f"({mode}; 4 of 4 partitions;" in line, out
            by_worker = re.search(r"\(round \d+: partitions (.+)\)$", line)
            assert by_worker is not None, line
            staged = {endpoint: [int(n) for n in numbers.split(", ")] for numbers, endpoint in
                      (part.split(" from ") for part in by_worker[1].split("; "))}
            assert staged == {w.placement.endpoint: sorted(w.tasks.active) for w in (first, second)}, line
            assert {row["key"]: row["value"] for row in lake.rows("totals", settings)} == truth.totals
        code, out, err = await export_live(first)
        assert code == 0, err
        assert "nothing to export to" in out, out
        assert "it holds totals as it is" in out, out
        capsys.readouterr()
        code = await asyncio.to_thread(main, ["export", "-A", "tests:app", "nope", "--to", lake.target,
                                              "--live", "--url", f"http://{first.placement.endpoint}"])
        err = capsys.readouterr().err
        assert code == 1
        for worker in (first, second):  # each worker's part says what was wrong
            assert f"worker {worker.placement.endpoint}: app {app.id!r} has no table 'nope'" in err, err
        logs = testing.broker_for(url).topics[totals.changelog_topic.name]
    history = lake.table("totals", settings).history()
    assert [found.mode for _, found in history] == ["incremental", "full"]
    rounds_consistent(lake, settings, logs)
    assert all(where.inputs for _, found in history for where in found.partitions.values())  # from workers


async def test_an_iceberg_export_of_some_partitions_to_a_data_dirs_catalog_warns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The default Iceberg catalog lives in a worker's data dir: with two workers, each would write a table
    of its own partitions. The export says so, naming what to do."""
    app, totals = build_app()
    app.export(totals, "iceberg:lake.totals", every=0.2)
    url = testing.memory_url()
    async with testing.running(app, broker=url, store="rocksdb://", data_dir=tmp_path / "a") as first, \
            testing.running(app, broker=url, store="rocksdb://", data_dir=tmp_path / "b") as second:
        await testing.eventually(lambda: bool(first.tasks.active) and bool(second.tasks.active), 10)
        await app.topics["ops"].send(key="k", value={"op": "add", "n": 1, "at": 1_000.0})
        await testing.eventually(lambda: "configure a catalog they share" in caplog.text, 20)


async def test_a_round_commits_nothing_when_its_stages_are_stale_or_a_partition_moved_on(tmp_path: Path
                                                                                           ) -> None:
    """A round's commit checks what it was given: stages made before a later round's commit no longer
    continue from the lake's position (committing them would move partitions back); a partition missing
    from a round but staged for a later one will never come (its worker skipped the round): give up at once,
    not after the wait."""
    from engine.export import rounds
    app, totals = build_app()
    target = parse_target(f"delta:{tmp_path / 'lake'}")
    ops = app.topics["ops"]

    async def send(count: int, at: float) -> None:
        for n in range(count):
            await ops.send(key=f"k{n}", value={"op": "add", "n": 1, "at": at})
        await testing.eventually(lambda: sum(totals.values()) == expected[0] + count)
        expected[0] += count

    expected = [0]
    async with testing.running(app, store="rocksdb://", data_dir=tmp_path / "data"):
        await send(12, 1_000.0)
        assert (await rounds.export_round([totals], {"totals": target}, 1, 0.1))["totals"].committed
        await send(12, 1_001.0)
        inputs, (snapshot,) = await checkpointed([totals])
        with snapshot:
            staged = await rounds.stage(snapshot, target, totals.worker_settings, inputs, 5)  # early
        assert staged is not None
        columns, root = staged
        await send(12, 1_002.0)
        assert (await rounds.export_round([totals], {"totals": target}, 4, 0.1))["totals"].committed
        versions = len(DeltaTarget(target.location).history())
        skipped = await rounds.commit(totals, columns, target, root, 5, 0.1)  # stale: from round 1's
        assert isinstance(skipped, str), skipped
        assert re.fullmatch(r"partition 0 was staged from changelog offset \d+, the lake is at \d+", skipped)
        assert len(DeltaTarget(target.location).history()) == versions

        inputs, (snapshot,) = await checkpointed([totals])
        with snapshot:
            await rounds.stage(snapshot, target, totals.worker_settings, inputs, 8)
        (tmp_path / "lake" / rounds.STAGING / "8" / "partition-00001.json").rename(
            tmp_path / "lake" / rounds.STAGING / "partition-00001.json")  # partition 1 "skipped" round 8
        (tmp_path / "lake" / rounds.STAGING / "9").mkdir()
        (tmp_path / "lake" / rounds.STAGING / "partition-00001.json").rename(
            tmp_path / "lake" / rounds.STAGING / "9" / "partition-00001.json")  # and staged round 9
        started = asyncio.get_running_loop().time()
        skipped = await rounds.commit(totals, columns, target, root, 8, 30.0)
        assert skipped == "partitions [1] were staged for a later round instead", skipped
        assert asyncio.get_running_loop().time() - started < 10  # not the 30 s wait
        assert len(DeltaTarget(target.location).history()) == versions


def replaced_rows(*triples: tuple[str, int, int]) -> list[Any]:
    """Record batches of (key, value, partition) rows, in `replaced_schema()`."""
    import pyarrow as pa

    keys, values, partitions = zip(*triples, strict=True) if triples else ((), (), ())
    return [pa.record_batch([pa.array(keys, pa.string()), pa.array(values, pa.int64()),
                             pa.array(partitions, pa.int32())], schema=replaced_schema())]


def replaced_schema() -> Any:
    import pyarrow as pa

    return pa.schema([pa.field("key", pa.string()), pa.field("value", pa.int64()),
                      pa.field("partition", pa.int32())])


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_commit_replaces_whole_partitions_and_keys_and_keeps_the_rest(tmp_path: Path, kind: str) -> None:
    """Both ways a version replaces rows go through one copy-on-write delete (engine.export.rewrite), in both
    formats: whole partitions (a worker exporting its own in full) and keys (an incremental export), here
    together with a partition."""
    lake: DeltaTarget | IcebergTarget = (
        DeltaTarget(str(tmp_path / "lake")) if kind == "delta"
        else IcebergTarget("lake.t", engine.App("iceberg-replace").settings({"data_dir": tmp_path})))

    def table() -> dict[str, tuple[int, int]]:
        if isinstance(lake, DeltaTarget):
            found = DeltaTable(lake.location).to_pyarrow_table().to_pylist()
        else:
            found = lake.catalog.load_table(lake.name).scan().to_arrow().to_pylist()
        return {r["key"]: (r["value"], r["partition"]) for r in found}

    schema = replaced_schema()
    lake.overwrite(schema, iter(replaced_rows(("a", 1, 0), ("b", 1, 1), ("c", 1, 1), ("d", 1, 2))), None,
                   written("full", {0: 1, 1: 1, 2: 1}))
    lake.overwrite(schema, iter(replaced_rows(("b", 2, 1))), [1], written("full", {1: 2}))
    assert table() == {"a": (1, 0), "b": (2, 1), "d": (1, 2)}  # c went with its partition
    lake.replace_keys(schema, ["a"], iter(replaced_rows(("a", 3, 0), ("e", 3, 2))),
                      written("incremental", {0: 3}), partitions=[1])
    assert table() == {"a": (3, 0), "d": (1, 2), "e": (3, 2)}  # b went with partition 1, a replaced


def test_a_delta_commit_rewrites_only_the_files_that_hold_a_replaced_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose key and partition ranges hold no replaced row is kept without being read; one that holds
    some is written again, a row group at a time (here two rows each, the first removal in a later one),
    without them; one left with no row is removed. Readers see the same rows as ever."""
    import pyarrow as pa

    from engine.export import delta

    monkeypatch.setattr(delta, "ROW_GROUP", 2)  # delta-rs' writer's
    monkeypatch.setattr(rewrite, "ROW_GROUP", 2)  # engine's
    lake, schema = DeltaTarget(str(tmp_path / "lake")), replaced_schema()

    def files() -> list[str]:
        return [uri.rsplit("/", 1)[-1] for uri in DeltaTable(lake.location).file_uris()]

    lake.overwrite(schema, iter(replaced_rows(*((k, 1, 0) for k in "abcdef"))), None, written("full", {0: 1}))
    first = files()
    lake.replace_keys(schema, ["x"], iter(replaced_rows(("x", 1, 0), ("y", 1, 0))),
                      written("incremental", {0: 2}))  # (x is new)
    second = files()
    assert set(first) < set(second), "a..f's file was kept: its key range holds no x"
    (added,) = set(second) - set(first)
    stats = pa.table(DeltaTable(lake.location).get_add_actions(flatten=True)).to_pylist()
    assert {(f["num_records"], f["min.key"], f["max.key"]) for f in stats} == {(6, "a", "f"), (2, "x", "y")}

    lake.replace_keys(schema, ["e"], iter(replaced_rows(("e", 2, 0))), written("incremental", {0: 3}))
    third = files()
    assert added in third, "x, y's file was kept"
    assert first[0] not in third, "a..f's file was written again without e"
    groups = [pq.ParquetFile(tmp_path / "lake" / name).num_row_groups for name in set(third) - set(second)]
    assert sorted(groups) == [1, 3]  # e's new row, and a, b | c, d | f

    lake.replace_keys(schema, ["x", "y"], iter(()), written("incremental", {0: 4}))
    assert added not in files(), "x, y's file is gone, not replaced by an empty one"
    rows = DeltaTable(lake.location).to_pyarrow_table().to_pylist()
    assert {r["key"]: r["value"] for r in rows} == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 2, "f": 1}


def test_an_incremental_export_refuses_a_delta_table_another_writer_gave_deletion_vectors(tmp_path: Path
                                                                                         ) -> None:
    """Files are rewritten as engine writes them: a table with deletion vectors (Spark's merge-on-read) would
    have deleted rows come back; the export says what to do instead."""
    from deltalake import TableFeatures

    from engine.errors import ExportError

    lake, schema = DeltaTarget(str(tmp_path / "lake")), replaced_schema()
    lake.overwrite(schema, iter(replaced_rows(("a", 1, 0))), None, written("full", {0: 1}))
    DeltaTable(lake.location).alter.add_feature(TableFeatures.DeletionVectors,
                                                allow_protocol_versions_increase=True)
    with pytest.raises(ExportError, match="deletion vectors, column mapping or partition columns, which an "
                                          "incremental export cannot rewrite; export in full to a new path"):
        lake.replace_keys(schema, ["a"], iter(()), written("incremental", {0: 2}))


def test_an_iceberg_table_created_by_two_workers_at_once_is_the_one_that_won(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers create the table (and a SQL catalog its own tables) at their first round: the catalog may
    fail the loser with an error of its own (SQLite's unique constraint); the winner's table is used, the
    catalog loaded again. A creation that fails with no table made is an ExportError saying why."""
    from engine.errors import ExportError
    from engine.export import iceberg

    settings = engine.App("iceberg-race").settings({"data_dir": tmp_path})
    winner, loser = IcebergTarget("lake.t", settings), IcebergTarget("lake.t", settings)

    def raced(name: str, schema: Any) -> Any:
        winner._create(schema)  # the other worker, just before
        raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed")

    monkeypatch.setattr(loser.catalog, "create_table_if_not_exists", raced)
    table = loser._create(replaced_schema())
    assert table.name() == ("lake", "t")
    assert winner.catalog.load_table("lake.t").metadata_location == table.metadata_location

    monkeypatch.setattr(iceberg, "CREATE_ATTEMPTS", 2)
    other = IcebergTarget("lake.u", settings)

    def broken(name: str, schema: Any) -> Any:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(other.catalog, "create_table_if_not_exists", broken)
    with pytest.raises(ExportError, match=r"iceberg:lake.u: the table could not be created: RuntimeError: "
                                          r"database is locked"):
        other._create(replaced_schema())

    from pyiceberg import catalog  # a SQL catalog creates its own tables at its first load: raced too
    loads = iter([RuntimeError("(sqlite3.OperationalError) table iceberg_tables already exists")])

    def load_catalog(name: str) -> Any:
        if (failure := next(loads, None)) is not None:
            raise failure
        return "the catalog"

    monkeypatch.setattr(catalog, "load_catalog", load_catalog)
    assert iceberg._catalog("shared", settings) == ("the catalog", False)


def test_a_delta_target_is_a_path_or_an_object_stores_uri_and_its_tables_are_under_it(tmp_path: Path) -> None:
    from engine.targets import DELTA, Target

    on_s3 = parse_target("delta:s3://bucket/lake")
    assert on_s3 == Target(DELTA, "s3://bucket/lake"), "a URI kept as given, not made a local path"
    assert str(on_s3.child("counts")) == "delta:s3://bucket/lake/counts"
    here = parse_target(f"delta:{tmp_path / 'lake'}")
    assert str(here.child("counts")) == f"delta:{tmp_path / 'lake' / 'counts'}"
    fs, location = DeltaTarget(str(tmp_path / "lake")).file_system()
    assert (type(fs).__name__, location) == ("LocalFileSystem", str(tmp_path / "lake"))
