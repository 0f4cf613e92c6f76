"""A versioned table's history exported (engine.tables.versioned, engine.export): one row per version kept,
`key, valid_from, valid_to, value` (`valid_to` null for a key's latest; deletions only end the version
before them), to Parquet and, full then incremental, to a Delta table; against the versions a model of
Kafka Streams' versioned store keeps (tests/unit/engine/tables/test_versioned_tables.py's), computed from the
updates alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("deltalake", reason="the spark extra: pip install 'engine-streams[spark]'")

import pyarrow.parquet as pq
from deltalake import DeltaTable

from engine import export, testing
from tests.unit.engine.versioned_helpers import HISTORY, Model, S, random_updates, source_app, versioned_app

if TYPE_CHECKING:
    from pathlib import Path


def expected_rows(model: Model) -> list[tuple[str, datetime, datetime | None, float]]:
    """(key, valid from, valid to or None, value) of every non-deletion version the store keeps."""
    def when(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC)

    found = []
    for key, writes in model.writes.items():
        kept = sorted(at for k, at in model.kept() if k == key)
        for index, at in enumerate(kept):
            if writes[at] is not None:
                end = kept[index + 1] if index + 1 < len(kept) else None
                found.append((key, when(at), None if end is None else when(end), writes[at]))
    return sorted(found, key=str)


def as_rows(records: list[dict[str, Any]]) -> list[tuple[str, datetime, datetime | None, float]]:
    return sorted(((r["key"], r["valid_from"], r["valid_to"], r["value"]) for r in records), key=str)


async def test_a_versioned_tables_history_exports_to_parquet_and_delta_full_then_incremental(
        tmp_path: Path) -> None:
    url = testing.memory_url()
    updates_ = random_updates(9, 400)
    first, second = updates_[:250], updates_[250:]
    model = Model(HISTORY * S)
    app, updates, prices, seen = versioned_app(url, store="rocksdb://", data_dir=tmp_path / "data")
    lake = tmp_path / "lake"
    sent = 0
    async with testing.running(app):
        for part in (first, second):
            for key, at, price in part:
                model.put(key, round(at * S), price)
                await updates.send(key=key, value={"at": at, "price": price})
            sent += len(part)
            await testing.eventually(lambda total=sent: len(seen) == total)
            result = await export.export_table(prices, f"delta:{lake}")
            assert isinstance(result, export.LakeExport)
            delta = DeltaTable(str(lake)).to_pyarrow_table().to_pylist()
            assert as_rows(delta) == expected_rows(model)
            assert result.commit.mode == ("full" if part is first else "incremental")
        await export.export_table(prices, tmp_path / "parquet")
    manifest = export.read_manifest(tmp_path / "parquet")
    parquet = pq.read_table([str(tmp_path / "parquet" / f.path) for f in manifest.files]).to_pylist()
    assert as_rows(parquet) == expected_rows(model)
    assert any(row[2] is None for row in expected_rows(model))  # (latest versions: open)
    assert len({row[0] for row in expected_rows(model)}) == 4
    assert manifest.window == {"history_ms": HISTORY * S}
    assert "version time in milliseconds" in manifest.encoding["store_key"]


async def test_a_versioned_table_over_a_source_topic_exports_its_versions_full_then_incremental(
        tmp_path: Path) -> None:
    """Its changelog is the topic (plain keys): an incremental export replaces the keys it touched; the
    versions expired meanwhile are gone from the store (removed at checkpoints, never on the topic)."""
    url = testing.memory_url()
    updates_ = random_updates(4, 400)
    first, second = updates_[:250], updates_[250:]
    model = Model(HISTORY * S)
    app, feed, prices, _ = source_app(url, tmp_path / "data")
    lake = tmp_path / "lake"
    async with testing.running(app) as worker:
        for part in (first, second):
            for key, at, price in part:
                model.put(key, round(at * S), price)
                await feed.send(key=key, value=price, timestamp_ms=round(at * S))
            await testing.eventually(lambda: prices.late_events == model.late and all(
                prices.get(key) == model.latest(key) for key in model.writes))
            await worker.checkpoint()
            result = await export.export_table(prices, f"delta:{lake}")
            assert isinstance(result, export.LakeExport)
            delta = DeltaTable(str(lake)).to_pyarrow_table().to_pylist()
            assert as_rows(delta) == expected_rows(model)
            assert result.commit.mode == ("full" if part is first else "incremental")
    records = testing.broker_for(url).topics["feed"][0]
    assert len(records) == len(updates_)  # (nothing written back to the topic)
