"""The table manager: what is app-wide about the tables on this worker.

Each task owns the stores of its table partitions (engine.tables.state.StateManager, held by the task: an
active task restores them, a standby task's follow their changelogs; the task manager hands them over when a
task changes role). What is not one task's lives here:
- binding the app's tables to this worker at start (partition counts, the stream-time topics, queries);
- the store backends, through which state managers open, rebuild and close stores, and the inventory of
  the stores kept on disk that are not open (what a restarted worker holds, reported to the assignor; those
  not assigned here for `state_cleanup_delay` are deleted);
- restoring the stores of tasks being set up, several tasks in one pass over their changelogs;
- the follower: one consumer keeping the stores of the state managers it is given current (standby tasks,
  tasks between an assignment's revoke and the next assignment, the global tables), and, while the
  assignment has warm-ups, their lag, asking for the rebalance that moves them once caught up;
- the global tables, whose every partition is recovered before the worker starts and followed from then on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from agents import Service
from engine.errors import BrokerUnavailable, OffsetOutOfRange, StoreCorrupt
from engine.events import TP
from engine.stores import PartitionStore, StoreBackend, open_store_backend
from engine.tables.partition import TablePartition
from engine.tables.recovery import Progress, apply_batch, replay_to_end, start_positions
from engine.tables.state import StateManager, read_upto

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence

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
        request_rebalance: Callable[[], None],
    ) -> None:
        """`request_rebalance`: asks the group for a rebalance (once warm-up replicas caught up)."""
        super().__init__("tables")
        self.tables = {t.name: t for t in tables}
        self.transport = transport
        self.settings = settings
        self._admin_factory = admin_factory
        self._backends: dict[str, StoreBackend] = {}
        self.progress = Progress()
        self.replayed: dict[TP, int] = {}
        # Stores on disk that are not open: their changelog offset and when they were last written.
        self.on_disk: dict[TP, tuple[int | None, float]] = {}
        self.globals = StateManager("global tables", self, follows_sources=True)
        # What the follower keeps current: each changelog partition with the state manager whose store it is
        # (the store is the state manager's of the moment: a rebuilt one replaces it there).
        self.followed: dict[TP, StateManager] = {}
        self._follow_changed = asyncio.Event()
        self._next_lag = 0.0
        self._follower: Any = None
        self.warming: frozenset[int] = frozenset()  # the tasks warming up here (the last assignment's)
        self.request_rebalance = request_rebalance

    @property
    def partitioned(self) -> list[BaseTable]:
        """The tables split by task (all but the global ones)."""
        return [t for t in self.tables.values() if not t.is_global]

    def store_memory(self) -> dict[str, int]:
        """Memory the stores of every backend hold outside Python's objects, by part (StoreBackend)."""
        held: dict[str, int] = {}
        for backend in self._backends.values():
            for part, size in backend.memory_bytes().items():
                held[part] = held.get(part, 0) + size
        return held

    def task_partitions(self, number: int) -> list[tuple[BaseTable, int]]:
        """Task `number`'s partition of each partitioned table that has one."""
        return [(t, number) for t in self.partitioned if number < t.partition_count]

    # -- stores (engine.tables.state.Stores) --------------------------------------------------------

    def _backend(self, table: BaseTable) -> StoreBackend:
        url = table.store_url or self.settings.store
        backend = self._backends.get(url)
        if backend is None:
            root = self.settings.app_dir
            backend = self._backends[url] = open_store_backend(url, root, self.settings.store_memory)
        return backend

    def open_store(self, table: BaseTable, number: int) -> PartitionStore:
        self._claim(table, number)
        return table.store_for(_open(self._backend(table), table, number), number)

    async def opened(self, wanted: Sequence[tuple[BaseTable, int]]
                     ) -> AsyncIterator[tuple[BaseTable, int, PartitionStore]]:
        """The stores of `wanted` opened one by one, as `open_store` opens them, those of a backend that
        waits on the disk in a thread: a task set up while others run leaves the event loop to them. Every
        one is taken out of the inventory of stores kept on disk first, so that a clean-up meanwhile (another
        set-up's) never deletes one about to open."""
        for table, number in wanted:
            self._claim(table, number)
        for table, number in wanted:
            backend = self._backend(table)
            store = (await _open_in_thread(backend, table, number) if backend.blocking
                     else _open(backend, table, number))
            yield table, number, table.store_for(store, number)

    def _claim(self, table: BaseTable, number: int) -> None:
        """The store of `table`'s partition `number` is opened: out of the inventory of those kept on disk."""
        if not table.is_global:  # (the inventory is of partitioned tables' stores)
            self.on_disk.pop(TP(table.changelog_topic.name, number), None)

    def destroy_store(self, table: BaseTable, number: int) -> None:
        self._backend(table).destroy(table.name, number)

    def closed_store(self, table: BaseTable, tp: TP, store: PartitionStore) -> None:
        self._closing(table, tp, store)
        store.close()

    async def closed_off_loop(self, table: BaseTable, tp: TP, store: PartitionStore) -> None:
        """`closed_store`, a store of a backend that waits on the disk closed in a thread (a RocksDB store
        flushes its memtables as it closes; cancelled meanwhile, the close goes on to its end)."""
        self._closing(table, tp, store)
        if self._backend(table).blocking:
            await asyncio.shield(asyncio.to_thread(store.close))
        else:
            store.close()

    def _closing(self, table: BaseTable, tp: TP, store: PartitionStore) -> None:
        """A store about to close: no longer followed, and in the inventory of stores kept on disk."""
        self._unfollow_stores({tp: store})
        if not table.is_global:
            self.on_disk[tp] = (store.changelog_offset(), time.time())

    # -- lifecycle ----------------------------------------------------------------------------------

    async def on_start(self) -> None:
        """(The worker bound the tables to itself before: their partition counts are known.)"""
        for table in self.partitioned:  # what a restarted worker holds: the assignor prefers it for these
            for number, kept in self._backend(table).stored_partitions(table.name).items():
                self.on_disk[TP(table.changelog_topic.name, number)] = kept
        globals_ = [t for t in self.tables.values() if t.is_global]
        if globals_:
            self.globals.open((t, n) for t in globals_ for n in range(t.partition_count))
            await self.restore([self.globals])
            for table, part in self.globals.partitions():  # every partition, read by every worker's agents
                table.attach(part)
            self.follow(self.globals)
        # Never resets by itself: a followed store below its log's start is rebuilt (_refit), not moved on.
        self._follower = self.transport.consumer(group_id=None, auto_offset_reset="none")
        await self._follower.start()
        self.spawn(self._follow_loop(), "follow")

    async def on_stop(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        for table in self.tables.values():
            if table.is_global:
                table.active.clear()
        self.globals.close()

    # -- restoring ----------------------------------------------------------------------------------

    async def restore(self, states: Collection[StateManager], until: Mapping[TP, int] | None = None) -> None:
        """Replay the changelogs of these state managers' stores from where each store is to the end, in one
        pass (a store that does not fit its changelog is rebuilt). A table over a source topic is replayed
        only up to where its task starts reading that topic (`until`): the rest comes in the task's
        timestamp order."""
        stores = {tp: store for state in states for tp, (_, store) in state.stores.items()}
        if not stores:
            return
        self._unfollow_stores(stores)
        owners = {tp: state for state in states for tp in state.stores}
        admin = self._admin_factory()
        try:
            identities = await admin.topic_ids({tp.topic for tp in stores})
        finally:
            await admin.close()
        reader = self.transport.consumer(group_id=None, auto_offset_reset="none")  # (a gap: rebuild)
        await reader.start()
        try:
            label = ", ".join(sorted({tp.topic for tp in stores}))
            counts = await replay_to_end(reader, stores, lambda tp: owners[tp].rebuild(tp), self.progress,
                                         label, identities, until or {}, self._table_names())
        finally:
            await reader.stop()
        for tp, count in counts.items():
            self.replayed[tp] = self.replayed.get(tp, 0) + count
            log.info("recovered %s[%d]: replayed %d records", tp.topic, tp.partition, count)

    def clean_up(self, keep: Collection[TP]) -> None:
        """Delete the stores kept here of partitions that are neither active nor standby here (`keep`) and
        were not written for `state_cleanup_delay` (Kafka Streams' state.cleanup.delay.ms): state stays
        bounded when partitions move for good, and a partition that comes back soon still finds its store."""
        idle = self.settings.state_cleanup_delay.total_seconds()
        now = time.time()
        for tp, (_, written) in list(self.on_disk.items()):
            if tp not in keep and now - written > idle:
                table = self.tables_by_changelog(tp.topic)
                self._backend(table).destroy(table.name, tp.partition)
                del self.on_disk[tp]
                log.info("deleted the store of %s[%d]: not assigned here for %.0fs", tp.topic, tp.partition,
                         now - written)

    def kept_positions(self) -> dict[int, int]:
        """Per task, how far the stores kept on disk (not open) had read their changelogs, summed."""
        positions: dict[int, int] = {}
        for tp, (applied, _) in self.on_disk.items():
            positions[tp.partition] = positions.get(tp.partition, 0) + read_upto(applied)
        return positions

    def _table_names(self) -> dict[str, str]:
        """Changelog topic to table name, for the logs."""
        return {t.changelog_topic.name: t.name for t in self.tables.values()}

    async def follow_lags(self) -> dict[TP, int | None]:
        """Records each followed changelog partition (a standby's, a task's between assignments; not a global
        table's) has yet to apply, as of the follower's last fetch (None: not fetched yet): how warm a
        standby is, on the app's page."""
        if self._follower is None:
            return {}
        followed = [tp for tp, state in self.followed.items() if state is not self.globals]
        return {tp: await self._follower.lag(tp) for tp in followed}

    def tables_by_changelog(self, topic: str) -> BaseTable:
        return next(t for t in self.tables.values() if t.changelog_topic.name == topic)

    # -- following (standbys, tasks between assignments, global tables) -----------------------------

    def follow(self, state: StateManager) -> None:
        """Keep the stores of `state` current (those with a changelog of their own) until `unfollow`."""
        tps = state.followed()
        if tps - self.followed.keys():
            self._follow_change()
        self.followed.update(dict.fromkeys(tps, state))

    def unfollow(self, tps: Collection[TP]) -> None:
        """Stop following these changelog partitions (their stores are restored, closed, or an active task's
        own from now on): nothing read of them is applied after this call."""
        if any(tp in self.followed for tp in tps):
            for tp in tps:
                self.followed.pop(tp, None)
            self._follow_change()

    def _unfollow_stores(self, stores: Mapping[TP, PartitionStore]) -> None:
        """Stop following these stores' partitions, but one followed with another store (a table over a
        source topic and the global table over the same topic have the same changelog partitions, and only
        the global table's are followed)."""
        self.unfollow([tp for tp, store in stores.items()
                       if (state := self.followed.get(tp)) is None
                       or (entry := state.stores.get(tp)) is None or entry[1] is store])

    def _follow_change(self) -> None:
        """The partitions followed change: the follow loop reassigns its reader (waking it from its wait)."""
        self._follow_changed.set()
        if self._follower is not None:
            self._follower.wakeup()

    async def _follow_loop(self) -> None:
        reader = self._follower
        following: set[TP] = set()
        while True:
            if self._follow_changed.is_set() or following != self.followed.keys():
                self._follow_changed.clear()
                following = set(self.followed)
                reader.assign(following)
                for tp in following:
                    reader.seek(tp, read_upto(self._store(tp).changelog_offset()))
            if not following:
                await self._follow_changed.wait()
                continue
            try:
                batches = await reader.getmany(None, 10_000)  # (until records come, or a follow change)
            except OffsetOutOfRange as exc:
                await self._refit(reader, exc.offsets)
                continue
            for tp, records in batches.items():
                key = TP(tp[0], tp[1])
                if key in self.followed and records:  # (unfollowed while it fetched: not applied)
                    apply_batch(self._store(key), records)
            await self._measure_lag(reader, following)

    def _store(self, tp: TP) -> PartitionStore:
        """The store a followed changelog partition is applied to."""
        return self.followed[tp].store_of(tp)

    async def _refit(self, reader: Any, trimmed: Mapping[TP, int]) -> None:
        """Records were deleted below followed stores (DeleteRecords, retention): rebuild them from what their
        logs hold, by recovery's rule (a standby that read on from the new start would keep values the
        deleted records overwrote or deleted, and serve them after a failover)."""
        stores = {tp: self._store(tp) for tp in trimmed if tp in self.followed}

        def rebuild(tp: TP) -> PartitionStore:
            state = self.followed.get(tp)
            if state is None or state.store_of(tp) is not stores[tp]:
                return stores[tp]  # unfollowed (or rebuilt) while the offsets were asked: its holder fits it
            store = state.rebuild(tp)
            if state is self.globals:  # every worker's agents read these: over the new store from now on
                table = self.tables_by_changelog(tp.topic)
                table.attach(TablePartition(tp.partition, store, table.value_codec))
            return store

        starts, _, _ = await start_positions(reader, stores, rebuild, {}, tables=self._table_names())
        for tp, start in starts.items():
            if tp in self.followed:  # (what is not was unassigned: the loop assigns anew)
                reader.seek(tp, start)

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
        try:
            ends = await reader.offsets(standby)
        except BrokerUnavailable as exc:  # (a broker restarting: measured again in LAG_EVERY seconds)
            log.debug("warm-up lag not measured: %s", exc)
            return
        behind = 0
        for tp in standby:
            store = self._store(tp) if tp in self.followed else None
            applied = store.changelog_offset() if store is not None else None
            behind = max(behind, ends[tp][1] - (0 if applied is None else applied + 1))
        if behind <= self.settings.acceptable_recovery_lag:
            log.info("warm-up replicas of partitions %s caught up; asking the group to rebalance",
                     sorted(warming))
            self.warming = frozenset()  # asked once per assignment
            self.request_rebalance()


async def _open_in_thread(backend: StoreBackend, table: BaseTable, number: int) -> PartitionStore:
    """`_open` in a thread. Cancelled meanwhile (the worker stops), the open goes on in its thread: the
    store it opens is closed then, not left holding RocksDB's lock for the next open of it."""
    opening = asyncio.ensure_future(asyncio.to_thread(_open, backend, table, number))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_opened)
        raise


def _close_opened(opening: asyncio.Future[PartitionStore]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


def _open(backend: StoreBackend, table: BaseTable, number: int) -> PartitionStore:
    """A store opened, rebuilt empty if the backend finds it corrupt (recovery replays its changelog)."""
    try:
        return backend.open(table.name, number)
    except StoreCorrupt as exc:
        log.warning("%s; deleting it and rebuilding from the changelog", exc)
        backend.destroy(table.name, number)
        return backend.open(table.name, number)
