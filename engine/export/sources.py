"""Where an export reads a table from: three sources that give the same thing, a TableSnapshot (one fixed
StoreView per partition, each with the changelog offset its data reflects).

- `from_worker`: the stores of a running worker's active partitions, snapshotted in one synchronous step
  (RocksDB checkpoints; stores are written only between loop steps, at checkpoint completion, so every
  partition is caught at the same checkpoint and processing is never paused).
- `from_store`: a worker's data directory, opened read-only (no lock: works beside a running worker too).
- `from_changelog`: the changelog topic alone, replayed into temporary stores, so the batch side needs no
  worker and no data directory; it sees every partition, where a worker sees only its own.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ExportError
from engine.events import TP
from engine.operations.inspect import disk_backend
from engine.tables.recovery import Progress, replay_to_end
from engine.topics import planned_partitions
from engine.transport import transport_for

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.settings import Settings
    from engine.stores import PartitionStore, StoreView
    from engine.tables.base import BaseTable


@dataclass
class TableSnapshot:
    """Fixed views of a table's partitions. Close it (or use `with`) to release them."""

    table: BaseTable
    origin: str  # "worker", "store" or "changelog": recorded in the export's manifest
    partitions: int  # the table's partition count (views may cover fewer: a worker's own)
    views: dict[int, StoreView]
    cleanup: Callable[[], None] | None = field(default=None, repr=False)

    def offsets(self) -> dict[int, int | None]:
        return {number: view.changelog_offset() for number, view in self.views.items()}

    def close(self) -> None:
        for view in self.views.values():
            view.close()
        self.views = {}
        if self.cleanup is not None:
            self.cleanup()
            self.cleanup = None

    def __enter__(self) -> TableSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def require_active(table: BaseTable) -> None:
    """A worker export needs partitions of the table active here."""
    if not table.active:
        raise ExportError(f"table {table.name!r} has no active partitions on this worker (not started yet, "
                          "or another worker owns them all)")


def from_worker(table: BaseTable) -> TableSnapshot:
    """Snapshot the partitions active on this (running) worker. Writes buffered since the last checkpoint
    are not in it: a snapshot is exactly the state at a checkpoint, matching its changelog offsets."""
    require_active(table)
    views: dict[int, StoreView] = {}
    try:
        for number, part in sorted(table.active.items()):
            views[number] = part.store.snapshot()
    except BaseException:
        for view in views.values():
            view.close()
        raise
    return TableSnapshot(table, "worker", table.partition_count, views)


async def checkpointed(tables: list[BaseTable]) -> tuple[Mapping[TP, int], list[TableSnapshot]]:
    """A checkpoint run now (every task of the worker), and snapshots of `tables` taken together as it
    completes (no store write can come between them): where each input partition resumes, and the
    snapshots (the caller closes them)."""
    inputs = await tables[0].checkpoint()
    snapshots: list[TableSnapshot] = []
    try:
        for table in tables:  # synchronously after it, together
            snapshots.append(from_worker(table))
    except BaseException:
        for snapshot in snapshots:
            snapshot.close()
        raise
    return inputs, snapshots


def from_store(table: BaseTable, settings: Settings) -> TableSnapshot:
    """Open a data directory's stores of `table` read-only."""
    backend = disk_backend(table, settings)
    views: dict[int, StoreView] = {}
    for number in backend.local_partitions(table.name):
        store = backend.open_read_only(table.name, number)
        if store is not None:
            views[number] = store
    if not views:
        raise ExportError(f"no stores of table {table.name!r} under {backend.root}; pass the worker's "
                          "--data-dir, or export from the changelog instead")
    partitions = max(planned_partitions(table.changelog_topic, settings), max(views) + 1)
    return TableSnapshot(table, "store", partitions, views)


async def from_changelog(
    table: BaseTable, settings: Settings, *, workdir: Path | None = None, progress: Progress | None = None
) -> TableSnapshot:
    """Rebuild every partition from the changelog topic (to its current end) into temporary RocksDB stores."""
    from engine.stores.rocksdb import RocksDBStoreBackend

    topic = table.changelog_topic.name
    transport = transport_for(settings)
    admin = transport.admin()
    try:
        counts = await admin.describe_topics()
    finally:
        await admin.close()
    count = counts.get(topic)
    if not count:
        raise ExportError(f"table {table.name!r}: its changelog topic {topic!r} does not exist on "
                          f"{settings.broker}")
    root = Path(tempfile.mkdtemp(prefix=f"engine-export-{table.name}-", dir=workdir))
    backend = RocksDBStoreBackend("rocksdb://", root)
    stores: dict[TP, PartitionStore] = {}

    def rebuild(tp: TP) -> PartitionStore:
        stores[tp].close()
        backend.destroy(table.name, tp.partition)
        stores[tp] = backend.open(table.name, tp.partition)
        return stores[tp]

    def cleanup() -> None:
        shutil.rmtree(root, ignore_errors=True)

    try:
        for number in range(count):
            stores[TP(topic, number)] = backend.open(table.name, number)
        # (never reset by itself: records deleted while it reads are a gap it says, as recovery does)
        reader = transport.consumer(group_id=None, auto_offset_reset="none")
        await reader.start()
        try:
            await replay_to_end(reader, stores, rebuild, progress or Progress(), topic,
                                tables={topic: table.name})
        finally:
            await reader.stop()
    except BaseException:
        for store in stores.values():
            store.close()
        cleanup()
        raise
    views: dict[int, StoreView] = {tp.partition: store for tp, store in stores.items()}
    return TableSnapshot(table, "changelog", count, views, cleanup)
