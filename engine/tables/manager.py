"""The table manager: the stores of the tables on this worker, and how they get current.

It opens, rebuilds, closes and cleans up stores, replays changelogs into them and follows changelogs; the
tasks (engine.tasks) say which partitions are wanted in which role:
- an active task's: on assignment the store is opened (rebuilt if missing or corrupt) and its changelog
  replayed from the store's offset to the end (`activate`) before the task's partitions are resumed; the
  task then owns the table partition (buffers, window state) until it closes (`release`).
- a standby task's: the group's assignment (engine.assignor) names it a standby of this worker
  (`standby_replicas` per partition, or a warm-up before the partition moves here): its changelog is
  followed to keep a warm copy, so that on failover only the tail is replayed. The lag of each store is
  reported at the next join; once every warm-up caught up, the worker asks for a rebalance so that the
  partitions move.
- global tables hold every partition, recovered before the worker starts and followed from then on; tables
  over a source topic follow their active partitions, since others write that topic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from agents import Service
from engine.events import TP
from engine.stores import PartitionStore, StoreBackend, StoreCorrupt, open_store_backend
from engine.tables.partition import TablePartition
from engine.tables.recovery import Progress, apply_batch, replay_to_end
from engine.topics import planned_partitions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Mapping

    from engine.events import RawRecord
    from engine.settings import Settings
    from engine.tables.base import BaseTable
    from engine.transport.base import Admin, Transport

log = logging.getLogger(__name__)

LAG_EVERY = 1.0  # seconds between measurements of the standby stores' lag


class TableManager(Service):
    def __init__(
        self,
        tables: Collection[BaseTable],
        *,
        transport: Transport,
        settings: Settings,
        admin_factory: Callable[[], Admin],
        owner: object = None,
    ) -> None:
        super().__init__("tables")
        self.owner = owner  # the worker the tables are bound to (engine.scope)
        self.tables = {t.name: t for t in tables}
        self.transport = transport
        self.settings = settings
        self._admin_factory = admin_factory
        self._backends: dict[str, StoreBackend] = {}
        self.stores: dict[TP, tuple[BaseTable, PartitionStore]] = {}  # keyed by changelog partition
        self.followed: set[TP] = set()
        self.progress = Progress()
        self.replayed: dict[TP, int] = {}
        self._follow_changed = asyncio.Event()
        # Stores on disk that are not open: their changelog offset and when they were last written.
        self.on_disk: dict[TP, tuple[int | None, float]] = {}
        self._next_lag = 0.0
        self._follower: Any = None
        # Topics whose events write windowed tables on their topic's time: the conductor records, per batch,
        # the largest event time of these topics' partitions, and `prepare` advances stream time with it.
        self.timed_topics: set[str] = set()
        self.warming: frozenset[int] = frozenset()  # the tasks warming up here (the last assignment's)
        self.request_rebalance: Callable[[], None] = lambda: None  # set by the worker
        self.checkpoint: Callable[[], Awaitable[dict[TP, int]]] | None = None  # set by the worker
        self.query: Callable[[BaseTable, Any], Awaitable[Any]] | None = None  # set by the worker (engine.web)

    # -- stores -------------------------------------------------------------------------------------

    def _backend(self, table: BaseTable) -> StoreBackend:
        url = table.store_url or self.settings.store
        backend = self._backends.get(url)
        if backend is None:
            root = self.settings.app_dir
            backend = self._backends[url] = open_store_backend(url, root, self.settings.store_memory)
        return backend

    def _open(self, table: BaseTable, number: int) -> PartitionStore:
        tp = TP(table.changelog_topic.name, number)
        if tp in self.stores:
            return self.stores[tp][1]
        self.on_disk.pop(tp, None)
        backend = self._backend(table)
        try:
            store = backend.open(table.name, number)
        except StoreCorrupt as exc:
            log.warning("%s; deleting it and rebuilding from the changelog", exc)
            backend.destroy(table.name, number)
            store = backend.open(table.name, number)
        self.stores[tp] = (table, store)
        return store

    def _rebuild(self, tp: TP) -> PartitionStore:
        table, store = self.stores.pop(tp)
        store.close()
        self._backend(table).destroy(table.name, tp.partition)
        return self._open(table, tp.partition)

    def _close(self, tp: TP) -> None:
        entry = self.stores.pop(tp, None)
        if entry is not None:
            table, store = entry
            if not table.is_global:
                self.on_disk[tp] = (store.changelog_offset(), time.time())
            store.close()

    # -- lifecycle ----------------------------------------------------------------------------------

    async def on_start(self) -> None:
        admin = self._admin_factory()
        try:
            counts = await admin.describe_topics()
        finally:
            await admin.close()
        for table in self.tables.values():
            if not table.is_global:  # what a restarted worker holds: the assignor prefers it for these
                for number, kept in self._backend(table).stored_partitions(table.name).items():
                    self.on_disk[TP(table.changelog_topic.name, number)] = kept
            count = counts.get(table.changelog_topic.name) or planned_partitions(table.changelog_topic,
                                                                                  self.settings)
            timed = table.windowed is not None and table.windowed.timestamp is None
            table.bind(self.owner, count, counts, writers=self.timed_topics if timed else None,
                       checkpoint=self.checkpoint, query=self.query, settings=self.settings)
        globals_ = [t for t in self.tables.values() if t.is_global]
        if globals_:
            numbers = {t.name: set(range(t.partition_count)) for t in globals_}
            await self._recover(globals_, numbers)
            for table in globals_:  # every partition, read by every worker's agents
                for number in numbers[table.name]:
                    store = self.stores[TP(table.changelog_topic.name, number)][1]
                    table.active[number] = TablePartition(number, store, table.value_codec)
            self._follow({TP(t.changelog_topic.name, p) for t in globals_ for p in numbers[t.name]})
        self._follower = self.transport.consumer(group_id=None)
        await self._follower.start()
        self.spawn(self._follow_loop(), "follow")

    async def on_stop(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        for table in self.tables.values():
            table.active.clear()
            table.unbind(self.owner)
        for tp in list(self.stores):
            self._close(tp)

    # -- assignment ---------------------------------------------------------------------------------

    async def activate(self, numbers: Collection[int], sources: Mapping[TP, int] | None = None,
                       ) -> dict[int, list[tuple[BaseTable, TablePartition]]]:
        """The table partitions of the tasks `numbers`, recovered (their stores opened, rebuilt if corrupt,
        and replayed to the end of their changelogs; a standby's store is open already and replays only the
        tail): per task, for the task to own. A table over a source topic is replayed only up to where its
        task starts reading that topic (`sources`): the rest comes in the task's timestamp order."""
        partitioned = [t for t in self.tables.values() if not t.is_global]
        wanted = {t.name: {n for n in numbers if n < t.partition_count} for t in partitioned}
        self._unfollow({TP(t.changelog_topic.name, n) for t in partitioned for n in wanted[t.name]})
        await self._recover(partitioned, wanted, until=sources or {})
        parts: dict[int, list[tuple[BaseTable, TablePartition]]] = {n: [] for n in numbers}
        for table in partitioned:
            for number in sorted(wanted[table.name]):
                store = self.stores[TP(table.changelog_topic.name, number)][1]
                parts[number].append((table, TablePartition(number, store, table.value_codec)))
        return parts

    def settle(self, active: Collection[int], standby: Collection[int]) -> dict[int, frozenset[TP]]:
        """After an assignment: follow exactly the stores of the `standby` tasks, close the others that are
        not `active` here, and clean up old stores on disk; returns each standby task's changelogs."""
        partitioned = [t for t in self.tables.values() if not t.is_global and t.has_own_changelog]
        tasks = {n: frozenset(TP(t.changelog_topic.name, n) for t in partitioned if n < t.partition_count)
                 for n in set(standby) - set(active)}
        followed = {tp for changelogs in tasks.values() for tp in changelogs}
        for tp in followed:
            self._open(self.tables_by_changelog(tp.topic), tp.partition)
        self._follow(followed)
        dropped = {TP(t.changelog_topic.name, n) for t in partitioned
                   for n in range(t.partition_count) if n not in active} - followed
        self._unfollow(dropped)
        for tp in dropped:
            self._close(tp)
        every = [t for t in self.tables.values() if not t.is_global]
        self._clean_up(followed | {TP(t.changelog_topic.name, n) for t in every for n in active})
        return tasks

    def source_appliers(self) -> dict[str, Callable[[int, list[RawRecord]], bool]]:
        """For each partitioned table over a source topic: how its task applies a run of that topic's records
        to its partition (to the store, data and offset in one batch: the topic is the table's changelog);
        False if the partition is not active here."""
        return {t.changelog_topic.name: partial(self._apply_source, t) for t in self.tables.values()
                if not t.is_global and not t.has_own_changelog}

    @staticmethod
    def _apply_source(table: BaseTable, number: int, records: list[RawRecord]) -> bool:
        part = table.active.get(number)
        if part is None or not records:
            return False
        apply_batch(part.store, records)
        return True

    def position(self, changelogs: Collection[TP]) -> int:
        """How far these stores have read their changelogs, summed."""
        return sum(0 if (offset := self.stores[tp][1].changelog_offset()) is None else offset + 1
                   for tp in changelogs if tp in self.stores)

    def positions(self) -> dict[int, int]:
        """Per task this worker has open stores of (active or standby): how far they have read their
        changelogs, summed over the tables (what the assignor compares to find who is caught up)."""
        positions: dict[int, int] = {}
        opened = [(tp, store.changelog_offset()) for tp, (table, store) in self.stores.items()
                  if not table.is_global]
        for tp, applied in [*opened, *((tp, offset) for tp, (offset, _) in self.on_disk.items())]:
            read = 0 if applied is None else applied + 1
            positions[tp.partition] = positions.get(tp.partition, 0) + read
        return positions

    def _clean_up(self, keep: set[TP]) -> None:
        """Delete the stores kept here of partitions that are neither active nor standby here and were not
        written for `state_cleanup_delay` (Kafka Streams' state.cleanup.delay.ms): state stays bounded when
        partitions move for good, and a partition that comes back soon still finds its store."""
        idle = self.settings.state_cleanup_delay.total_seconds()
        now = time.time()
        for tp, (_, written) in list(self.on_disk.items()):
            if tp not in keep and tp not in self.stores and now - written > idle:
                table = self.tables_by_changelog(tp.topic)
                self._backend(table).destroy(table.name, tp.partition)
                del self.on_disk[tp]
                log.info("deleted the store of %s[%d]: not assigned here for %.0fs", tp.topic, tp.partition,
                         now - written)

    def release(self, numbers: Collection[int]) -> None:
        """The tasks `numbers` closed here (their table partitions went with them). Their stores stay open and
        follow their changelogs until the next assignment says whether they are standbys here (`settle`);
        those of tables over a source topic close."""
        for table in self.tables.values():
            if table.is_global:
                continue
            for number in numbers:
                tp = TP(table.changelog_topic.name, number)
                if tp not in self.stores:
                    continue  # never opened here (the task closed while it was set up)
                if table.has_own_changelog:
                    self._follow({tp})
                else:
                    self._unfollow({tp})
                    self._close(tp)

    def standby_store(self, table: BaseTable, number: int) -> PartitionStore | None:
        """The store of a table partition this worker keeps as a standby (follows its changelog), or None:
        what `?stale=ok` queries read."""
        tp = TP(table.changelog_topic.name, number)
        entry = self.stores.get(tp) if tp in self.followed and not table.is_global else None
        return entry[1] if entry is not None else None

    def tables_by_changelog(self, topic: str) -> BaseTable:
        return next(t for t in self.tables.values() if t.changelog_topic.name == topic)

    async def _recover(self, tables: list[BaseTable], numbers: dict[str, set[int]],
                       until: Mapping[TP, int] | None = None) -> None:
        stores = {
            TP(t.changelog_topic.name, n): self._open(t, n) for t in tables for n in sorted(numbers[t.name])
        }
        if not stores:
            return
        admin = self._admin_factory()
        try:
            identities = await admin.topic_ids({tp.topic for tp in stores})
        finally:
            await admin.close()
        reader = self.transport.consumer(group_id=None)
        await reader.start()
        try:
            label = ", ".join(sorted({tp.topic for tp in stores}))
            counts = await replay_to_end(reader, stores, self._rebuild, self.progress, label, identities,
                                         until)
        finally:
            await reader.stop()
        for tp, count in counts.items():
            self.replayed[tp] = self.replayed.get(tp, 0) + count
            log.info("recovered %s[%d]: replayed %d records", tp.topic, tp.partition, count)

    # -- following (standbys, global tables, source-topic tables) -----------------------------------

    def _follow(self, tps: set[TP]) -> None:
        if tps - self.followed:
            self.followed |= tps
            self._follow_changed.set()

    def _unfollow(self, tps: set[TP]) -> None:
        if tps & self.followed:
            self.followed -= tps
            self._follow_changed.set()

    async def _follow_loop(self) -> None:
        reader = self._follower
        following: set[TP] = set()
        while True:
            if self._follow_changed.is_set() or following != self.followed:
                self._follow_changed.clear()
                following = {tp for tp in self.followed if tp in self.stores}
                reader.assign(following)
                for tp in following:
                    offset = self.stores[tp][1].changelog_offset()
                    reader.seek(tp, 0 if offset is None else offset + 1)
            if not following:
                await self._follow_changed.wait()
                continue
            batches = await reader.getmany(0.5, 10_000)
            for tp, records in batches.items():
                key = TP(tp[0], tp[1])
                if key in self.followed and key in self.stores and records:
                    apply_batch(self.stores[key][1], records)
            await self._measure_lag(reader, following)

    async def _measure_lag(self, reader: Any, following: set[TP]) -> None:
        """Every LAG_EVERY seconds, while the assignment has warm-ups: their stores' lag and, once every
        warm-up is within the acceptable lag, a request for a rebalance (KIP-441's probing rebalance,
        asked for by the member that caught up)."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_lag:
            return
        self._next_lag = loop.time() + LAG_EVERY
        warming = self.warming
        standby = {tp for tp in following if tp.partition in warming}
        if not standby:
            return
        ends = await reader.offsets(standby)
        behind = 0
        for tp in standby:
            applied = self.stores[tp][1].changelog_offset() if tp in self.stores else None
            behind = max(behind, ends[tp][1] - (0 if applied is None else applied + 1))
        if behind <= self.settings.acceptable_recovery_lag:
            log.info("warm-up replicas of partitions %s caught up; asking the group to rebalance",
                     sorted(warming))
            self.warming = frozenset()  # asked once per assignment
            self.request_rebalance()
