"""Export rounds: `app.export` to a Delta table from several workers, one version per round holding every
partition at that round.

Every worker's export timer ticks at the same wall-clock times (the multiples of `every`); a tick is a
round, numbered by its time. In round r each worker runs a checkpoint and stages, beside the lake table
(under STAGING, which Delta readers ignore), its partitions' part of the version: per partition a Parquet
file of the rows to write (the MERGE's, flagged DELETED or not) and a manifest, the Stage, saying what the
rows continue from (the lake's position of that partition, or nothing for a full copy) and where they bring
it (changelog offset, input offsets). The manifest is written last: it is the stage's commit point.

The worker that staged partition 0 then waits for every partition's manifest of round r and commits them
as one version: one MERGE (upserts, deletes, and for partitions copied in full the rows they no longer
have), whose LakeCommit records every partition and the round. A round that misses a partition within its
wait (a worker died, partitions were moving) or whose stages no longer continue from the lake's position
(an earlier round committed after they were staged) commits nothing; the next round continues from the
last version. So every version holds all partitions at one round, and none is half-written: a version is
one commit, and the staged files are read only once all of them are complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.export.columns import CHUNK, ExportError, TableColumns
from engine.export.delta import DeltaTarget
from engine.export.lake import (
    ChangelogGone,
    LakeCommit,
    LakeConflict,
    LakeExport,
    PartitionPosition,
    changed_keys,
    lake_position,
    new_commit,
    plan_export,
)
from engine.export.lake_writer import Changes, flag, flagged_schema
from engine.export.optional import require
from engine.export.sources import checkpointed

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    import pyarrow as pa

    from engine.events import TP
    from engine.export.sources import TableSnapshot
    from engine.export.targets import Target
    from engine.settings import Settings
    from engine.tables.base import BaseTable

log = logging.getLogger(__name__)

STAGING = "_engine_rounds"  # beside the Delta log: directories starting with "_" are not the table's
FULL, INCREMENTAL, UNCHANGED = "full", "incremental", "unchanged"
MIN_WAIT = 10.0  # seconds the committer waits for the other stages of a round, at least
POLL = 0.05


@dataclass(frozen=True)
class Stage:
    """One partition's part of a round, staged by the worker that owns it."""

    round: int
    partition: int
    mode: str  # FULL, INCREMENTAL or UNCHANGED (nothing to write: the lake is at its offset already)
    base: int | None  # INCREMENTAL, UNCHANGED: the lake's changelog offset of the partition it continues from
    position: PartitionPosition  # where the partition is after this round
    rows: int = 0
    deleted: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Stage:
        raw = json.loads(text)
        raw["position"] = PartitionPosition(**raw["position"])
        return cls(**raw)


def round_of(moment: float, every: float) -> int:
    """The round a tick at wall time `moment` belongs to: the nearest multiple of `every` (a tick runs at
    that multiple, or a little after it)."""
    return round(moment / every)


async def export_round(tables: list[BaseTable], targets: Mapping[str, Target], round_: int, wait: float
                       ) -> dict[str, LakeExport | None]:
    """Round `round_` of this worker for `tables` (each to its Delta table in `targets`): a checkpoint, the
    stages of its partitions, and, for each table whose partition 0 it staged, the round's commit (its
    LakeExport, or None when the round committed nothing)."""
    inputs, snapshots = await checkpointed(tables)
    try:
        committing: list[tuple[TableSnapshot, TableColumns]] = []
        for snapshot in snapshots:
            columns = await stage(snapshot, targets[snapshot.table.name], snapshot.table.worker_settings,
                                  inputs, round_)
            if 0 in snapshot.views:
                committing.append((snapshot, columns))
    finally:
        for snapshot in snapshots:
            snapshot.close()
    results: dict[str, LakeExport | None] = {}
    for snapshot, columns in committing:
        table = snapshot.table
        results[table.name] = await commit(table, columns, targets[table.name], round_, max(wait, MIN_WAIT))
    return results


async def stage(snapshot: TableSnapshot, target: Target, settings: Settings, inputs: Mapping[TP, int],
                round_: int) -> TableColumns:
    """Stage the snapshot's partitions for round `round_` (engine.export.lake.plan_export decides between a
    full copy and the changes since the lake's position); returns the columns they were written with."""
    columns = TableColumns(snapshot.table, partition_column=True)
    columns.infer(list(snapshot.views.values()))
    history = [found for _, found in await asyncio.to_thread(DeltaTarget(target.location).history)]
    plan = plan_export(snapshot, history)
    if plan.ahead:
        log.warning("%s: round %d leaves out partitions %s: the lake holds them at newer changelog offsets "
                    "(%s) than this worker's snapshot", target, round_, sorted(plan.ahead), plan.ahead)
    changed: dict[int, set[bytes]] = {}
    base = plan.base
    if base:
        try:
            changed = await changed_keys(snapshot, base, settings)
        except ChangelogGone as exc:
            log.warning("%s; staging partitions %s of %s in full", exc, sorted(base), snapshot.table.name)
            base = None
    position = lake_position(history)
    numbers = [number for number in sorted(snapshot.views) if number not in plan.ahead]
    try:
        await asyncio.to_thread(_write_stages, snapshot, columns, _directory(target, round_), round_, numbers,
                                base, position, changed, inputs)
    except FileNotFoundError as exc:  # the committer closed the round meanwhile (it gave up waiting)
        raise ExportError(f"{target}: round {round_} was closed while this worker staged it ({exc})") from exc
    return columns


def _write_stages(snapshot: TableSnapshot, columns: TableColumns, directory: Path, round_: int,
                  numbers: list[int], base: dict[int, int | None] | None,
                  position: Mapping[int, PartitionPosition], changed: dict[int, set[bytes]],
                  inputs: Mapping[TP, int]) -> None:
    parquet = require("pyarrow.parquet", "lake export")
    directory.mkdir(parents=True, exist_ok=True)
    changes = Changes(snapshot, columns, changed)
    schema = flagged_schema(columns)
    for number in numbers:
        batches: Iterator[pa.RecordBatch] | None
        if base is None:
            mode, since = FULL, None
            batches = (flag(batch, False, columns)
                       for batch in columns.batches(snapshot.views[number], partition=number))
        elif number in base:
            mode, since, batches = INCREMENTAL, base[number], changes.batches(number)
        else:  # the lake holds the partition at the snapshot's offset already
            mode, since, batches = UNCHANGED, position[number].changelog_offset, None
        rows = deleted = 0
        if batches is not None:
            with parquet.ParquetWriter(_data(directory, number, ".tmp"), schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
                    rows += batch.num_rows
                    deleted += batch.column(len(schema) - 1).true_count
            os.replace(_data(directory, number, ".tmp"), _data(directory, number))
        where = new_commit(snapshot, mode, inputs, [number]).partitions[number]
        staged = Stage(round_, number, mode, since, where, rows - deleted, deleted)
        manifest = _manifest(directory, number)
        manifest.with_suffix(".tmp").write_text(staged.to_json())
        os.replace(manifest.with_suffix(".tmp"), manifest)  # the stage's commit point


async def commit(table: BaseTable, columns: TableColumns, target: Target, round_: int, wait: float
                 ) -> LakeExport | None:
    """Round `round_`'s version of `table`, once every partition's stage is there (None if one is missing
    after `wait` seconds, or the stages do not continue from the lake's position)."""
    directory = _directory(target, round_)
    deadline = time.monotonic() + wait
    while len(stages := _stages(directory, table.partition_count)) < table.partition_count:
        missing = set(range(table.partition_count)) - set(stages)
        if time.monotonic() > deadline or _moved_on(target, round_, missing):
            log.info("%s: round %d missed partitions %s; nothing committed (the next round continues from "
                     "the last version)", target, round_, sorted(missing))
            _clean(target, round_)
            return None
        await asyncio.sleep(POLL)  # waiting for other workers' files
    try:
        return await asyncio.to_thread(_commit, table, columns, target, round_, stages)
    except LakeConflict as exc:  # another worker committed this round (partition 0 moved meanwhile)
        log.info("%s: round %d: %s; nothing committed", target, round_, exc)
        return None
    finally:
        _clean(target, round_)


def _commit(table: BaseTable, columns: TableColumns, target: Target, round_: int,
            stages: dict[int, Stage]) -> LakeExport | None:
    lake = DeltaTarget(target.location)
    history = [found for _, found in lake.history()]
    same = bool(history) and (history[0].app, history[0].table, history[0].changelog_topic) == (
        table.app_id, table.name, table.changelog_topic.name)
    position = lake_position(history) if same else {}
    if same and history[0].round is not None and history[0].round >= round_:
        return None  # committed already, or a later round is
    for number, staged in sorted(stages.items()):
        at = position[number].changelog_offset if number in position else None
        if staged.mode != FULL and (number not in position or at != staged.base):
            log.info("%s: round %d: partition %d was staged from changelog offset %s, the lake is at %s; "
                     "nothing committed", target, round_, number, staged.base, at)
            return None
    if all(staged.mode == UNCHANGED for staged in stages.values()):
        return None
    modes = {staged.mode for staged in stages.values()}
    commit_ = LakeCommit(table.app_id, table.name, table.changelog_topic.name, "worker",
                         FULL if modes == {FULL} else INCREMENTAL, table.partition_count,
                         {number: staged.position for number, staged in sorted(stages.items())}, round=round_)
    schema, directory = flagged_schema(columns), _directory(target, round_)

    def staged_rows() -> Iterator[pa.RecordBatch]:
        parquet = require("pyarrow.parquet", "lake export")
        for number, staged in sorted(stages.items()):
            if staged.mode != UNCHANGED:
                for batch in parquet.ParquetFile(_data(directory, number)).iter_batches(CHUNK):
                    yield batch if batch.schema == schema else batch.cast(schema)

    rows = sum(staged.rows for staged in stages.values())
    deleted = sum(staged.deleted for staged in stages.values())
    if not same or modes == {FULL}:  # the whole table, copied in full
        final = columns.final_schema()
        version = lake.overwrite(final, (batch.select(final.names) for batch in staged_rows()), None,
                                 commit_)
    else:
        version = lake.merge(schema, staged_rows(), columns.key_names(), commit_,
                             replace=[number for number, staged in stages.items() if staged.mode == FULL])
    return LakeExport(str(target), version, commit_, rows, deleted)


def _directory(target: Target, round_: int) -> Path:
    return Path(target.location) / STAGING / str(round_)


def _data(directory: Path, number: int, suffix: str = "") -> Path:
    return directory / f"partition-{number:05d}.parquet{suffix}"


def _manifest(directory: Path, number: int) -> Path:
    return directory / f"partition-{number:05d}.json"


def _stages(directory: Path, count: int) -> dict[int, Stage]:
    """The stages of a round complete so far (a manifest exists only once its data is complete)."""
    found = {}
    for number in range(count):
        manifest = _manifest(directory, number)
        if manifest.exists():
            found[number] = Stage.from_json(manifest.read_text())
    return found


def _rounds(target: Target) -> list[int]:
    """The rounds with a staging directory."""
    root = Path(target.location) / STAGING
    return [int(entry.name) for entry in (root.iterdir() if root.is_dir() else ())
            if entry.name.lstrip("-").isdigit()]


def _moved_on(target: Target, round_: int, missing: set[int]) -> bool:
    """Whether a partition missing from round `round_` is staged for a later round already: its worker
    skipped this round (its previous one outlasted the period), so this round can no longer complete."""
    return any(_manifest(_directory(target, later), number).exists()
               for later in _rounds(target) if later > round_ for number in missing)


def _clean(target: Target, round_: int) -> None:
    """Remove the stages of this round and of every earlier one (rounds that never completed)."""
    for found in _rounds(target):
        if found <= round_:
            shutil.rmtree(_directory(target, found), ignore_errors=True)
