"""The table manager: which table partitions live here, in what role, and how they get there.

Roles of a partition on this worker:
- active: its source partitions are assigned here; agents read and write it. On assignment the store is
  opened (rebuilt if missing or corrupt) and its changelog replayed from the store's offset to the end
  before the source partitions are resumed (the conductor pauses them meanwhile).
- standby: the group's assignment (engine.assignment) names it a standby of this worker (`standby_replicas`
  per partition, or a warm-up before the partition moves here): we follow its changelog to keep a warm
  copy, so that on failover only the tail is replayed. The lag of each store is reported at the next
  join; once every warm-up caught up, the worker asks for a rebalance so that the partitions move.
- global tables hold every partition, recovered before the worker starts and followed from then on; tables
  over a source topic follow their active partitions, since others write that topic.

Checkpoints (driven by the conductor): `prepare` takes every partition's buffered writes, `send` puts them on
the changelog, the conductor flushes the producer, and `complete` writes them to the stores with the
changelog offsets they got. Only then are source offsets committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents import Service
from engine.assignment import Placement
from engine.errors import TransactionAborted
from engine.events import TP, RawRecord
from engine.stores import PartitionStore, StoreBackend, StoreCorrupt, open_store_backend
from engine.tables.partition import DELETED, TablePartition
from engine.tables.recovery import Progress, apply_batch, replay_to_end
from engine.topology import planned_partitions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Mapping

    from engine.assignment import Assignment
    from engine.leases import Lease
    from engine.settings import Settings
    from engine.tables.base import BaseTable
    from engine.transport.base import Admin, Producer, Transport

log = logging.getLogger(__name__)

LAG_EVERY = 1.0  # seconds between measurements of the standby stores' lag


@dataclass
class Pending:
    """One partition's writes in flight in a checkpoint."""

    table: BaseTable
    part: TablePartition
    writes: dict[Any, Any]
    meta: dict[bytes, bytes]
    closes: list[tuple[bytes, bytes]] = field(default_factory=list)  # windows closed at this checkpoint
    late: list[RawRecord] = field(default_factory=list)  # records too late for their windows
    encoded: dict[bytes, bytes | None] = field(default_factory=dict)
    last: asyncio.Future[int] | None = None  # the offset of the changelog's last record


class TableManager(Service):
    def __init__(
        self,
        tables: Collection[BaseTable],
        *,
        transport: Transport,
        settings: Settings,
        producer: Producer,
        admin_factory: Callable[[], Admin],
    ) -> None:
        super().__init__("tables")
        self.tables = {t.name: t for t in tables}
        self.transport = transport
        self.settings = settings
        self.producer = producer
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
        self.assignment: Assignment | None = None  # the group's last word on this worker
        self.request_rebalance: Callable[[], None] = lambda: None  # set by the conductor
        self.checkpoint: Callable[[], Awaitable[None]] | None = None  # set by the conductor

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
            table.bind(count, counts, writers=self.timed_topics if timed else None,
                       checkpoint=self.checkpoint)
        globals_ = [t for t in self.tables.values() if t.is_global]
        if globals_:
            numbers = {t.name: set(range(t.partition_count)) for t in globals_}
            await self._recover_and_activate(globals_, numbers)
            self._follow({TP(t.changelog_topic.name, p) for t in globals_ for p in numbers[t.name]})
        self._follower = self.transport.consumer(group_id=None)
        await self._follower.start()
        self.spawn(self._follow_loop(), "follow")

    async def on_stop(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        for table in self.tables.values():
            table.active.clear()
        for tp in list(self.stores):
            self._close(tp)

    # -- assignment ---------------------------------------------------------------------------------

    async def assign(self, numbers: set[int]) -> None:
        """Make these partition numbers active for every partitioned table; returns once recovered."""
        partitioned = [t for t in self.tables.values() if not t.is_global]
        wanted = {t.name: {n for n in numbers if n < t.partition_count} for t in partitioned}
        self._unfollow({TP(t.changelog_topic.name, n) for t in partitioned for n in wanted[t.name]})
        await self._recover_and_activate(partitioned, wanted)
        for table in partitioned:
            if not table.has_own_changelog:
                self._follow({TP(table.changelog_topic.name, n) for n in wanted[table.name]})
        self._standbys(partitioned, numbers)

    def placement(self) -> Placement:
        """What this worker brings to the group's assignor, and where it hears its share."""
        return Placement(
            standby_replicas=self.settings.standby_replicas,
            acceptable_lag=self.settings.acceptable_recovery_lag,
            stateful=any(not t.is_global for t in self.tables.values()),
            positions=self.positions,
            on_assignment=self.on_assignment,
        )

    def on_assignment(self, assignment: Assignment) -> None:
        """The group's assignment for this worker (heard before its partitions are assigned)."""
        self.assignment = assignment
        log.info("assignment: active %s, standby %s, warming up %s", sorted(assignment.active),
                 sorted(assignment.standby - assignment.warming), sorted(assignment.warming))

    def _standbys(self, partitioned: list[BaseTable], active: set[int]) -> None:
        """Follow exactly the standby partitions the assignment names; stop following (and close) the
        others that are not active here."""
        tasks = set(self.assignment.standby) if self.assignment is not None else set()
        standby = {TP(t.changelog_topic.name, n) for t in partitioned if t.has_own_changelog
                   for n in tasks - active if n < t.partition_count}
        for tp in standby:
            self._open(self.tables_by_changelog(tp.topic), tp.partition)
        self._follow(standby)
        dropped = {TP(t.changelog_topic.name, n) for t in partitioned if t.has_own_changelog
                   for n in range(t.partition_count) if n not in active} - standby
        self._unfollow(dropped)
        for tp in dropped:
            self._close(tp)
        self._clean_up(standby | {TP(t.changelog_topic.name, n) for t in partitioned for n in active})

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

    def revoke(self, numbers: set[int]) -> None:
        """These partitions are no longer active here: their writes were flushed by the checkpoint, or (lost,
        rewound) are dropped with the partitions, window state included. Their stores stay open and follow
        their changelogs until the next assignment says whether they are standbys here (`_standbys`)."""
        for table in self.tables.values():
            if table.is_global:
                continue
            for number in numbers:
                table.active.pop(number, None)
                if table.windowed is not None:
                    table.windowed.forget(number)
                tp = TP(table.changelog_topic.name, number)
                if table.has_own_changelog:  # kept warm until the next assignment says (_standbys)
                    self._follow({tp})
                else:
                    self._unfollow({tp})
                    self._close(tp)

    def tables_by_changelog(self, topic: str) -> BaseTable:
        return next(t for t in self.tables.values() if t.changelog_topic.name == topic)

    async def _recover_and_activate(self, tables: list[BaseTable], numbers: dict[str, set[int]]) -> None:
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
            counts = await replay_to_end(reader, stores, self._rebuild, self.progress, label, identities)
        finally:
            await reader.stop()
        for tp, count in counts.items():
            self.replayed[tp] = self.replayed.get(tp, 0) + count
            log.info("recovered %s[%d]: replayed %d records", tp.topic, tp.partition, count)
        for table in tables:
            for number in numbers[table.name]:
                tp = TP(table.changelog_topic.name, number)
                table.active[number] = TablePartition(number, self.stores[tp][1], table.value_codec)

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
                following = set(self.followed)
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
        warming = self.assignment.warming if self.assignment is not None else frozenset()
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
            self.assignment = None  # asked once per assignment
            self.request_rebalance()

    # -- checkpoints --------------------------------------------------------------------------------

    def prepare(self, leases: Mapping[TP, Lease], held: Collection[int] = ()) -> list[Pending]:
        """Take every partition's buffered writes (synchronously, with the offsets snapshot), but those of
        the tasks `held`. Windowed tables first advance stream time to what the partition's `leases`
        processed (also the events that did not write the table), then close and expire windows."""
        pending = []
        for table in self.tables.values():
            for part in table.active.values():
                if part.number in held:
                    continue
                closes: list[tuple[bytes, bytes]] = []
                late: list[RawRecord] = []
                if table.windowed is not None:
                    for topic in table.writers:
                        lease = leases.get(TP(topic, part.number))
                        if lease is not None:
                            table.windowed.advance(part, lease.processed_time())
                    closes = table.windowed.close_windows(part)  # before expiry can delete them
                    table.windowed.expire(part)
                    if table.windowed.late_topic is not None:
                        late = table.windowed.late_records.pop(part.number, [])
                if part.buffer or part.meta or closes or late:
                    pending.append(Pending(table, part, part.take_buffer(), part.take_meta(), closes, late))
        return pending

    async def send(self, pending: list[Pending]) -> dict[int, BaseException]:
        """Put the writes on the changelogs (deletes as tombstones); returns the tasks whose transactions
        took no more records (aborted by the broker), whose other writes are not sent."""
        failed: dict[int, BaseException] = {}
        for item in pending:
            if item.part.number in failed:
                continue
            try:
                await self._send(item)
            except TransactionAborted as exc:
                failed[item.part.number] = exc
        return failed

    async def _send(self, item: Pending) -> None:
        table = item.table
        topic = table.changelog_topic.name
        encode_value = table.value_codec.encode
        producer = self.producer.for_partition(item.part.number)  # the task's transaction
        for key, value in item.writes.items():
            item.encoded[table.locate(key)[0]] = None if value is DELETED else encode_value(value)
        item.encoded.update(item.meta)
        if item.encoded:
            item.last = await producer.send_batch(topic, item.part.number, list(item.encoded.items()))
        if item.closes:
            closed = table.windowed.closed_topic.name  # type: ignore[union-attr]  # closes imply both
            await producer.send_batch(closed, item.part.number, item.closes)
        if item.late:
            late = table.windowed.late_topic.name  # type: ignore[union-attr]  # late implies both
            for record in item.late:
                await producer.send(late, record.key, record.value, headers=list(record.headers),
                                    timestamp_ms=record.timestamp)

    def complete(self, pending: list[Pending]) -> None:
        """After the producer flushed: write each batch to its store with the changelog offset it got."""
        for item in pending:
            if item.last is not None:  # (else only closed windows or late records were sent)
                assert item.last.done()
                item.part.store.write(item.encoded, item.last.result())
            if item.table.windowed is not None:
                item.table.windowed.stored(item.part, item.writes)
            item.part.flushed()

    def drop(self, pending: list[Pending], numbers: Collection[int]) -> list[Pending]:
        """The writes of partitions `numbers` did not commit and are dropped (their events are processed
        again); returns the others."""
        for item in pending:
            if item.part.number in numbers:
                item.part.flushed()
        return [item for item in pending if item.part.number not in numbers]

    def abort(self, pending: list[Pending]) -> None:
        """The flush failed: put the writes back under newer ones, to be sent at the next checkpoint."""
        for item in pending:
            merged = dict(item.writes)
            merged.update(item.part.buffer)
            item.part.buffer = merged
            item.part.meta = {**item.meta, **item.part.meta}
            item.part.flushed()
            windowed = item.table.windowed
            if windowed is not None:
                if item.closes:
                    windowed.unsent.setdefault(item.part.number, []).extend(item.closes)
                if item.late:
                    windowed.late_records[item.part.number] = [
                        *item.late, *windowed.late_records.get(item.part.number, [])]
