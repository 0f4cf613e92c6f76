"""The Spark bridge: consistent table snapshots exported to Parquet and loaded into PySpark.

    # inside a worker (a timer, an agent): the state at a checkpoint run for the export
    manifest = await export.export_table(counts, "exports/counts")

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
from engine.tables.windowed import WindowedTable

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from engine.app import App
    from engine.settings import Settings
    from engine.tables.base import BaseTable
    from engine.tables.recovery import Progress


async def export_table(
    table: BaseTable | WindowedTable, path: Path | str, progress: Callable[[int, int], None] | None = None
) -> ExportManifest:
    """Export a running worker's partitions of `table` (plain or windowed): the state of a checkpoint run for
    the export, so every write made before the call is in it. The snapshot is taken as that checkpoint
    completes; files are written in a thread, so agents keep processing meanwhile. (Under exactly-once, call
    it from a timer or from outside the agents: a checkpoint waits for agents to finish their events.)"""
    if isinstance(table, WindowedTable):
        table = table.table
    export_target(path)
    require_active(table)
    await table.checkpoint()
    with from_worker(table) as snapshot:  # synchronously after it: no later store write can come between
        return await asyncio.to_thread(write_snapshot, snapshot, path, progress)


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
    "ExportError", "ExportManifest", "PartitionFile", "TableSnapshot", "export_from_changelog",
    "export_from_store", "export_table", "from_changelog", "from_store", "from_worker", "local_session",
    "read_export", "read_manifest", "spark_schema", "stop_session", "write_snapshot",
]
