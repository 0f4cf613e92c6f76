"""Writing a table snapshot to a lake table (engine.export.lake says what a version records): a full
overwrite of the exported partitions, or, when the table already holds them at known offsets, one MERGE of
only what changed since (incremental).

Rows are produced a chunk at a time from the snapshot's fixed views, so memory stays bounded whatever the
table's size: a full export streams every partition's rows; an incremental one holds the changed keys only.
"""

from __future__ import annotations

import asyncio
import logging
from itertools import islice
from typing import TYPE_CHECKING

from engine.export import delta
from engine.export.columns import CHUNK, TableColumns
from engine.export.lake import ChangelogGone, LakeExport, changed_keys, incremental_base, new_commit
from engine.export.optional import require
from engine.export.targets import DELTA

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    import pyarrow as pa

    from engine.events import TP
    from engine.export.sources import TableSnapshot
    from engine.export.targets import Target
    from engine.settings import Settings

log = logging.getLogger(__name__)


async def write_lake(snapshot: TableSnapshot, target: Target, settings: Settings | None,
                     inputs: Mapping[TP, int] | None = None,
                     progress: Callable[[int, int], None] | None = None) -> LakeExport:
    """Export `snapshot` to the lake table `target` as one new version and return what it records. With
    `settings` (a broker to read the changelog from) and a table that holds every partition of the snapshot
    at known offsets, only the changes since are written; else the exported partitions are replaced."""
    assert target.kind == DELTA
    history = [commit for _, commit in await asyncio.to_thread(delta.history, target.location)]
    base = incremental_base(snapshot, history) if settings is not None else None
    columns = TableColumns(snapshot.table, partition_column=True)
    columns.infer(list(snapshot.views.values()))
    if base is not None:
        assert settings is not None
        try:
            changed = await changed_keys(snapshot, base, settings)
        except ChangelogGone as exc:
            log.warning("%s; exporting %s in full", exc, snapshot.table.name)
        else:
            return await asyncio.to_thread(_merge, snapshot, target, columns, changed, inputs or {}, progress)
    return await asyncio.to_thread(_overwrite, snapshot, target, columns, inputs or {}, progress)


def _overwrite(snapshot: TableSnapshot, target: Target, columns: TableColumns, inputs: Mapping[TP, int],
               progress: Callable[[int, int], None] | None) -> LakeExport:
    views = dict(sorted(snapshot.views.items()))
    expected = sum(view.approximate_len() for view in views.values())
    rows = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for number, view in views.items():
            for batch in columns.batches(view, partition=number):
                rows += batch.num_rows
                if progress is not None:
                    progress(rows, max(expected, rows))
                yield batch

    commit = new_commit(snapshot, "full", inputs)
    whole = len(views) == snapshot.partitions
    version = delta.overwrite(target.location, columns.final_schema(), batches(),
                              None if whole else list(views), commit)
    if progress is not None:
        progress(rows, rows)
    return LakeExport(str(target), version, commit, rows)


def _merge(snapshot: TableSnapshot, target: Target, columns: TableColumns, changed: dict[int, set[bytes]],
           inputs: Mapping[TP, int], progress: Callable[[int, int], None] | None) -> LakeExport:
    arrow = require("pyarrow", "lake export")
    present: dict[int, list[tuple[bytes, bytes]]] = {}
    gone: dict[int, list[bytes]] = {}
    for number, keys in sorted(changed.items()):
        view = snapshot.views[number]
        present[number], gone[number] = [], []
        for key in sorted(keys):
            value = view.get(key)
            if value is None:
                gone[number].append(key)
            else:
                present[number].append((key, value))
    upserted, deleted = sum(map(len, present.values())), sum(map(len, gone.values()))
    commit = new_commit(snapshot, "incremental", inputs)
    schema = columns.final_schema().append(arrow.field(delta.DELETED, arrow.bool_(), nullable=False))
    done = 0

    def flagged(batch: pa.RecordBatch, flag: bool) -> pa.RecordBatch:
        nonlocal done
        done += batch.num_rows
        if progress is not None:
            progress(done, upserted + deleted)
        flags = arrow.array([flag] * batch.num_rows, arrow.bool_())
        return arrow.RecordBatch.from_arrays([*batch.columns, flags], schema=schema)

    def batches() -> Iterator[pa.RecordBatch]:
        for number in present:
            pairs = iter(present[number])
            while chunk := list(islice(pairs, CHUNK)):
                yield flagged(columns.batch([k for k, _ in chunk], [v for _, v in chunk], number), False)
            keys = iter(gone[number])
            while removed := list(islice(keys, CHUNK)):
                yield flagged(columns.removed(removed, number), True)

    version = delta.merge(target.location, schema, batches(), columns.key_names(), commit)
    return LakeExport(str(target), version, commit, upserted, deleted)
