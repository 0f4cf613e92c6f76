"""Export rounds: `app.export` to a lake table from several workers, one version per round holding every
partition at that round.

Every worker's export timer ticks at the same wall-clock times (the multiples of `every`); a tick is a round,
numbered by its time in milliseconds. A round can also be asked for (`engine export --live`, through a
worker's web server: engine.export.schedule), numbered by the time it was asked; both kinds share one
sequence, so either continues from the other. In round r each worker runs a checkpoint and stages, beside the
lake table (under STAGING, which Delta readers ignore; in an Iceberg table's own location, which its metadata
does not list, on this machine's file system or an object store: engine.export.staging), its partitions' part
of the version: per partition a Parquet file of the rows to write (a full copy, or the changed keys' rows,
each key replaced whole, and a file of those keys) and a manifest, the Stage, saying what the rows continue
from (the lake's position of that partition, or nothing for a full copy) and where they bring it (changelog
offset, input offsets). The manifest is written last: it is the stage's commit point. An Iceberg table whose
file IO is not pyarrow's (pyiceberg's fsspec one) gets no stages: each worker commits its partitions as a
version.

The worker that staged partition 0 then waits for every partition's manifest of round r and commits them as
one version (one commit replacing the changed keys and the partitions copied in full, copy-on-write:
engine.export.rewrite), whose LakeCommit records every partition and the round. A round that misses a
partition within its wait (a worker died, partitions were moving) or whose stages no longer continue from the
lake's position (an earlier round committed after they were staged) commits nothing; the next round continues
from the last version. So every version holds all partitions at one round, and none is half-written: a version
is one commit, and the staged files are read only once all of them are complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from engine.errors import ExportError, LakeConflict
from engine.export.columns import CHUNK, KEY, TableColumns
from engine.export.delta import DeltaTarget
from engine.export.lake import (
    LakeCommit,
    LakeExport,
    PartitionPosition,
    lake_position,
    partition_position,
    same_table,
)
from engine.export.lake_writer import (
    TouchedKeys,
    lake_table,
    plan,
    unchanged,
    warn_if_unshared,
    write_lake,
)
from engine.export.optional import needs
from engine.export.sources import checkpointed
from engine.export.staging import StagingArea

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    import pyarrow as pa

    from engine.events import TP
    from engine.export.iceberg import IcebergTarget
    from engine.export.sources import TableSnapshot
    from engine.settings import Settings
    from engine.tables.base import BaseTable
    from engine.targets import Target

log = logging.getLogger(__name__)

STAGING = "_engine_rounds"  # beside the Delta log: directories starting with "_" are not the table's
FULL, INCREMENTAL, UNCHANGED = "full", "incremental", "unchanged"
MIN_WAIT = 10.0  # seconds the committer waits for the other stages of a round, at least
# The committer looks for the stages still missing after POLL seconds, then less and less often, at least
# every POLL_LONGEST (each look is a request per missing stage on an object store).
POLL = 0.05
POLL_LONGEST = 1.0


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
    that multiple, or a little after it), in milliseconds, as a round asked for at that time would be."""
    return round(round(moment / every) * every * 1000)


def asked_round(moment: float) -> int:
    """The round of an export asked for at wall time `moment`: later than every tick before it."""
    return round(moment * 1000)


@dataclass(frozen=True)
class RoundResult:
    """What one worker did in a round for one table: the partitions it staged and, if it committed the
    round (it staged partition 0), the version, or why it committed none."""

    staged: list[int]
    export: LakeExport | None = None
    skipped: str | None = None  # the committer's reason for no version (None: it committed one, or it is
    # not the committer)

    @property
    def committed(self) -> bool:
        return self.export is not None


async def export_round(tables: list[BaseTable], targets: Mapping[str, Target], round_: int, wait: float
                       ) -> dict[str, RoundResult]:
    """Round `round_` of this worker for `tables` (each to its lake table in `targets`): a checkpoint, the
    stages of its partitions, and, for each table whose partition 0 it staged, the round's commit."""
    inputs, snapshots = await checkpointed(tables)
    results: dict[str, RoundResult] = {}
    try:
        committing: list[tuple[BaseTable, TableColumns, StagingArea]] = []
        for snapshot in snapshots:
            table, target = snapshot.table, targets[snapshot.table.name]
            numbers = sorted(snapshot.views)
            staged = await stage(snapshot, target, table.worker_settings, inputs, round_)
            if staged is None:  # no stages for this lake table: this worker's partitions, a version
                export = await write_lake(snapshot, target, table.worker_settings, inputs)
                results[table.name] = RoundResult(numbers, export)
            else:
                results[table.name] = RoundResult(numbers)
                if 0 in snapshot.views:
                    committing.append((table, *staged))
    finally:
        for snapshot in snapshots:
            snapshot.close()
    for table, columns, root in committing:
        outcome = await commit(table, columns, targets[table.name], root, round_, max(wait, MIN_WAIT))
        done = results[table.name]
        results[table.name] = (replace(done, export=outcome) if isinstance(outcome, LakeExport)
                               else replace(done, skipped=outcome))
    return results


async def stage(snapshot: TableSnapshot, target: Target, settings: Settings, inputs: Mapping[TP, int],
                round_: int) -> tuple[TableColumns, StagingArea] | None:
    """Stage the snapshot's partitions for round `round_` (engine.export.lake.plan_export decides between a
    full copy and the changes since the lake's position); returns the columns they were written with and
    the staging area, or None if the lake table can keep none (an Iceberg table whose file IO is not
    pyarrow's)."""
    columns = TableColumns(snapshot.table, partition_column=True)
    columns.infer(list(snapshot.views.values()))
    lake = lake_table(target, settings)
    warn_if_unshared(lake, snapshot, target)
    area = await asyncio.to_thread(staging_area, lake, columns.final_schema())
    if area is None:
        return None
    history = [found for _, found in await asyncio.to_thread(lake.history)]
    planned, changed = await plan(snapshot, target, history, settings)
    position = lake_position(history)
    numbers = [number for number in sorted(snapshot.views) if number not in planned.ahead]
    try:
        await asyncio.to_thread(_write_stages, snapshot, columns, area, round_, numbers,
                                planned.base, position, changed or {}, inputs)
    except FileNotFoundError as exc:  # the committer closed the round meanwhile (it gave up waiting)
        raise ExportError(f"{target}: round {round_} was closed while this worker staged it ({exc})") from exc
    return columns, area


def staging_area(lake: DeltaTarget | IcebergTarget, schema: pa.Schema) -> StagingArea | None:
    """Where the rounds of `lake` are staged (an Iceberg table that does not exist yet is created with
    `schema`), or None if it can keep none."""
    found = lake.file_system() if isinstance(lake, DeltaTarget) else lake.file_system(schema)
    if found is None:
        return None
    fs, location = found
    return StagingArea(fs, f"{location}/{STAGING}")


def _write_stages(snapshot: TableSnapshot, columns: TableColumns, area: StagingArea, round_: int,
                  numbers: list[int], base: dict[int, int | None] | None,
                  position: Mapping[int, PartitionPosition], changed: dict[int, set[bytes]],
                  inputs: Mapping[TP, int]) -> None:
    with needs("pyarrow", "lake export"):
        import pyarrow as arrow
    area.open_round(round_)
    changes = TouchedKeys(snapshot, columns, changed)
    schema = columns.final_schema()
    for number in numbers:
        batches: Iterator[pa.RecordBatch] | None
        if base is None:
            mode, since = FULL, None
            batches = columns.batches(snapshot.views[number], partition=number)
        elif number in base:
            mode, since, batches = INCREMENTAL, base[number], changes.batches(number)
        else:  # the lake holds the partition at the snapshot's offset already
            mode, since, batches = UNCHANGED, position[number].changelog_offset, None
        written = deleted = 0
        if batches is not None:
            with area.parquet_writer(area.path(round_, _data(number)), schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
                    written += batch.num_rows
            if mode == INCREMENTAL:
                written, deleted = changes.counts(number)
                keys = arrow.array(changes.key_values(number), schema.field(KEY).type)
                area.write_table(area.path(round_, _keys(number)), arrow.table({KEY: keys}))
        staged = Stage(round_, number, mode, since, partition_position(snapshot, inputs, number), written,
                       deleted)
        area.write_text(area.path(round_, _manifest(number)), staged.to_json())  # the stage's commit point


async def commit(table: BaseTable, columns: TableColumns, target: Target, area: StagingArea, round_: int,
                 wait: float) -> LakeExport | str:
    """Round `round_`'s version of `table`, once every partition's stage is there (nothing changed: the
    table's newest, not written); or why there is none (a partition is missing after `wait` seconds, the
    stages do not continue from the lake's position), as logged."""
    deadline = time.monotonic() + wait
    stages: dict[int, Stage] = {}
    missing = set(range(table.partition_count))
    pause = POLL
    while True:
        stages.update(await asyncio.to_thread(_stages, area, round_, missing))
        missing -= set(stages)
        if not missing:
            break
        moved_on = await asyncio.to_thread(_moved_on, area, round_, missing)
        if moved_on or time.monotonic() > deadline:
            why = (f"partitions {sorted(missing)} were staged for a later round instead" if moved_on else
                   f"partitions {sorted(missing)} were not staged within {wait:.0f}s (their workers did "
                   "not take part: stopped, or partitions moving)")
            await asyncio.to_thread(_clean, area, round_)
            return _skipped(target, round_, why)
        await asyncio.sleep(pause)  # waiting for other workers' files
        pause = min(pause * 1.5, POLL_LONGEST)
    try:
        return await asyncio.to_thread(_commit_and_clean, table, columns, target, area, round_, stages)
    except LakeConflict as exc:  # another worker committed this round (partition 0 moved meanwhile)
        return _skipped(target, round_, str(exc))


def _skipped(target: Target, round_: int, why: str) -> str:
    log.info("%s: round %d committed nothing: %s (the next round continues from the last version)", target,
             round_, why)
    return why


def _commit_and_clean(table: BaseTable, columns: TableColumns, target: Target, area: StagingArea,
                      round_: int, stages: dict[int, Stage]) -> LakeExport | str:
    """The round's commit, then its stages removed, in one thread: removed even when the worker stops
    meanwhile (a thread runs to its end; the export's task may be cancelled while it waits)."""
    try:
        return _commit(table, columns, target, area, round_, stages)
    finally:
        _clean(area, round_)


def _commit(table: BaseTable, columns: TableColumns, target: Target, area: StagingArea, round_: int,
            stages: dict[int, Stage]) -> LakeExport | str:
    lake = lake_table(target, table.worker_settings)
    versions = lake.history()
    history = [found for _, found in versions]
    same = same_table(history, table)
    position = lake_position(history) if same else {}
    if same and history[0].round is not None and history[0].round >= round_:
        return _skipped(target, round_, f"round {history[0].round} is committed already")
    for number, staged in sorted(stages.items()):
        at = position[number].changelog_offset if number in position else None
        if staged.mode != FULL and (number not in position or at != staged.base):
            return _skipped(target, round_, f"partition {number} was staged from changelog offset "
                                             f"{staged.base}, the lake is at {at}")
    if all(staged.mode == UNCHANGED for staged in stages.values()):
        return unchanged(target, versions)
    modes = {staged.mode for staged in stages.values()}
    commit_ = LakeCommit(table.app_id, table.name, table.changelog_topic.name, "worker",
                         FULL if modes == {FULL} else INCREMENTAL, table.partition_count,
                         {number: staged.position for number, staged in sorted(stages.items())}, round=round_)
    schema = columns.final_schema()

    def staged_rows() -> Iterator[pa.RecordBatch]:
        for number, staged in sorted(stages.items()):
            if staged.mode != UNCHANGED:
                for batch in area.batches(area.path(round_, _data(number)), CHUNK):
                    yield batch if batch.schema == schema else batch.cast(schema)

    rows = sum(staged.rows for staged in stages.values())
    deleted = sum(staged.deleted for staged in stages.values())
    full = [number for number, staged in stages.items() if staged.mode == FULL]
    if not same or modes == {FULL}:  # the whole table, copied in full
        version = lake.overwrite(schema, staged_rows(), None, commit_)
    else:
        keys = [key for number, staged in sorted(stages.items()) if staged.mode == INCREMENTAL
                for key in area.read_table(area.path(round_, _keys(number))).column(KEY).to_pylist()]
        version = lake.replace_keys(schema, keys, staged_rows(), commit_, partitions=full)
    return LakeExport(str(target), version, commit_, rows, deleted)


def _data(number: int) -> str:
    return f"partition-{number:05d}.parquet"


def _keys(number: int) -> str:
    return f"partition-{number:05d}.keys.parquet"


def _manifest(number: int) -> str:
    return f"partition-{number:05d}.json"


def _stages(area: StagingArea, round_: int, numbers: Iterable[int]) -> dict[int, Stage]:
    """The stages of partitions `numbers` in a round complete so far (a manifest exists only once its data
    is complete)."""
    found = {}
    for number in sorted(numbers):
        text = area.read_text(area.path(round_, _manifest(number)))
        if text is not None:
            found[number] = Stage.from_json(text)
    return found


def _moved_on(area: StagingArea, round_: int, missing: set[int]) -> bool:
    """Whether a partition missing from round `round_` is staged for a later round already: its worker
    skipped this round (its previous one outlasted the period), so this round can no longer complete."""
    return any(area.exists(area.path(later, _manifest(number)))
               for later in area.rounds() if later > round_ for number in missing)


def _clean(area: StagingArea, round_: int) -> None:
    """Remove the stages of this round and of every earlier one (rounds that never completed)."""
    for found in area.rounds():
        if found <= round_:
            area.remove_round(found)
