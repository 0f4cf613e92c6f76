"""Writing a table snapshot to a lake table (engine.export.lake says what a version records): a full
overwrite of the exported partitions, or, when the table already holds them at known offsets, one commit of
only what changed since (incremental): the changed keys' rows deleted and added again as of the snapshot (a
windowed table's key with all its windows), copy-on-write (engine.export.rewrite), in both formats.

Rows are produced a chunk at a time from the snapshot's fixed views, so memory stays bounded whatever the
table's size: a full export streams every partition's rows; an incremental one holds the changed keys only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from itertools import islice
from typing import TYPE_CHECKING, Any

from engine.errors import ChangelogGone, ExportError, LakeConflict
from engine.export.columns import CHUNK, TableColumns, version_rows
from engine.export.delta import DeltaTarget
from engine.export.iceberg import IcebergTarget
from engine.export.lake import ExportPlan, LakeCommit, LakeExport, changed_keys, new_commit, plan_export
from engine.tables.keys import key_prefix, window_inner_key
from engine.targets import DELTA

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    import pyarrow as pa

    from engine.events import TP
    from engine.export.sources import TableSnapshot
    from engine.settings import Settings
    from engine.stores import StoreView
    from engine.targets import Target

log = logging.getLogger(__name__)


CONFLICT_RETRIES = 10  # attempts at one export while other writers (the app's other workers) commit
DECODERS = 2  # partitions scanned and decoded at once for a full export
AHEAD = 4  # decoded batches waiting for the writer, at most (memory stays bounded)


def interleaved(scans: list[Iterator[pa.RecordBatch]], threads: int) -> Iterator[pa.RecordBatch]:
    """The batches of every scan, `threads` scans at a time, in the order they are ready. Why threads: a
    partition's store scan and Arrow's decoding release the GIL, so one partition decodes while another is
    read and the lake writer encodes. At most AHEAD batches wait; an exception in a scan is raised here."""
    done = object()
    ready: queue.Queue[Any] = queue.Queue(maxsize=AHEAD)
    pending = iter(scans)
    lock = threading.Lock()
    stop = threading.Event()

    def drain() -> None:
        try:
            while not stop.is_set():
                with lock:
                    scan = next(pending, None)
                if scan is None:
                    return
                for batch in scan:
                    while not stop.is_set():
                        try:
                            ready.put(batch, timeout=0.1)
                            break
                        except queue.Full:
                            continue
        except BaseException as exc:  # handed to the consumer
            ready.put(exc)
        finally:
            ready.put(done)

    workers = [threading.Thread(target=drain, name=f"export-scan-{n}", daemon=True) for n in range(threads)]
    for worker in workers:
        worker.start()
    try:
        finished = 0
        while finished < len(workers):
            item = ready.get()
            if item is done:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        while any(worker.is_alive() for worker in workers):  # unblock writers waiting on a full queue
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.05)


def lake_table(target: Target, settings: Settings | None) -> DeltaTarget | IcebergTarget:
    """The lake table a target names (an Iceberg one needs the app's settings: its data dir holds the default
    catalog)."""
    if target.kind == DELTA:
        return DeltaTarget(target.location)
    if settings is None:
        raise ExportError(f"{target}: give the app's settings (its data dir holds the default catalog)")
    return IcebergTarget(target.location, settings)


def warn_if_unshared(lake: DeltaTarget | IcebergTarget, snapshot: TableSnapshot, target: Target) -> None:
    """Say so when a worker exports some of a table's partitions to the default Iceberg catalog, which is in
    its own data dir: the other workers' partitions go to their own data dirs' tables."""
    if isinstance(lake, IcebergTarget) and lake.in_data_dir and len(snapshot.views) < snapshot.partitions:
        log.warning("%s is in the default catalog of this worker's data dir: the partitions other workers "
                    "own go to their own data dirs' tables; configure a catalog they share (REST, Glue, "
                    "SQL...: engine.export.iceberg)", target)


def unchanged(target: Target, versions: list[tuple[int, LakeCommit]]) -> LakeExport:
    """What an export that had nothing to write reports: the table's newest version."""
    version, newest = versions[0]
    return LakeExport(str(target), version, newest, 0, written=False)


async def plan(snapshot: TableSnapshot, target: Target, history: list[LakeCommit], settings: Settings
               ) -> tuple[ExportPlan, dict[int, set[bytes]] | None]:
    """What an export of `snapshot` writes into a lake table with `history` (engine.export.lake.plan_export),
    and for an incremental one the store keys written since each partition's recorded offset; None for a
    full one, or when the changelog no longer holds those records (then a full one is exact)."""
    found = plan_export(snapshot, history)
    if found.ahead:
        log.warning("%s: partitions %s are left out: the lake holds them at newer changelog offsets (%s) "
                    "than this snapshot of %s", target, sorted(found.ahead), found.ahead, snapshot.table.name)
    if found.base is None or not found.base:
        return found, None if found.base is None else {}
    try:
        return found, await changed_keys(snapshot, found.base, settings)
    except ChangelogGone as exc:
        log.warning("%s; exporting partitions %s of %s in full", exc, sorted(found.base), snapshot.table.name)
        return ExportPlan(found.partitions, None, found.ahead), None


async def write_lake(snapshot: TableSnapshot, target: Target, settings: Settings,
                     inputs: Mapping[TP, int] | None = None,
                     progress: Callable[[int, int], None] | None = None) -> LakeExport:
    """Export `snapshot` to the lake table `target` as one new version and return what it records
    (engine.export.lake.plan_export: full, or only the changes since, read from the changelog on
    `settings.broker`). Another writer's commit in between (a worker exporting its own partitions) makes it
    plan again on the newer version."""
    lake = lake_table(target, settings)
    warn_if_unshared(lake, snapshot, target)
    columns = TableColumns(snapshot.table, partition_column=True)
    columns.infer(list(snapshot.views.values()))
    for attempt in range(1, CONFLICT_RETRIES + 1):
        try:
            return await _write_once(snapshot, target, lake, settings, columns, inputs or {}, progress)
        except LakeConflict as exc:
            if attempt == CONFLICT_RETRIES:
                raise
            log.info("%s: another export committed first (%s); planning again", target, exc)
    raise AssertionError("unreachable")


async def _write_once(snapshot: TableSnapshot, target: Target, lake: DeltaTarget | IcebergTarget,
                      settings: Settings, columns: TableColumns, inputs: Mapping[TP, int],
                      progress: Callable[[int, int], None] | None) -> LakeExport:
    versions = await asyncio.to_thread(lake.history)
    planned, changed = await plan(snapshot, target, [commit for _, commit in versions], settings)
    if not planned.partitions:
        return unchanged(target, versions)
    if changed is not None:
        if not any(changed.values()):  # only engine's own records moved on (a windowed table's time)
            return unchanged(target, versions)
        return await asyncio.to_thread(_replace_keys, snapshot, target, lake, columns, changed, inputs,
                                       progress)
    whole = planned.whole and len(planned.partitions) == snapshot.partitions
    return await asyncio.to_thread(_overwrite, snapshot, target, lake, columns, planned.partitions, whole,
                                   inputs, progress)


class _Written:
    """Rows handed to a lake writer, counted, and reported to `progress` as (rows so far, rows expected)."""

    def __init__(self, progress: Callable[[int, int], None] | None, expected: int) -> None:
        self.progress, self.expected, self.rows = progress, expected, 0

    def through(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            self.rows += batch.num_rows
            if self.progress is not None:
                self.progress(self.rows, max(self.expected, self.rows))
            yield batch


def _overwrite(snapshot: TableSnapshot, target: Target, lake: DeltaTarget | IcebergTarget,
               columns: TableColumns, numbers: list[int], whole: bool, inputs: Mapping[TP, int],
               progress: Callable[[int, int], None] | None) -> LakeExport:
    views = {number: snapshot.views[number] for number in numbers}
    written = _Written(progress, sum(view.approximate_len() for view in views.values()))
    scans = [columns.batches(view, partition=number) for number, view in views.items()]
    commit = new_commit(snapshot, "full", inputs, numbers)
    version = lake.overwrite(columns.final_schema(), written.through(interleaved(scans, DECODERS)),
                             None if whole else numbers, commit)
    if progress is not None:
        progress(written.rows, written.rows)
    return LakeExport(str(target), version, commit, written.rows)


class TouchedKeys:
    """What an incremental export replaces for the keys `changed` in a snapshot: each key whole, its rows as
    of the snapshot (a windowed table's key with all its windows) after all its old ones deleted."""

    def __init__(self, snapshot: TableSnapshot, columns: TableColumns, changed: Mapping[int, set[bytes]]
                 ) -> None:
        self.snapshot, self.columns, self.changed = snapshot, columns, changed
        self.windowed = columns.window is not None
        # The changed keys are the changelog's: the store's, but a source topic's plain keys for a versioned
        # table over one.
        self.plain_changed = self.windowed and not columns.table.has_own_changelog
        inner = self.windowed and not self.plain_changed
        self.touched = {number: sorted({window_inner_key(key) if inner else key for key in keys})
                        for number, keys in sorted(changed.items())}
        # Per partition, once its batches were read: (rows, changed rows the snapshot no longer has: the
        # deletes).
        self.read: dict[int, tuple[int, int]] = {}

    @property
    def deleted(self) -> int:
        return sum(deleted for _, deleted in self.read.values())

    def counts(self, number: int) -> tuple[int, int]:
        """Partition `number`'s (rows, rows deleted), once its batches were read."""
        return self.read[number]

    def key_values(self, number: int) -> list[Any]:
        """Partition `number`'s touched keys, as values of the key column."""
        keys = self.touched[number]
        return self.columns.key_values(keys) if keys else []

    def batches(self, number: int) -> Iterator[pa.RecordBatch]:
        """Partition `number`'s rows of its touched keys."""
        pairs = _rows_of(self.snapshot.views[number], self.touched[number], self.windowed)
        found: set[bytes] = set()  # the changed rows (keys, windows, versions) the snapshot still has
        if self.columns.versioned:
            pairs = version_rows(pairs, found)
        rows = 0
        while chunk := list(islice(pairs, CHUNK)):
            if not self.columns.versioned:
                found.update(key for key, _ in chunk)
            rows += len(chunk)
            yield self.columns.batch([k for k, _ in chunk], [v for _, v in chunk], number)
        if self.plain_changed:
            found = {window_inner_key(key) for key in found}
        self.read[number] = (rows, len(self.changed[number] - found))


def _replace_keys(snapshot: TableSnapshot, target: Target, lake: DeltaTarget | IcebergTarget,
                  columns: TableColumns, changed: dict[int, set[bytes]], inputs: Mapping[TP, int],
                  progress: Callable[[int, int], None] | None) -> LakeExport:
    touched = TouchedKeys(snapshot, columns, changed)
    values = [value for number in touched.touched for value in touched.key_values(number)]
    commit = new_commit(snapshot, "incremental", inputs, changed)
    written = _Written(progress, len(values))
    batches = (batch for number in touched.touched for batch in touched.batches(number))
    version = lake.replace_keys(columns.final_schema(), values, written.through(batches), commit)
    return LakeExport(str(target), version, commit, written.rows, touched.deleted)


def _rows_of(view: StoreView, keys: list[bytes], windowed: bool) -> Iterator[tuple[bytes, bytes]]:
    """The stored rows of `keys` (encoded keys; of a windowed table, every window of each)."""
    for key in keys:
        if windowed:
            yield from view.items(*key_prefix(key))
        elif (value := view.get(key)) is not None:
            yield key, value
