"""A versioned table over a source topic (Kafka Streams' `builder.table(topic, Materialized.as(
Stores.persistentVersionedKeyValueStore(...)))`): each record of the topic is a version of its key at the
record's time (or the table's `timestamp=` extractor's), a null value a deletion.

    prices = app.Table("prices", source_topic=app.topic("price-feed", key_type=str, value_type=float)
                       ).versioned(history=3600)

The topic is the table's changelog, as for any table over a source topic: nothing is written back to it.
So the versions are made where its records reach the store (`VersionedSourceStore.apply_records`: a
restore, and the task's own ordered application of the topic, engine.tasks.release), in the store's batch
with the topic's offset: each record becomes the store record a versioned table's write makes (engine.tables
.versioned), a record older than the partition's stream time minus the history is late (counted and
reported as a write would be, not stored), and the stream time goes in the same batch. The versions that
expire as it moves are removed from the store alone at checkpoints (a tombstone on the topic would delete
others' records).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError, InvalidTimestamp
from engine.events import TP, Event
from engine.streams.current import current_event
from engine.tables.keys import STREAM_TIME_KEY, window_key
from engine.tables.versioned import VersionedTable
from engine.tables.versions import DELETION, VALUE

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from engine.events import RawRecord
    from engine.stores.base import PartitionStore, StoreView
    from engine.tables.partition import TablePartition

log = logging.getLogger(__name__)


class VersionedSourceTable(VersionedTable):
    """The versioned face of a table over a source topic: read as any versioned table; written only by its
    topic (through `VersionedSourceStore`)."""

    def _put(self, key: Any, value: Any) -> None:
        topic = self.table.changelog_topic.name
        raise ConfigError(f"versioned table {self.name!r} reads source topic {topic!r}: its versions are "
                          "that topic's records, not written by agents")

    def advance(self, part: TablePartition, processed: int | None) -> None:
        """(Its stream time is recorded with the versions, in the store's batch.)"""

    def expire(self, part: TablePartition) -> int:
        """Remove the versions no longer valid at stream time minus the history from the store alone (a
        tombstone on the topic would delete others' records)."""
        state = self.state(part)
        expired = self.expired(state)
        if expired:
            encode = self.table.plain_key_codec.encode
            for key, at in expired:
                state.forget(key, at)
            part.store.write({window_key(encode(key) or b"", at): None for key, at in expired}, None)
        return len(expired)

    def latest_change(self, version: Any, value: Any) -> tuple[bool, Any, Any]:
        """As VersionedTable.latest_change, for a record of the topic: (key, value), its time the current
        event's (which it is)."""
        event = current_event()
        assert event is not None  # (a table join's agent reads the topic)
        at = event.time_ms if event.time_ms is not None else self.event_time_ms(event)
        return not self._newer_than(version, at), version, value

    def source_store(self, store: PartitionStore, number: int) -> PartitionStore:
        """The store of partition `number`, making versions of the topic's records applied to it."""
        return VersionedSourceStore(store, self, number)

    def apply_records(self, store: PartitionStore, number: int, records: list[RawRecord]) -> None:
        """Make a version of each record of the topic at its time and write them to `store` with the
        topic's offset and the partition's stream time; the active partition's index follows. A record
        without key, or without a valid time (a warning names it), is skipped."""
        part = self.table.active.get(number)
        if part is not None and part.store is not store:
            part = None  # (another store's: this one is being restored)
        state = None if part is None else self.state(part)
        if state is not None:
            stream_time = state.stream_time
        else:
            raw = store.get(STREAM_TIME_KEY)
            stream_time = None if raw is None else int(raw.split()[0])
        retention = self.history.retention_ms
        topic = self.table.changelog_topic
        tp = TP(topic.name, number)
        decode_key = self.table.plain_key_codec.decode
        updates: dict[bytes, bytes | None] = {}
        for record in records:
            if record.key is None:
                continue  # (in no table, as Kafka Streams drops it)
            event = Event(tp, record, None, None, None)
            if record.value is None:
                at: int | None = record.timestamp  # (a deletion has no value to read a time from)
            else:
                if self.timestamp is not None or topic.timestamp is not None:
                    event.value = topic.value_codec.decode(record.value)  # (what the extractor reads)
                at = self._time(event)
            if at is None or at < 0:
                continue
            if stream_time is not None and at < stream_time - retention:
                if part is not None:
                    self._late(part, event, at, stream_time, stream_time - retention - at)
                continue
            updates[window_key(record.key, at)] = DELETION if record.value is None else VALUE + record.value
            if stream_time is None or at > stream_time:
                stream_time = at
            if state is not None:
                self.index(state, decode_key(record.key), at, record.value is None)
        if stream_time is not None:
            updates[STREAM_TIME_KEY] = str(stream_time).encode()
            if state is not None:
                state.recorded_time = stream_time
        store.write(updates, records[-1].offset)

    def _time(self, event: Event) -> int | None:
        try:
            return self._valid_time(event)
        except InvalidTimestamp as exc:
            log.warning("%s; the record is skipped", exc)
            return None


class VersionedSourceStore:
    """A store of a versioned table over a source topic: the topic's records applied to it become versions
    (`VersionedSourceTable.apply_records`, what engine.tables.recovery.apply_batch calls); the rest is the
    store's."""

    def __init__(self, store: PartitionStore, table: VersionedSourceTable, number: int) -> None:
        self.store, self.table, self.number = store, table, number

    def apply_records(self, records: list[RawRecord]) -> None:
        self.table.apply_records(self, self.number, records)

    def changelog_offset(self) -> int | None:
        return self.store.changelog_offset()

    def changelog_identity(self) -> bytes | None:
        return self.store.changelog_identity()

    def set_changelog_identity(self, identity: bytes) -> None:
        self.store.set_changelog_identity(identity)

    def write(self, updates: Mapping[bytes, bytes | None], changelog_offset: int | None,
              inputs: Mapping[TP, int] | None = None) -> None:
        self.store.write(updates, changelog_offset, inputs)

    def input_offsets(self) -> dict[TP, int]:
        return self.store.input_offsets()

    def snapshot(self) -> StoreView:
        return self.store.snapshot()

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return self.store.items(start, end)

    def get(self, key: bytes) -> bytes | None:
        return self.store.get(key)

    def approximate_len(self) -> int:
        return self.store.approximate_len()

    def disk_bytes(self) -> int:
        return self.store.disk_bytes()

    def close(self) -> None:
        self.store.close()

