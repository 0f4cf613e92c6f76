"""Where a table's keys live: each key's partition by hash, the partition a write or read goes to on this
worker, and the rules of where a write may go (the routing interface the table's faces use: windowed,
sessions, sliding, versioned, the joins' buffers).

A write lands in the partition of the current event. Writing the event's own key is always right; another
key must hash to the same partition, or the write fails and says to `group_by` first. Outside an agent
(a timer), a key's partition is its hash. Reads and writes need the partition to be active on this worker
(and recovered).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

from engine.errors import (
    ConfigError,
    KeyNotInPartition,
    PartitionMigrated,
    PartitionNotLocal,
    PartitionNotReady,
    TableError,
    TopologyError,
)
from engine.partitioner import CACHED_KEYS, partition_for
from engine.streams.current import current_event
from engine.tables.keys import stored_key

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, MutableMapping

    from engine.codecs import Codec
    from engine.events import Event
    from engine.scope import PerWorker
    from engine.tables.binding import Binding, TopicSet
    from engine.tables.partition import TablePartition
    from engine.topics import Topic
    from engine.windows import WindowKind

log = logging.getLogger(__name__)


class TableRouting:
    """The routing half of a table (engine.tables.base.BaseTable, which sets what is declared here)."""

    is_global: ClassVar[bool]  # every worker holds every partition (no routing by event)
    name: str
    app_id: str
    window: WindowKind | None
    changelog_topic: Topic
    plain_key_codec: Codec
    # The partitions active on the worker the running code belongs to (engine.tables.binding).
    active: MutableMapping[int, TablePartition]
    # Each key's (bytes, partition) as `locate_new` found it: read directly by the faces' per-event loops
    # (`located.get(key) or locate_new(key)`, one dict look-up, no call, for a key seen before).
    located: dict[Any, tuple[bytes, int]]
    _bindings: PerWorker[Binding]
    _count: int | None
    _topic_counts: Mapping[str, int]
    _writers: TopicSet  # topics whose events wrote this table (each checked once)
    _warned_codec: bool

    @property
    def writers(self) -> Collection[str]:
        """The topics whose events wrote this table since the worker started."""
        return self._writers

    def _new_writer(self, topic: str) -> None:
        """Once per topic whose events write this table: an event of partition p writes table partition p,
        so the topic must have as many partitions as the table (else keys land where reads and recovery do
        not look, or in partitions the table does not have)."""
        self._check_copartitioned(topic)
        self._writers.add(topic)
        binding = self._bindings.inside()
        if binding is not None and binding.registry is not None:
            binding.registry.add(topic)

    def _check_copartitioned(self, topic: str) -> None:
        found = self._topic_counts.get(topic)
        if found is not None and found != self.partition_count:
            raise TopologyError(
                f"table {self.name!r} has {self.partition_count} partitions (topic "
                f"{self.changelog_topic.name!r}) but is written from events of topic {topic!r}, which has "
                f"{found}: a table and every topic whose events write it must have the same number of "
                f"partitions; re-key the stream with group_by(...) (its repartition topic gets "
                f"{self.partition_count}), or recreate {topic!r} with {self.partition_count} partitions")

    @property
    def partition_count(self) -> int:
        if self._count is None:
            raise TableError(f"table {self.name!r} is not attached to a running worker")
        return self._count

    def locate_key(self, key: Any) -> tuple[bytes, int]:
        """(the key's bytes, its partition by hash), for a key without a window (cached)."""
        return self.located.get(key) or self.locate_new(key)

    def locate(self, key: Any) -> tuple[bytes, int]:
        """(store key, partition by hash). A windowed key (key, start) lives in the partition of its key
        alone: the key is located (cached) and the window start appended to its bytes."""
        if self.window is None:
            return self.located.get(key) or self.locate_new(key)
        inner, number = self.located.get(key[0]) or self.locate_new(key[0])
        return stored_key(inner, key), number

    def locate_new(self, key: Any) -> tuple[bytes, int]:
        """Encode a key (without its window) and hash it to its partition; cached, since the same keys come
        back all the time (and only keys: a windowed table's windows would fill the cache with one entry per
        window, each encoded and hashed anew)."""
        encoded = self.plain_key_codec.encode(key)
        if encoded is None:
            raise TableError(f"table {self.name!r}: keys cannot be None")
        found = (encoded, partition_for(encoded, self.partition_count))
        if len(self.located) >= CACHED_KEYS:
            self.located.clear()
        self.located[key] = found
        return found

    def local_partition(self, number: int, key: Any) -> TablePartition:
        """Partition `number` of the table on this worker; PartitionNotLocal (or PartitionNotReady) naming
        `key` and where it is when this worker does not hold it."""
        part = self.active.get(number)
        if part is None:
            event = current_event()
            if event is not None and not self.is_global:
                # The event's own partition may not exist in the table at all: a topology error that stops
                # the worker with the record uncommitted, never a dead letter per record.
                self._check_copartitioned(event.tp.topic)
            raise self._not_here(number, key)
        return part

    def _not_here(self, number: int, key: Any) -> PartitionNotLocal:
        """Why partition `number` is not active here: not ready yet (retry), or another worker's."""
        where = f"table {self.name!r}: key {key!r} is in partition {number}"
        binding = self._bindings.current()
        if binding is None:
            return PartitionNotLocal(f"{where}, and the table is not attached to a running worker")
        assigned = binding.assigned() if binding.assigned is not None else None
        if self.is_global or (assigned is not None and assigned.get(number) is False):
            return PartitionNotReady(f"{where}, which this worker is still restoring from its changelog: "
                                     "retry in a moment (GET /ready answers 200 once it is ready)")
        if assigned is not None and not assigned:
            return PartitionNotReady(f"{where}, and this worker has no partitions assigned yet (it is "
                                     "starting, or partitions are moving between workers): retry in a moment")
        return PartitionNotLocal(f"{where}, which another worker owns: `await table.query(key)` asks it (or "
                                 "GET /tables/{table}/{key} on any worker)")

    # The routing interface of the table's faces (windowed, sessions, sliding, versioned, joins' buffers):
    # the two routes take a key without its window (`own`) and return its partition here with the key's
    # bytes: a plain table's store key, or what a windowed table appends window starts to.

    def route_write(self, own: Any, event: Event | None) -> tuple[TablePartition, bytes]:
        """Where a write of `own` goes: the current event's partition (checked: the key must hash there, the
        partition must still be this worker's), or the key's for a write outside an event (`event`: the
        current event, which the caller has at hand)."""
        encoded, number = self.located.get(own) or self.locate_new(own)
        if event is not None and event.lease is not None and event.lease.ended:
            raise PartitionMigrated(
                f"table {self.name!r}: {event.topic}[{event.partition}] moved to another worker while "
                f"offset {event.offset} was processed; its new owner processes it"
            )
        if event is None or self.is_global:
            return self.local_partition(number, own), encoded
        tp = event.tp
        if tp.topic not in self._writers:
            self._new_writer(tp.topic)
        if number != tp.partition:
            if own == event.key:
                self._warn_codec_mismatch(tp.topic)
                number = tp.partition
            else:
                raise KeyNotInPartition(
                    f"table {self.name!r}: key {own!r} belongs to partition {number}, but the current "
                    f"event is from {tp.topic}[{tp.partition}]; re-key the stream with "
                    "group_by(...) so that events arrive in the partition of the key they write"
                )
        return self.local_partition(number, own), encoded

    def route_read(self, own: Any) -> tuple[TablePartition, bytes]:
        """Where a read of `own` looks: the current event's partition for the event's own key, else the
        key's partition (PartitionNotLocal if another worker holds it)."""
        encoded, number = self.located.get(own) or self.locate_new(own)
        if not self.is_global:
            event = current_event()
            if event is not None and own == event.key:
                number = event.tp.partition
        return self.local_partition(number, own), encoded

    def _for_write(self, key: Any) -> tuple[TablePartition, bytes]:
        """The partition a write of `key` goes to, and its store key. A windowed table's windows are written
        by its windowed face only (`table[key] += n`, `update`, a pipeline's aggregation): the face keeps
        which windows each key has in memory, and an event after a window written or deleted on its own
        would not see it (its write lost to the window's next update)."""
        if self.window is None:
            return self.route_write(key, current_event())
        raise ConfigError(f"table {self.name!r} holds windows, written by its aggregation (`table[key] += "
                          "n`, `update`, a pipeline's count/sum/reduce/aggregate): a window "
                          f"{key!r} cannot be written or deleted on its own")

    def _for_read(self, key: Any) -> tuple[TablePartition, bytes]:
        if self.window is None:
            return self.route_read(key)
        part, inner = self.route_read(key[0])
        part.writes()  # (a windowed face's writes kept in memory are then in the buffer this reads)
        return part, stored_key(inner, key)

    def _warn_codec_mismatch(self, topic: str) -> None:
        """The event's own key hashes to another partition under the table's key codec than the topic's
        producer put it in: the two encode keys differently."""
        if self._warned_codec:
            return
        self._warned_codec = True
        codec, key_type = self.plain_key_codec.name, self.changelog_topic.key_type
        typed = key_type.__name__ if key_type is not None else "the table's key type"
        if topic.startswith(f"{self.app_id}-") and topic.endswith("-repartition"):
            log.warning(
                "events re-keyed by group_by into %r are in other partitions than table %r (keys encoded "
                "with %s) puts their keys: the repartition topic encodes keys by its own key type; give "
                "group_by the table's, group_by(..., key_type=%s), or reads outside agents (timers, "
                "queries, engine table get) look in the wrong partition", topic, self.name, codec, typed)
            return
        log.warning(
            "table %r encodes keys with %s and lands them in other partitions than topic %r does; declare "
            "the table with the same key_type as the topic, or reads outside agents (timers, queries, "
            "engine table get) will look in the wrong partition", self.name, codec, topic)
