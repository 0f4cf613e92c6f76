"""The Spark bridge: consistent table snapshots exported to Parquet and loaded into PySpark.

    # inside a worker (a timer, an agent): the state at a checkpoint run for the export
    manifest = await export.export_table(counts, "exports/counts")
    manifests = await export.export_app(app, "exports")      # every table, at one checkpoint

    # batch side, no worker needed
    manifest = await export.export_from_changelog(app, "counts", "exports/counts")
    df = export.read_export(spark, "exports/counts")

Every export is a directory of Parquet files, one per partition, and a manifest naming the changelog offset
each file reflects (engine.export.parquet). pyarrow and pyspark are the optional `spark` extra.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from engine.export.columns import ExportError
from engine.export.parquet import (
    ExportManifest,
    PartitionFile,
    export_target,
    read_manifest,
    write_snapshot,
)
from engine.export.sources import TableSnapshot, from_changelog, from_store, from_worker, require_active
from engine.export.spark import local_session, read_export, spark_schema, stop_session
from engine.tables.inspect import table_named
from engine.tables.windowed import EventTimeTable

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from engine.app import App
    from engine.settings import Settings
    from engine.tables.base import BaseTable
    from engine.tables.recovery import Progress


async def export_table(
    table: BaseTable | EventTimeTable, path: Path | str, progress: Callable[[int, int], None] | None = None
) -> ExportManifest:
    """Export a running worker's partitions of `table` (plain or windowed): the state of a checkpoint run for
    the export, so every write made before the call is in it. The snapshot is taken as that checkpoint
    completes; files are written in a thread, so agents keep processing meanwhile. (Under exactly-once, call
    it from a timer or from outside the agents: a checkpoint waits for agents to finish their events.)"""
    if isinstance(table, EventTimeTable):
        table = table.table
    export_target(path)
    require_active(table)
    await table.checkpoint()
    with from_worker(table) as snapshot:  # synchronously after it: no later store write can come between
        return await asyncio.to_thread(write_snapshot, snapshot, path, progress)


async def export_app(
    app: App, path: Path | str, progress: Callable[[int, int], None] | None = None
) -> dict[str, ExportManifest]:
    """Export every table of `app` that has partitions active on this running worker, each to
    `path/<table name>`, all from one checkpoint run for the export: the snapshots of every table are taken
    together as it completes (no store write can come between them), so tables exported together are
    consistent with each other (joined in Spark, they reflect the same events). Global tables, which every
    worker holds whole, are left out. Under exactly-once, a task with an event in progress may sit out a
    checkpoint (engine.commit): its tables are then as of that task's previous one."""
    tables = [table for table in app.tables.values() if not table.is_global and table.active]
    if not tables:
        raise ExportError(f"app {app.id!r} has no table with partitions active on this worker")
    for table in tables:
        export_target(f"{path}/{table.name}")
    await tables[0].checkpoint()  # the worker's checkpoint: every task, every table
    snapshots: list[TableSnapshot] = []
    try:
        for table in tables:  # synchronously after it, together
            snapshots.append(from_worker(table))
        manifests: dict[str, ExportManifest] = {}
        for snapshot in snapshots:
            manifests[snapshot.table.name] = await asyncio.to_thread(
                write_snapshot, snapshot, f"{path}/{snapshot.table.name}", progress)
        return manifests
    finally:
        for snapshot in snapshots:
            snapshot.close()


def export_from_store(
    app: App, settings: Settings, name: str, path: Path | str,
    progress: Callable[[int, int], None] | None = None,
) -> ExportManifest:
    """Export table `name` from a data directory (`settings.data_dir`), offline or beside a worker."""
    export_target(path)
    with from_store(table_named(app, name), settings) as snapshot:
        return write_snapshot(snapshot, path, progress)


async def export_from_changelog(
    app: App, settings: Settings, name: str, path: Path | str,
    progress: Callable[[int, int], None] | None = None, replay: Progress | None = None,
) -> ExportManifest:
    """Export table `name` rebuilt from its changelog topic on `settings.broker`: every partition."""
    export_target(path)
    with await from_changelog(table_named(app, name), settings, progress=replay) as snapshot:
        return await asyncio.to_thread(write_snapshot, snapshot, path, progress)


__all__ = [
    "ExportError", "ExportManifest", "PartitionFile", "TableSnapshot", "export_app", "export_from_changelog",
    "export_from_store", "export_table", "from_changelog", "from_store", "from_worker", "local_session",
    "read_export", "read_manifest", "spark_schema", "stop_session", "write_snapshot",
]
