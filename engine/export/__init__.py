"""The Spark bridge: consistent table snapshots exported to Parquet and loaded into PySpark.

    # inside a worker (a timer, an agent): the state at a checkpoint run for the export
    manifest = await export.export_table(counts, "exports/counts")
    manifests = await export.export_app(app, "exports")      # every table, at one checkpoint

    # batch side, no worker needed
    manifest = await export.export_from_changelog(app, "counts", "exports/counts")
    df = export.read_export(spark, "exports/counts")

An export goes to a directory of Parquet files, one per partition, with a manifest naming the changelog
offset each file reflects (engine.export.parquet), or, given `delta:PATH`, to a Delta Lake table whose every
version records those offsets and the input offsets in its commit metadata, later exports merging only what
changed (engine.export.lake). pyarrow, deltalake and pyspark are the optional `spark` extra.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from engine.errors import ExportError
from engine.export.lake import LakeCommit, LakeExport, PartitionPosition, describe_position, lake_position
from engine.export.lake_writer import lake_table, write_lake
from engine.export.parquet import ExportManifest, PartitionFile, read_manifest, write_snapshot
from engine.export.schedule import AskedRound, TableRound, read_round
from engine.export.sources import (
    TableSnapshot,
    checkpointed,
    from_changelog,
    from_store,
    from_worker,
    require_active,
)
from engine.export.spark import local_session, read_export, spark_schema, stop_session
from engine.operations.inspect import table_named
from engine.operations.schemas import connect_schemas
from engine.schemas.codecs import registry_codecs
from engine.tables.event_time import EventTimeTable
from engine.targets import Target, parse_target

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from pathlib import Path

    from engine.app import App
    from engine.events import TP
    from engine.settings import Settings
    from engine.tables.base import BaseTable
    from engine.tables.recovery import Progress


ExportResult = ExportManifest | LakeExport  # a Parquet directory's manifest, or a lake table's new version


def _write(snapshot: TableSnapshot, target: Target, settings: Settings, inputs: Mapping[TP, int],
           progress: Callable[[int, int], None] | None) -> Awaitable[ExportResult]:
    """Write a snapshot to its target, off the event loop (files are written in threads)."""
    if target.is_lake:
        return write_lake(snapshot, target, settings, inputs, progress)
    return asyncio.to_thread(write_snapshot, snapshot, target.location, progress)


async def export_table(
    table: BaseTable | EventTimeTable, target: Target | Path | str,
    progress: Callable[[int, int], None] | None = None,
) -> ExportResult:
    """Export a running worker's partitions of `table` (plain or windowed) to `target` (a directory of Parquet
    files, or `delta:PATH`): the state of a checkpoint run for the export, so every write made before the
    call is in it. The snapshot is taken as that checkpoint completes; files are written in threads, so
    agents keep processing meanwhile. A Delta table that already holds these partitions gets only what
    changed since (engine.export.lake). (Under exactly-once, call it from a timer or from outside the
    agents: a checkpoint waits for agents to finish their events.)"""
    if isinstance(table, EventTimeTable):
        table = table.table
    where = parse_target(target)
    require_active(table)
    inputs, (snapshot,) = await checkpointed([table])
    with snapshot:
        return await _write(snapshot, where, table.worker_settings, inputs, progress)


async def export_app(
    app: App, target: Target | Path | str, progress: Callable[[int, int], None] | None = None
) -> dict[str, ExportResult]:
    """Export every table of `app` that has partitions active on this running worker, each to
    `target/<table name>` (a Parquet directory or, for `delta:PATH`, a Delta table), all from one checkpoint
    run for the export: the snapshots of every table are taken together as it completes (no store write
    can come between them), so tables exported together are consistent with each other (joined in Spark,
    they reflect the same events). Global tables, which every worker holds whole, are left out. Under
    exactly-once, a task with an event in progress may sit out a checkpoint (engine.commit): its tables
    are then as of that task's previous one."""
    tables = [table for table in app.tables.values() if not table.is_global and table.active]
    if not tables:
        raise ExportError(f"app {app.id!r} has no table with partitions active on this worker")
    where = {table.name: parse_target(target).child(table.name) for table in tables}
    inputs, snapshots = await checkpointed(tables)  # the worker's checkpoint: every task, every table
    try:
        results: dict[str, ExportResult] = {}
        for snapshot in snapshots:
            table = snapshot.table
            results[table.name] = await _write(snapshot, where[table.name], table.worker_settings, inputs,
                                               progress)
        return results
    finally:
        for snapshot in snapshots:
            snapshot.close()


def export_from_store(
    app: App, settings: Settings, name: str, target: Path | str,
    progress: Callable[[int, int], None] | None = None,
) -> ExportResult:
    """Export table `name` from a data directory (`settings.data_dir`), offline or beside a worker. (Blocking,
    for scripts and the CLI: a lake export reads the changelog on its own event loop.)"""
    where = parse_target(target)
    table = table_named(app, name)
    if registry_codecs([table.changelog_topic.key_codec, table.changelog_topic.value_codec]):
        asyncio.run(_knowing_schemas(table, settings))
    with from_store(table, settings) as snapshot:
        if where.is_lake:
            return asyncio.run(write_lake(snapshot, where, settings, {}, progress))
        return write_snapshot(snapshot, where.location, progress)


async def export_from_changelog(
    app: App, settings: Settings, name: str, target: Path | str,
    progress: Callable[[int, int], None] | None = None, replay: Progress | None = None,
) -> ExportResult:
    """Export table `name` rebuilt from its changelog topic on `settings.broker`: every partition."""
    where = parse_target(target)
    table = table_named(app, name)
    await _knowing_schemas(table, settings)
    with await from_changelog(table, settings, progress=replay) as snapshot:
        return await _write(snapshot, where, settings, {}, progress)


async def _knowing_schemas(table: BaseTable, settings: Settings) -> None:
    """A table in a schema registry format: its codecs connected to the registry the settings name (its
    subjects' schemas learnt), as a worker's are, so that an export without a worker decodes its records."""
    registry = await connect_schemas([table.changelog_topic], settings)
    if registry is not None:
        await registry.close()


def lake_status(target: Path | str, settings: Settings | None = None) -> list[str]:
    """Where the lake table `target` (`delta:PATH` or `iceberg:...`) is in the stream: the newest engine
    version, and each partition's changelog offset and input offsets (what `engine export --status`
    prints). `settings`: the app's (its data dir holds the default Iceberg catalog)."""
    where = parse_target(target)
    if not where.is_lake:
        raise ExportError(f"{target} is not a lake table (give delta:PATH or iceberg:NAMESPACE.TABLE)")
    history = lake_table(where, settings).history()
    if not history:
        return [f"{where}: no version written by an engine export"]
    version, newest = history[0]
    round_ = "" if newest.round is None else f" (round {newest.round}: every partition at one tick)"
    return [f"{where}: version {version}, {newest.mode} export from {newest.source} at {newest.created_at}"
            + round_,
            *describe_position(newest, lake_position(commit for _, commit in history))]


__all__ = [
    "AskedRound", "ExportError", "ExportManifest", "ExportResult", "LakeCommit", "LakeExport",
    "PartitionFile", "PartitionPosition", "TableRound", "TableSnapshot", "Target", "export_app",
    "export_from_changelog", "export_from_store", "export_table", "from_changelog", "from_store",
    "from_worker", "lake_status", "local_session", "parse_target", "read_export", "read_manifest",
    "read_round", "spark_schema", "stop_session", "write_snapshot",
]
