"""A checkpoint's cut of one task: the offsets it commits and its table partitions' writes, closed windows
and late records (engine.commit.checkpoint runs the cut; engine.tasks.active takes and applies it). Typed
here, below the tasks, with what a cut needs of a task and of a lease as protocols."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Collection

    from engine.events import TP, RawRecord
    from engine.tables.base import BaseTable
    from engine.tables.partition import Closed, TablePartition
    from engine.transport.base import Producer


class Committable(Protocol):
    """Where a cut's offset is marked committed once it is (engine.tasks.leases.Lease is one)."""

    def mark_committed(self, offset: int) -> None: ...


class CutTask(Protocol):
    """What a checkpoint does with a task (engine.tasks.active.ActiveTask is one): its number and producer,
    whether it is set up, and its steps of a checkpoint."""

    @property
    def number(self) -> int: ...

    @property
    def producer(self) -> Producer | None: ...

    @property
    def ready(self) -> bool: ...

    def cut(self, only: Collection[TP] | None = None) -> TaskCut: ...

    def take(self, cut: TaskCut, table: BaseTable, part: TablePartition) -> None: ...

    async def send(self, cut: TaskCut) -> None: ...

    def complete(self, cut: TaskCut) -> None: ...

    def offsets_committed(self, cut: TaskCut) -> None: ...

    def drop(self, cut: TaskCut) -> None: ...

    def abort(self, cut: TaskCut) -> None: ...


@dataclass
class TableWrites:
    """One table partition's part of a cut: its writes, engine records, closed windows and late records."""

    table: BaseTable
    part: TablePartition
    writes: dict[Any, Any]
    meta: dict[bytes, bytes | None]
    closes: list[Closed] = field(default_factory=list)
    late: list[RawRecord] = field(default_factory=list)
    encoded: dict[bytes, bytes | None] = field(default_factory=dict)
    last: asyncio.Future[int] | None = None  # the offset of the changelog's last record


@dataclass
class TaskCut:
    """A task's part of one checkpoint: the offsets it commits (with their leases) and its table writes."""

    task: CutTask
    offsets: dict[TP, tuple[Committable, int]] = field(default_factory=dict)
    writes: list[TableWrites] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.offsets and not self.writes

    def committable(self) -> dict[TP, int]:
        return {tp: offset for tp, (_, offset) in self.offsets.items()}
