"""Lake tables (Delta Lake, Iceberg) as export targets: what every version records about the stream, and
how an export decides between a full copy and an incremental one.

Every version an export commits carries, in the table's own commit metadata (Delta's `commitInfo`, an
Iceberg snapshot's summary), a `LakeCommit`: the app, the table, and per exported partition the changelog
offset its rows reflect and the input offsets of the checkpoint they come from. Any reader can therefore
tell which point of the stream a version is, and the next export knows where to continue.

A table's position is per partition: the newest version that wrote a partition says where that partition is (a
worker exports only the partitions it owns; a full export of every partition supersedes all earlier versions).
An incremental export reads the changelog from there to the snapshot's offsets, collects the keys written
meanwhile, and replaces their rows by their rows as of the snapshot (engine.export.rewrite): none for the keys
the snapshot no longer has (tombstones, expired windows). It is exact because a snapshot and its changelog
offset always agree (engine.stores), whatever happened in between: compaction only drops records that a later
record of the same key supersedes, and that one is read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from engine.errors import ChangelogGone, ExportError
from engine.events import TP
from engine.tables.keys import META_PREFIX
from engine.tables.recovery import Progress, replay_to_end
from engine.transport import transport_for

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from engine.export.sources import TableSnapshot
    from engine.settings import Settings
    from engine.tables.base import BaseTable

LAKE_FORMAT = "engine-lake-commit/1"
METADATA_KEY = "engine"  # the commit metadata entry that holds a LakeCommit as JSON


@dataclass(frozen=True)
class PartitionPosition:
    """Where one table partition's rows in a version are in the stream."""

    changelog_offset: int | None  # the last changelog record reflected (None: the partition was empty)
    inputs: dict[str, int] = field(default_factory=dict)  # input topic: the next offset its task reads


@dataclass(frozen=True)
class LakeCommit:
    """What one lake version holds: which table, how it was written, and where each partition it wrote is."""

    app: str
    table: str
    changelog_topic: str
    source: str  # "worker", "store" or "changelog"
    mode: str  # "full" or "incremental"
    partition_count: int  # the table's
    partitions: dict[int, PartitionPosition]
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="milliseconds"))
    format: str = LAKE_FORMAT
    round: int | None = None  # an export round's (engine.export.rounds): every partition at that tick

    @property
    def complete(self) -> bool:
        """A full export of every partition: the versions before it no longer matter."""
        return self.mode == "full" and len(self.partitions) == self.partition_count

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LakeCommit | None:
        """None for metadata some other writer (or another format version) left."""
        try:
            raw: dict[str, Any] = json.loads(text)
        except ValueError:
            return None
        if not isinstance(raw, dict) or raw.get("format") != LAKE_FORMAT:
            return None
        raw["partitions"] = {int(number): PartitionPosition(**position)
                             for number, position in raw["partitions"].items()}
        return cls(**raw)


@dataclass(frozen=True)
class LakeExport:
    """What one export to a lake table did: the version it committed, what that records, and its rows."""

    target: str
    version: int
    commit: LakeCommit
    rows: int  # written (full) or inserted and updated (incremental)
    deleted: int = 0
    written: bool = True  # False: nothing had changed, and `version` is the table's newest

    @property
    def offsets(self) -> dict[int, int | None]:
        return {number: where.changelog_offset for number, where in self.commit.partitions.items()}

    def to_dict(self) -> dict[str, Any]:
        """As JSON has it (a worker's answer to `engine export --live`)."""
        return {"target": self.target, "version": self.version, "commit": self.commit.to_json(),
                "rows": self.rows, "deleted": self.deleted, "written": self.written}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LakeExport:
        commit = LakeCommit.from_json(raw["commit"])
        if commit is None:
            raise ExportError(f"{raw['target']}: a version's metadata is not engine's ({raw['commit']!r})")
        return cls(raw["target"], raw["version"], commit, raw["rows"], raw["deleted"], raw["written"])


def version_of(history: list[tuple[int, LakeCommit]], commit: LakeCommit, where: str) -> int:
    """The version `commit` became, found in the table's `history` (other writers may have committed after
    it already, so it is not simply the newest)."""
    for version, found in history:
        if found == commit:
            return version
    raise ExportError(f"{where}: the version just committed is not in the table's history")


def lake_position(history: Iterable[LakeCommit]) -> dict[int, PartitionPosition]:
    """Each partition's position in the newest version: from the newest commit that wrote it (`history`
    newest first), looking no further back than the newest complete export."""
    position: dict[int, PartitionPosition] = {}
    for commit in history:
        for number, where in commit.partitions.items():
            position.setdefault(number, where)
        if commit.complete:
            break
    return position


def describe_position(commit: LakeCommit, position: Mapping[int, PartitionPosition]) -> list[str]:
    """Lines for `engine export --status`: the table, then one per partition."""
    lines = [f"table {commit.table} of app {commit.app} (changelog {commit.changelog_topic}), "
             f"{len(position)} of {commit.partition_count} partitions exported"]
    for number, where in sorted(position.items()):
        inputs = ", ".join(f"{topic}@{offset}" for topic, offset in sorted(where.inputs.items()))
        lines.append(f"  partition {number}: changelog offset {where.changelog_offset}"
                     + (f"; inputs {inputs}" if inputs else ""))
    return lines


def new_commit(snapshot: TableSnapshot, mode: str, inputs: Mapping[TP, int],
               numbers: Iterable[int]) -> LakeCommit:
    """The LakeCommit of an export of partitions `numbers` of `snapshot` (`inputs`: where its checkpoint's
    input partitions resume)."""
    table = snapshot.table
    partitions = {number: partition_position(snapshot, inputs, number) for number in sorted(numbers)}
    return LakeCommit(table.app_id, table.name, table.changelog_topic.name, snapshot.origin, mode,
                      snapshot.partitions, partitions)


def partition_position(snapshot: TableSnapshot, inputs: Mapping[TP, int], number: int) -> PartitionPosition:
    """Where partition `number` of `snapshot` is: its changelog offset and its input partitions' resume
    points (`inputs`: the checkpoint's)."""
    resumes = {tp.topic: offset for tp, offset in inputs.items() if tp.partition == number}
    return PartitionPosition(snapshot.views[number].changelog_offset(), resumes)


def same_table(history: list[LakeCommit], table: BaseTable) -> bool:
    """Whether a lake table's newest engine commit (`history`, newest first) is of `table`: its versions
    then say where each partition is; a new lake table, or another table's, is written in full."""
    return bool(history) and (history[0].app, history[0].table, history[0].changelog_topic) == (
        table.app_id, table.name, table.changelog_topic.name)


@dataclass(frozen=True)
class ExportPlan:
    """How one export writes a snapshot into a lake table that may hold some of its partitions already."""

    partitions: list[int]  # the snapshot's partitions to write
    base: dict[int, int | None] | None  # incremental: the changelog offset each starts after; None: full
    ahead: dict[int, int | None] = field(default_factory=dict)  # left out: the lake is newer (its offset)

    @property
    def whole(self) -> bool:
        return self.base is None and not self.ahead


def plan_export(snapshot: TableSnapshot, history: list[LakeCommit]) -> ExportPlan:
    """Full (a new table, another table's, or a partition it never held) or incremental from each
    partition's recorded offset. A partition the lake holds at a newer offset than the snapshot is left out,
    never moved back: a worker that is losing it, or an older data directory, exports what is already
    superseded. A partition at the snapshot's very offset has nothing to write."""
    numbers = sorted(snapshot.views)
    if not same_table(history, snapshot.table):
        return ExportPlan(numbers, None)
    position = lake_position(history)
    ahead: dict[int, int | None] = {}
    base: dict[int, int | None] = {}
    full = False
    for number in numbers:
        where, now = position.get(number), snapshot.views[number].changelog_offset()
        if where is None:
            full = True
        elif where.changelog_offset is not None and (now is None or where.changelog_offset > now):
            ahead[number] = where.changelog_offset
            continue
        elif where.changelog_offset == now:
            continue
        else:
            base[number] = where.changelog_offset
    writing = [n for n in numbers if n not in ahead]
    if full:
        return ExportPlan(writing, None, ahead)
    return ExportPlan(sorted(base), base, ahead)


class _ChangedKeys:
    """A store to replay a changelog range into that only collects the keys written (engine.tables.recovery
    is the one way a changelog is read; this is where its records go)."""

    def __init__(self, after: int | None) -> None:
        self.after = after
        self.keys: set[bytes] = set()

    def changelog_offset(self) -> int | None:
        return self.after

    def changelog_identity(self) -> bytes | None:
        return None

    def set_changelog_identity(self, identity: bytes) -> None:
        pass

    def write(self, updates: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None:
        self.keys.update(key for key in updates if not key.startswith(META_PREFIX))
        if changelog_offset is not None:
            self.after = changelog_offset


async def changed_keys(snapshot: TableSnapshot, base: Mapping[int, int | None],
                       settings: Settings) -> dict[int, set[bytes]]:
    """The store keys written to each partition's changelog after `base` and up to the snapshot's offset.
    Raises ChangelogGone when the log no longer holds all of them (then only a full export is exact)."""
    topic = snapshot.table.changelog_topic.name
    # (-1 for a partition the last export had nothing of: every record from offset 0 on is a change, and a
    # log that no longer starts at 0 lost some, as one that lost records after an offset did)
    collectors = {TP(topic, number): _ChangedKeys(-1 if after is None else after)
                  for number, after in base.items()}
    until = {}
    for tp in collectors:
        offset = snapshot.views[tp.partition].changelog_offset()
        until[tp] = 0 if offset is None else offset + 1

    def gone(tp: TP) -> _ChangedKeys:
        after = base[tp.partition]
        since = "from its start" if after is None else f"after offset {after} (the last export's)"
        raise ChangelogGone(f"{tp.topic}[{tp.partition}] no longer holds the records {since}")

    # (never reset by itself: records deleted while it reads raise ChangelogGone, as below its start)
    reader = transport_for(settings).consumer(group_id=None, auto_offset_reset="none")
    await reader.start()
    try:
        await replay_to_end(reader, collectors, gone, Progress(), f"{topic} since the last export",
                            until=until)
    finally:
        await reader.stop()
    return {tp.partition: collector.keys for tp, collector in collectors.items()}
