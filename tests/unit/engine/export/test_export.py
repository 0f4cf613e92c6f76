"""Table exports to Parquet, on the in-memory broker with RocksDB stores: schemas from the table's types,
windowed columns, the three sources giving the same rows, atomic files and clear errors.
(Spark itself, and a real Kafka broker, are in tests/integration/test_export_spark.py.)"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyarrow", reason="the spark extra: pip install 'engine-streams[spark]'")

import pyarrow as pa
import pyarrow.parquet as pq

import engine
from engine import export, testing
from engine.export.optional import MissingDependency

if TYPE_CHECKING:
    from pathlib import Path


@dataclass
class Sale:
    sku: str
    units: int
    price: float
    at: float  # event time, seconds


def build_app() -> tuple[engine.App, dict[str, engine.Table]]:
    app = engine.App(f"export-{id(object())}")
    sales = app.topic("sales", key_type=str, value_type=Sale, timestamp=lambda s: s.at)
    units = app.Table("units", default=int, key_type=str)
    last = app.Table("last-sale", key_type=str, value_type=Sale)
    per_window = app.Table("per-window", default=int, key_type=str).tumbling(10, expires=3600)
    loose = app.Table("loose", default=dict, key_type=str)
    per_session = app.stream(sales).session(25, grace=1000).sum("per-session", lambda sale: sale.units)

    @app.agent(sales)
    async def record(stream):
        async for sale in stream:
            units[sale.sku] += sale.units
            last[sale.sku] = sale
            per_window[sale.sku] += sale.units
            seen = loose[sale.sku]
            seen["count"] = seen.get("count", 0) + 1
            loose[sale.sku] = seen

    tables = {"units": units, "last-sale": last, "per-window": per_window.table, "loose": loose,
              "per-session": per_session.table}
    return app, tables


SALES = [Sale(f"sku-{i % 7}", i % 5 + 1, 1.25 * (i % 3), 1000.0 + i * 3) for i in range(200)]


def expected_windows() -> dict[tuple[str, datetime], int]:
    totals: dict[tuple[str, datetime], int] = {}
    for sale in SALES:
        start = datetime.fromtimestamp(sale.at - sale.at % 10, UTC)
        totals[(sale.sku, start)] = totals.get((sale.sku, start), 0) + sale.units
    return totals


def rows(path: Path) -> list[dict]:
    manifest = export.read_manifest(path)
    table = pq.read_table([str(path / f.path) for f in manifest.files])
    return sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


async def run_and_export(tmp_path: Path) -> tuple[engine.App, dict[str, engine.Table], str]:
    app, tables = build_app()
    broker = testing.memory_url()
    async with testing.running(app, broker=broker, store="rocksdb://", data_dir=tmp_path / "data") as worker:
        sales = app.topics["sales"]
        for sale in SALES:
            await sales.send(key=sale.sku, value=sale)
        units = tables["units"]
        total = sum(s.units for s in SALES)
        await testing.eventually(lambda: sum(v for _, v in units.items()) == total, 10)
        await worker.checkpoint()  # the stores now hold everything (an export reads stores)
        for name, table in tables.items():
            await export.export_table(table, tmp_path / "live" / name)
    return app, tables, broker


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[engine.App, Path, str]:
    tmp_path = tmp_path_factory.mktemp("export")
    app, _, broker = asyncio.run(run_and_export(tmp_path))
    return app, tmp_path, broker


def test_scalar_table_exports_key_and_value_columns(exported):
    _, tmp_path, _ = exported
    path = tmp_path / "live" / "units"
    expected: dict[str, int] = {}
    for sale in SALES:
        expected[sale.sku] = expected.get(sale.sku, 0) + sale.units
    assert rows(path) == sorted(({"key": k, "value": v} for k, v in expected.items()), key=lambda r: r["key"])
    schema = pq.read_schema(path / "part-00000.parquet")
    assert schema.field("key").type == pa.string()
    assert not schema.field("key").nullable
    assert schema.field("value").type == pa.int64()
    manifest = export.read_manifest(path)
    assert manifest.table == "units"
    assert manifest.source == "worker"
    assert manifest.rows == len(expected)
    assert manifest.partitions == 4
    assert sorted(manifest.offsets) == [0, 1, 2, 3]
    assert [f["name"] for f in manifest.schema] == ["key", "value"]
    assert manifest.encoding["key_codec"] == "str"


def test_dataclass_values_become_columns(exported):
    _, tmp_path, _ = exported
    last = {sale.sku: sale for sale in SALES}
    assert rows(tmp_path / "live" / "last-sale") == sorted(
        ({"key": s.sku, "sku": s.sku, "units": s.units, "price": s.price, "at": s.at} for s in last.values()),
        key=lambda r: r["key"],
    )
    schema = pq.read_schema(tmp_path / "live" / "last-sale" / "part-00000.parquet")
    assert [(f.name, f.type) for f in schema] == [
        ("key", pa.string()), ("sku", pa.string()), ("units", pa.int64()), ("price", pa.float64()),
        ("at", pa.float64()),
    ]


def test_windowed_table_has_window_start_and_end(exported):
    _, tmp_path, _ = exported
    path = tmp_path / "live" / "per-window"
    got = {(r["key"], r["window_start"]): (r["window_end"], r["value"]) for r in rows(path)}
    expected = expected_windows()
    assert set(got) == set(expected)
    for (sku, start), total in expected.items():
        end, value = got[(sku, start)]
        assert value == total
        assert (end - start).total_seconds() == 10
    manifest = export.read_manifest(path)
    assert manifest.window == {"size_ms": 10_000, "step_ms": 10_000, "grace_ms": 0, "expires_ms": 3_600_000}
    assert "window start" in manifest.encoding["store_key"]


def test_session_table_has_each_sessions_start_and_end(exported):
    """A sku sells every 21 s, less than the 25 s gap: one session per sku, from its first sale to its
    last."""
    _, tmp_path, _ = exported
    path = tmp_path / "live" / "per-session"
    expected: dict[str, tuple[float, float, int]] = {}
    for sale in SALES:
        first, _, total = expected.get(sale.sku, (sale.at, sale.at, 0))
        expected[sale.sku] = (first, sale.at, total + sale.units)
    assert rows(path) == sorted(
        ({"key": sku, "window_start": datetime.fromtimestamp(start, UTC),
          "window_end": datetime.fromtimestamp(end, UTC), "value": total}
         for sku, (start, end, total) in expected.items()), key=lambda r: tuple(str(v) for v in r.values()))
    manifest = export.read_manifest(path)
    assert manifest.window == {"gap_ms": 25_000, "grace_ms": 1_000_000, "expires_ms": 1_000_000}
    assert "session end" in manifest.encoding["store_key"]


def test_undeclared_record_values_are_inferred_as_columns(exported):
    _, tmp_path, _ = exported
    counts: dict[str, int] = {}
    for sale in SALES:
        counts[sale.sku] = counts.get(sale.sku, 0) + 1
    assert rows(tmp_path / "live" / "loose") == sorted(
        ({"key": k, "count": v} for k, v in counts.items()), key=lambda r: r["key"])


def test_store_and_changelog_exports_equal_the_live_one(exported):
    app, tmp_path, broker = exported
    settings = app.settings({"data_dir": tmp_path / "data", "broker": broker})
    for name in ("units", "last-sale", "per-window", "loose", "per-session"):
        live = export.read_manifest(tmp_path / "live" / name)
        offline = export.export_from_store(app, settings, name, tmp_path / "offline" / name)
        target = tmp_path / "changelog" / name
        rebuilt = asyncio.run(export.export_from_changelog(app, settings, name, target))
        assert offline.source == "store"
        assert rebuilt.source == "changelog"
        assert rows(tmp_path / "offline" / name) == rows(tmp_path / "live" / name), name
        assert rows(tmp_path / "changelog" / name) == rows(tmp_path / "live" / name), name
        # The worker stopped after the live export, so the final checkpoint may be newer: never older.
        for partition, offset in live.offsets.items():
            assert offline.offsets[partition] >= offset
            assert rebuilt.offsets[partition] == offline.offsets[partition]


def test_export_replaces_files_atomically_and_drops_stale_ones(exported, tmp_path):
    app, source, broker = exported
    settings = app.settings({"data_dir": source / "data", "broker": broker})
    target = tmp_path / "units"
    target.mkdir()
    (target / "part-00009.parquet").write_bytes(b"left by an older export")
    manifest = export.export_from_store(app, settings, "units", target)
    assert sorted(p.name for p in target.iterdir()) == [
        "_engine_export.json", *[f.path for f in manifest.files]]


def test_a_dir_without_manifest_is_not_an_export(tmp_path):
    with pytest.raises(export.ExportError, match="no finished table export"):
        export.read_manifest(tmp_path)


def test_store_export_without_stores_says_what_to_do(exported, tmp_path):
    app, _, _ = exported
    with pytest.raises(export.ExportError, match="--data-dir, or export from the changelog"):
        export.export_from_store(app, app.settings({"data_dir": tmp_path}), "units", tmp_path / "out")


def test_changelog_export_of_a_missing_topic_names_it(exported, tmp_path):
    app, _, _ = exported
    settings = app.settings({"broker": testing.memory_url()})
    with pytest.raises(export.ExportError, match=r"changelog topic '.*-units-changelog' does not exist"):
        asyncio.run(export.export_from_changelog(app, settings, "units", tmp_path))


def test_values_that_do_not_fit_the_schema_are_a_clear_error(tmp_path):
    app = engine.App("export-mixed")
    mixed = app.Table("mixed", key_type=str)
    words = app.topic("words", key_type=str)

    @app.agent(words)
    async def write(stream):
        async for event in stream.events():
            mixed[event.key] = event.value

    async def main() -> None:
        async with testing.running(app, store="rocksdb://", data_dir=tmp_path / "data") as worker:
            for i in range(3):
                await words.send(key=f"n{i}", value=i)
            await words.send(key="zz-text", value="not a number")
            await testing.eventually(lambda: len(mixed) == 4)
            await worker.checkpoint()
            with pytest.raises(export.ExportError, match=r"'mixed'.*declare the table's value_type"):
                await export.export_table(mixed, tmp_path / "out")

    asyncio.run(main())


def test_export_needs_a_running_table(tmp_path):
    _, tables = build_app()
    with pytest.raises(export.ExportError, match="no active partitions"):
        asyncio.run(export.export_table(tables["units"], tmp_path))


def test_without_pyarrow_the_error_says_how_to_install_it(exported, tmp_path, monkeypatch):
    app, source, broker = exported
    for module in ("pyarrow", "pyarrow.parquet", "pyarrow.json", "pyarrow.compute"):
        monkeypatch.setitem(sys.modules, module, None)  # what an import finds when it is not installed
    settings = app.settings({"data_dir": source / "data", "broker": broker})
    with pytest.raises(MissingDependency, match=r"needs pyarrow.*pip install 'engine-streams\[spark\]'"):
        export.export_from_store(app, settings, "units", tmp_path / "out")


async def test_every_table_of_an_app_exports_at_one_checkpoint_while_events_flow(tmp_path):
    """An agent writes two tables per event (a count and a sum of 10 per event); the app's export, taken
    while events keep coming, must find them consistent for every key (sum == 10 x count): one checkpoint,
    and every snapshot taken together as it completed. A session pipeline's table is exported too."""
    app = engine.App("export-app")
    events = app.topic("events", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    sums = app.Table("sums", default=int, key_type=str, value_type=int)
    sessions = app.stream(events).session(3600, grace=3600).count("sessions")

    @app.agent(events)
    async def both(stream):
        async for key, value in stream.items():
            counts[key] += 1
            sums[key] += value

    async with testing.running(app, broker=testing.memory_url(), store="rocksdb://",
                               data_dir=tmp_path / "data"):
        async def feed() -> None:
            for n in range(3000):
                await events.send(key=f"k{n % 13}", value=10)
                if n % 50 == 0:
                    await asyncio.sleep(0)

        feeding = asyncio.create_task(feed())
        await testing.eventually(lambda: sum(v for _, v in counts.items()) > 300, 10)
        manifests = await export.export_app(app, tmp_path / "all")
        await feeding
    assert set(manifests) == {"counts", "sums", "sessions"}
    exported_counts = {r["key"]: r["value"] for r in rows(tmp_path / "all" / "counts")}
    exported_sums = {r["key"]: r["value"] for r in rows(tmp_path / "all" / "sums")}
    assert 0 < sum(exported_counts.values()) < 3000  # taken mid-stream
    assert exported_sums == {key: 10 * n for key, n in exported_counts.items()}
    # (Another agent writes the sessions: it stands wherever it was in the stream at the checkpoint.)
    per_session = {r["key"]: r["value"] for r in rows(tmp_path / "all" / "sessions")}
    assert 0 < sum(per_session.values()) <= 3000
    assert sessions.table.name == "sessions"


def test_a_read_only_stores_scans_leave_the_block_cache_empty(tmp_path: Path) -> None:
    """An export scans a read-only store (or snapshot) once: cached blocks would only grow the process (by up
    to a cache's size per partition). A store the worker writes keeps caching its scans."""
    from engine.stores.rocksdb import RocksDBStoreBackend

    backend = RocksDBStoreBackend("rocksdb://", tmp_path)
    store = backend.open("t", 0)
    store.write({f"key-{n:06d}".encode(): b"v" * 100 for n in range(20_000)}, 19_999)
    store.flush()  # to SST files: what a scan reads through the block cache

    def cached(view: object) -> int:
        return int(view._db.property_int_value("rocksdb.block-cache-usage") or 0)  # type: ignore[attr-defined]

    assert sum(1 for _ in store.items()) == 20_000
    live = cached(store)  # about the data's size
    assert live > 1_000_000
    store.close()
    view = backend.open_read_only("t", 0)
    assert view is not None
    assert sum(1 for _ in view.items()) == 20_000
    assert cached(view) < live / 100  # what opening it read, not the data
    view.close()


async def test_registry_format_and_pydantic_tables_export_typed_columns(tmp_path: Path) -> None:
    """A table whose changelog is Avro (a dataclass value type) and one of pydantic models export one typed
    column per field, as a JSON table of dataclasses does: the registry's bytes are decoded by the table's
    codec, never read as JSON."""
    import pydantic

    from engine.schemas import Avro

    class Level(pydantic.BaseModel):
        sold: int
        note: str | None = None

    app = engine.App("export-typed")
    sales = app.topic("sales", key_type=str, value_type=Sale)
    last = app.Table("last-avro", key_type=str, value_type=Sale,
                     value_serializer=Avro(record_name="shop.Sale"))
    levels = app.Table("levels", key_type=str, value_type=Level)

    @app.agent(sales)
    async def keep(stream):
        async for sku, sale in stream.items():
            last[sku] = sale
            levels[sku] = Level(sold=(levels[sku].sold if sku in levels else 0) + sale.units)

    registry = "memory://export-typed"
    async with testing.running(app, broker=testing.memory_url(), store="rocksdb://",
                               data_dir=tmp_path / "data", schema_registry_url=registry) as worker:
        for sale in SALES:
            await sales.send(key=sale.sku, value=sale)
        await testing.eventually(lambda: len(list(last.items())) == 7, 10)
        await testing.eventually(lambda: sum(level.sold for _, level in levels.items())
                                 == sum(s.units for s in SALES), 10)
        await worker.checkpoint()
        await export.export_table(last, tmp_path / "avro")
        await export.export_table(levels, tmp_path / "levels")
    avro = pq.read_schema(str(tmp_path / "avro" / export.read_manifest(tmp_path / "avro").files[0].path))
    assert [(f.name, str(f.type)) for f in avro] == [
        ("key", "string"), ("sku", "string"), ("units", "int64"), ("price", "double"), ("at", "double")]
    latest = {sale.sku: sale for sale in SALES}
    assert rows(tmp_path / "avro") == sorted(
        ({"key": s.sku, "sku": s.sku, "units": s.units, "price": s.price, "at": s.at}
         for s in latest.values()),
        key=lambda r: tuple(str(v) for v in r.values()))
    sold: dict[str, int] = {}
    for sale in SALES:
        sold[sale.sku] = sold.get(sale.sku, 0) + sale.units
    assert rows(tmp_path / "levels") == sorted(
        ({"key": sku, "sold": n, "note": None} for sku, n in sold.items()),
        key=lambda r: tuple(str(v) for v in r.values()))
    # Offline, as `engine export --data-dir` runs: a fresh app (codecs that know no schema) connects to the
    # registry the settings name, and exports the same rows from the stores.
    fresh = engine.App("export-typed")
    fresh.Table("last-avro", key_type=str, value_type=Sale, value_serializer=Avro(record_name="shop.Sale"))
    settings = fresh.settings({"data_dir": tmp_path / "data", "schema_registry_url": registry})
    await asyncio.to_thread(export.export_from_store, fresh, settings, "last-avro", tmp_path / "offline")
    assert rows(tmp_path / "offline") == rows(tmp_path / "avro")
