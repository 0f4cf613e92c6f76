"""The state of one task: the stores of its table partitions, their changelog offsets, and what they become
for the task (Kafka Streams' ProcessorStateManager).

Every task has one, active or standby: an active task builds its table partitions from it once its stores
are restored (engine.tables.manager restores several tasks' stores in one pass); a standby task's stores
follow their changelogs through the worker's follower. When a task moves between the two roles here (a
standby becoming active, an active task revoked and kept warm until the next assignment says what it is),
its state manager is handed over, stores open: only the tail of each changelog is replayed. When it closes,
its stores close and what they hold stays on disk, for a later task of that number here.

Global tables' partitions are held by one state manager of the table manager, the same way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from engine.events import TP
from engine.tables.partition import TablePartition
from engine.tables.recovery import apply_batch

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

    from engine.events import RawRecord
    from engine.stores import PartitionStore
    from engine.tables.base import BaseTable


def read_upto(offset: int | None) -> int:
    """How far a store has read its changelog: the next offset it reads (0 if it applied nothing), from
    the offset of the last record it applied. The assignor sums these to find who is caught up; a follower
    seeks there."""
    return 0 if offset is None else offset + 1


class Stores(Protocol):
    """Where a state manager opens and deletes its stores (engine.tables.manager.TableManager is that): the
    worker's store backends and its inventory of the stores kept on disk."""

    def open_store(self, table: BaseTable, number: int) -> PartitionStore: ...

    def opened(self, wanted: Sequence[tuple[BaseTable, int]]
               ) -> AsyncIterator[tuple[BaseTable, int, PartitionStore]]: ...

    def destroy_store(self, table: BaseTable, number: int) -> None: ...

    def closed_store(self, table: BaseTable, tp: TP, store: PartitionStore) -> None: ...

    async def closed_off_loop(self, table: BaseTable, tp: TP, store: PartitionStore) -> None: ...


class StateManager:
    """The open stores of one task (or of the global tables), by changelog partition."""

    __slots__ = ("_stores", "follows_sources", "label", "stores")

    def __init__(self, label: str, stores: Stores, *, follows_sources: bool = False) -> None:
        """`follows_sources`: whether a follower keeps the stores of tables over a source topic current too
        (the global tables': every worker reads all of them, and nothing else applies the topic)."""
        self.label = label  # "task 3", "global tables": for logs
        self._stores = stores
        self.follows_sources = follows_sources
        self.stores: dict[TP, tuple[BaseTable, PartitionStore]] = {}

    def __repr__(self) -> str:
        return f"<StateManager of {self.label}: {len(self.stores)} stores>"

    def open(self, partitions: Iterable[tuple[BaseTable, int]]) -> None:
        """Open the store of each (table, partition) not open yet (rebuilt if corrupt, by the backend)."""
        for table, number in partitions:
            tp = TP(table.changelog_topic.name, number)
            if tp not in self.stores:
                self.stores[tp] = (table, self._stores.open_store(table, number))

    async def open_off_loop(self, partitions: Iterable[tuple[BaseTable, int]]) -> None:
        """`open`, each store opened where it does not hold the event loop (`Stores.opened`): what a task
        being set up beside running ones does. Each store is kept as soon as it is open, so a failure part-way
        leaves the ones open to be closed with the others."""
        wanted = [(table, number) for table, number in partitions
                  if TP(table.changelog_topic.name, number) not in self.stores]
        async for table, number, store in self._stores.opened(wanted):
            self.stores[TP(table.changelog_topic.name, number)] = (table, store)

    def rebuild(self, tp: TP) -> PartitionStore:
        """Delete the store of `tp` and open it empty (it does not fit its changelog: recovery replays it)."""
        table, store = self.stores.pop(tp)
        store.close()
        self._stores.destroy_store(table, tp.partition)
        self.open([(table, tp.partition)])
        return self.stores[tp][1]

    def rebuild_ahead_of(self, committed: Mapping[TP, int]) -> list[TP]:
        """Rebuild the stores that reflect input past their task's committed offsets (`committed`: input
        partition -> the offset its task resumes at); returns their changelog partitions.

        Under exactly-once a store is written only once the transaction holding its writes and its input
        offsets committed, so a store ahead of its task's committed offsets reflects a commit the broker no
        longer has. A broker that lost a committed transaction's markers (seen on a single broker restarted
        under load; an unclean leader election can too: KAFKA-20716) reads that transaction as aborted, its
        offsets included: its events are processed again, and from such a store they would count twice.
        Rebuilt, the store holds what its changelog holds committed."""
        rebuilt = []
        for tp, (table, store) in sorted(self.stores.items()):
            ahead = sorted((source, recorded, committed[source])
                           for source, recorded in store.input_offsets().items()
                           if source in committed and recorded > committed[source])
            if not ahead:
                continue
            log.warning("table %s: the store of %s[%d] (%s) reflects input past where its task resumes "
                        "(%s): the broker no longer has a commit the store reflects (a committed "
                        "transaction's markers lost), or the group's offsets were moved back; rebuilding it "
                        "from what its changelog holds committed",
                        table.name, tp.topic, tp.partition, self.label,
                        ", ".join(f"{source.topic}[{source.partition}] at {recorded}, resuming at {start}"
                                  for source, recorded, start in ahead))
            self.rebuild(tp)
            rebuilt.append(tp)
        return rebuilt

    def partitions(self) -> list[tuple[BaseTable, TablePartition]]:
        """A table partition over each store, for an active task to own (buffers and window state start
        empty: what was not committed is not in the stores)."""
        return [(table, TablePartition(tp.partition, store, table.value_codec))
                for tp, (table, store) in sorted(self.stores.items())]

    def store(self, table: BaseTable, number: int) -> PartitionStore | None:
        entry = self.stores.get(TP(table.changelog_topic.name, number))
        return entry[1] if entry is not None else None

    def store_of(self, tp: TP) -> PartitionStore:
        """The store of changelog partition `tp`."""
        return self.stores[tp][1]

    def followed(self) -> set[TP]:
        """The stores a follower keeps current: those of tables with a changelog of their own (a task's table
        over a source topic applies that topic in its task's order, only while the task is active), or all
        of them (`follows_sources`)."""
        every = self.follows_sources
        return {tp for tp, (table, _) in self.stores.items() if every or table.has_own_changelog}

    def position(self) -> int:
        """How far the stores have read their changelogs, summed: what the assignor compares to find the
        member whose copy of a task is caught up."""
        return sum(read_upto(store.changelog_offset()) for _, store in self.stores.values())

    def apply_source(self, topic: str, records: list[RawRecord]) -> bool:
        """Apply a run of a table's source topic to its store (data and offset in one batch: the topic is
        the table's changelog); False if this task has no store of that table."""
        for tp, (_, store) in self.stores.items():
            if tp.topic == topic:
                if records:
                    apply_batch(store, records)
                return bool(records)
        return False

    def close_sources(self) -> None:
        """Close the stores of tables over a source topic: only an active task applies that topic, in its
        order, and nothing follows it for a task that is not active."""
        for tp, (table, _) in list(self.stores.items()):
            if not table.has_own_changelog:
                self._close(tp)

    def close(self) -> None:
        """Close every store; what they hold stays on disk (the table manager's inventory says so)."""
        for tp in list(self.stores):
            self._close(tp)

    async def close_off_loop(self) -> None:
        """`close`, each store closed where it does not hold the event loop (`Stores.closed_off_loop`): what
        a settle of the standbys does beside running tasks. Each store is out of `stores` before it closes."""
        try:
            for tp in list(self.stores):
                table, store = self.stores.pop(tp)
                await self._stores.closed_off_loop(table, tp, store)
        except BaseException:  # (cancelled: the worker stops) the others closed here, none left open
            self.close()
            raise

    def _close(self, tp: TP) -> None:
        table, store = self.stores.pop(tp)
        self._stores.closed_store(table, tp, store)
