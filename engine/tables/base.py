"""What every table kind shares: the mapping API over the partitions active here, routed by
engine.tables.routing, and the table's binding to the workers running it (engine.tables.binding).

    counts = app.Table("word-counts", default=int, key_type=str)
    counts[word] += 1

Iteration (`items`, `keys`, `len`) covers the local active partitions.

The kinds (engine.tables.table.Table, global_table.GlobalTable, source_table.SourceTable, and a Table made
windowed, engine.tables.windowed) differ in what backs them and which partitions a worker holds, not in
how a key is routed. The key layout is engine.tables.keys.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from engine.errors import (
    ConfigError,
    PartitionNotLocal,
    TableError,
)
from engine.scope import PerWorker
from engine.stores import store_scheme
from engine.streams.current import current_source
from engine.tables.binding import Binding, CurrentPartitions, CurrentWriters, Query, TopicSet
from engine.tables.keys import META_PREFIX
from engine.tables.partition import DELETED, MISSING, TablePartition, Windowing
from engine.tables.routing import TableRouting
from engine.topics import Topic
from engine.windows import History

if TYPE_CHECKING:
    from engine.codecs import CodecFormat
    from engine.events import TP, Event
    from engine.settings import Settings
    from engine.stores.base import PartitionStore, StoreView
    from engine.windows import WindowKind

log = logging.getLogger(__name__)
_source = current_source.get  # (the hottest reads take the current event without a call: __getitem__)


class BaseTable(TableRouting, MutableMapping[Any, Any]):
    """A table's partition router and mapping; the kinds below say what backs it."""

    kind: ClassVar[str] = "table"  # as `engine tables` shows it
    is_global: ClassVar[bool] = False  # every worker holds every partition (no routing by event)

    def __init__(
        self,
        name: str,
        *,
        app_id: str,
        default: Callable[[], Any] | None = None,
        key_type: type | None = None,
        value_type: type | None = None,
        key_serializer: str | CodecFormat | None = None,
        value_serializer: str | CodecFormat | None = None,
        partitions: int | None = None,
        store: str | None = None,
        source_topic: Topic | None = None,
    ) -> None:
        if default is not None and not callable(default):
            raise ConfigError(f"table {name!r}: default must be callable (e.g. default=int), not {default!r}")
        if store is not None and store_scheme(store) is None:
            raise ConfigError(f"table {name!r}: store {store!r} is not rocksdb:// or memory://")
        self.name = name
        self.app_id = app_id
        self.default = default
        # Set when a Table is made windowed: keys are (key, window start), or (key, start, end) for sessions.
        self.window: WindowKind | None = None
        self.windowed: Windowing | None = None
        self.store_url = store
        self.changelog_topic = source_topic or Topic(
            f"{app_id}-{name}-changelog",
            key_type=key_type, value_type=value_type,
            key_serializer=key_serializer, value_serializer=value_serializer,
            partitions=partitions, config={"cleanup.policy": "compact"}, internal=True,
        )
        self.has_own_changelog = source_topic is None
        # The two tables this one is the join by key of (engine.tables.joins): the topology keeps their
        # topics co-partitioned.
        self.key_join_of: tuple[BaseTable, BaseTable] | None = None
        self.key_codec = self.changelog_topic.key_codec
        self.plain_key_codec = self.key_codec  # of the key alone, also once windowing wraps key_codec
        self.value_codec = self.changelog_topic.value_codec
        self.row_codec = self.value_codec  # of a row's value (a versioned table's: without the version tag)
        # The partitions active on the worker the running code belongs to (engine.scope): the only worker's
        # dict itself, or with several workers of the app in this process one that picks the current one's.
        self.active: MutableMapping[int, TablePartition] = {}
        self._bindings: PerWorker[Binding] = PerWorker()
        self._count: int | None = None
        self._topic_counts: Mapping[str, int] = {}
        self._writers: TopicSet = set()  # topics whose events wrote this table (each checked once)
        # Each key's (bytes, partition) as `locate_new` found it: read directly by the faces' per-event
        # loops (`located.get(key) or locate_new(key)`, one dict look-up, no call, for a key seen before).
        self.located: dict[Any, tuple[bytes, int]] = {}
        self._read: tuple[Event, Any, TablePartition] | None = None  # the last read of an event's own key
        # Reads of the current event's own key look in its partition, unrouted (an instance attribute: the
        # class's `is_global` is read through the class on every read).
        self._by_event = not self.is_global
        self._warned_codec = False
        self.changelog_records = 0  # sent and committed by this process's checkpoints (for /metrics)

    # -- wiring by the worker -----------------------------------------------------------------------

    def bind(self, worker: object, partition_count: int, topic_counts: Mapping[str, int],
             writers: set[str] | None = None,
             checkpoint: Callable[[], Awaitable[dict[TP, int]]] | None = None,
             query: Query | None = None,
             settings: Settings | None = None,
             assigned: Callable[[], Mapping[int, bool]] | None = None) -> None:
        """Attach to a running worker: the table's partition count (its changelog's), and every topic's, to
        check that the topics whose events write the table are co-partitioned with it; `writers` (if given)
        gets each topic whose events write the table, from its first write on; `checkpoint` runs one of the
        worker's checkpoints; `query` answers `query` (the worker's web server, engine.web); `assigned`
        gives the worker's tasks and whether each is ready, so that a read of a partition not here says
        whether to retry."""
        self._count = partition_count
        self._topic_counts = topic_counts
        self._bindings.bind(worker, Binding({}, set(), writers, checkpoint, query, settings, assigned))
        self._rebind()
        if self.windowed is not None:
            self.windowed.bind(worker)

    def unbind(self, worker: object) -> None:
        """The worker stopped."""
        self._bindings.unbind(worker)
        self._rebind()
        if self.windowed is not None:
            self.windowed.unbind(worker)

    @property
    def windows_closed(self) -> int:
        """Final results (`closed()`) the checkpoints of the worker the running code belongs to committed,
        in its run; outside every worker, of the first one bound."""
        binding = self._bindings.current()
        return binding.windows_closed if binding is not None else 0

    def count_closed(self, part: TablePartition, count: int) -> None:
        """A checkpoint committed `count` final results of the windows of `part`: counted for the worker
        that holds it (the checkpoint's code may run outside every worker's scope)."""
        for binding in self._bindings.values():
            if binding.active.get(part.number) is part:
                binding.windows_closed += count
                return

    def attach(self, part: TablePartition) -> None:
        """Make `part` the table's partition of its number on this worker (its task opened, a global table
        restored): events read and write it from now on."""
        self.active[part.number] = part

    def detach(self, part: TablePartition) -> None:
        """Take `part` out of the table (its task closed), unless another replaced it meanwhile."""
        if self.active.get(part.number) is part:
            del self.active[part.number]

    def _rebind(self) -> None:
        only = self._bindings.only()
        if only is not None:
            self.active, self._writers = only.active, only.writers
        elif len(self._bindings):
            self.active, self._writers = CurrentPartitions(self._bindings), CurrentWriters(self._bindings)
        else:
            self.active, self._writers = {}, set()

    async def checkpoint(self) -> dict[TP, int]:
        """Run a checkpoint of the worker this table is attached to, and return once it completed: from
        then on the stores hold every write made before the call (what a live export needs, since a store
        holds exactly the state of the last checkpoint). Returns where each of the worker's input
        partitions resumes after it, where known (engine.tasks.manager)."""
        binding = self._bindings.current()
        if binding is None or binding.checkpoint is None:
            raise TableError(f"table {self.name!r} is not attached to a running worker")
        return await binding.checkpoint()

    @property
    def worker_settings(self) -> Settings:
        """The settings of the running worker this table is attached to (its broker, for an export that
        reads the changelog)."""
        binding = self._bindings.current()
        if binding is None or binding.settings is None:
            raise TableError(f"table {self.name!r} is not attached to a running worker")
        return binding.settings

    async def query(self, key: Any, times: Mapping[str, str] | None = None) -> Any:
        """The key's current value wherever in the app it lives: read here when its partition is active on
        this worker, else asked of the worker that owns it (over HTTP, as `GET /tables/{table}/{key}`).
        Raises KeyError for a key the table does not have, and TableError while the key's partition
        recovers or moves (ask again a moment later) or when no worker with a web server runs the app.
        (`times`: a versioned table's `as_of`, `from` and `to`, as the URL gives them: its face's `query`.)"""
        binding = self._bindings.current()
        if binding is None or binding.query is None:
            raise TableError(f"table {self.name!r}: queries need a running worker with its web server "
                             "(web_enabled=True)")
        return await binding.query(self, key, times)

    def store_for(self, store: PartitionStore, number: int) -> PartitionStore:
        """The store that partition `number`'s changelog records are applied to: `store` itself, unless the
        table makes its own records of them (a versioned table over a source topic)."""
        return store

    def changelog(self) -> Topic:
        """The stream of this table's updates, as a topic an agent can read."""
        return self.changelog_topic

    def changes(self) -> Topic:
        """Every update of this table as (key, value) events, a deleted row's value None: its changelog, as
        the checkpoints write it (coalesced per checkpoint, like Kafka Streams' record cache). A windowed
        table's keys are (key, WindowRange)."""
        return self.changelog_topic

    @property
    def key_layout(self) -> str:
        """How its store and changelog keys are laid out (engine.tables.keys): "plain", "windowed" (key and
        window start), "session" (key, start and end) or "versioned" (key and version time)."""
        if self.window is None:
            return "plain"
        if isinstance(self.window, History):
            return "versioned"
        return "windowed" if hasattr(self.window, "size_ms") else "session"

    # -- the mapping --------------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        # `table[event.key] += 1` is the hottest use of a table: the event's own key is in the event's
        # partition, so it is found there without routing, and the write that `+=` makes next reuses what
        # this read found (`_read`). (The current event read inline, not through `current_event()`: a call
        # less on every read.)
        event = _source().current_event
        if event is not None and self._by_event and self.window is None and key == event.key:
            part = self.active.get(event.tp.partition)
            if part is not None:
                self._read = (event, key, part)
                value = part.buffer.get(key, MISSING)
                if value is MISSING:
                    value = part.get(key, (self.located.get(key) or self.locate_new(key))[0])
                elif value is DELETED:
                    value = MISSING
                if value is MISSING:
                    if self.default is None:
                        raise KeyError(key)
                    return self.default()
                return value
        part, encoded = self.route_read(key) if self.window is None else self._for_read(key)
        value = part.get(key, encoded)
        if value is MISSING:
            if self.default is None:
                raise KeyError(key)
            return self.default()
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        event = _source().current_event
        read = self._read
        if read is not None and read[0] is event and read[1] is key:  # the write of a `+=` (`__getitem__`)
            lease = event.lease
            if (lease is None or not lease.ended) and event.tp.topic in self._writers:
                read[2].buffer[key] = value
                return
        part, _ = self.route_write(key, event) if self.window is None else self._for_write(key)
        part.set(key, value)

    def own_slot(self, event: Event) -> tuple[Any, dict[Any, Any]]:
        """(the value of `event`'s own key, or the default; the buffer its writes go to), routed and checked
        as a write of that key is (`__setitem__`): what a fused pipeline (engine.fused) folds a batch's
        values of the key onto, writing their aggregate into that buffer once. KeyError for a key without
        a value in a table without a default."""
        key = event.key
        part, encoded = self.route_write(key, event)
        value = part.get(key, encoded)
        if value is MISSING:
            if self.default is None:
                raise KeyError(key)
            value = self.default()
        return value, part.buffer

    def __delitem__(self, key: Any) -> None:
        part, encoded = self._for_write(key)
        if part.get(key, encoded) is MISSING:
            raise KeyError(key)
        part.delete(key)

    def pop(self, key: Any, default: Any = MISSING) -> Any:
        """Remove `key` and return its value; for a missing key return `default` (or raise KeyError without
        one). Never the table's own default: MutableMapping's pop would read a made-up value, then fail to
        delete it."""
        found, value = self.find(key)
        if not found:
            if default is MISSING:
                raise KeyError(key)
            return default
        del self[key]
        return value

    def stored(self, store: PartitionStore, key: Any) -> Any:
        """`key` as `store` holds it (a standby's store, or one opened offline; without the writes since
        its last checkpoint), or MISSING: its value, or for a windowed table its windows (start ms, end ms,
        value), oldest first."""
        if self.windowed is not None:
            return self.windowed.windows_ms(key, standby=store) or MISSING
        encoded = self.plain_key_codec.encode(key)
        if encoded is None:
            raise TableError(f"table {self.name!r}: keys cannot be None")
        raw = store.get(encoded)
        return MISSING if raw is None else self.value_codec.decode(raw)

    def find(self, key: Any) -> tuple[bool, Any]:
        """(True, value) or (False, None), ignoring `default`: what stream-table joins use."""
        part, encoded = self._for_read(key)
        value = part.get(key, encoded)
        return (False, None) if value is MISSING else (True, value)

    def __contains__(self, key: object) -> bool:
        try:
            part, encoded = self._for_read(key)
        except PartitionNotLocal:
            return False
        return part.get(key, encoded) is not MISSING

    def count_local(self, limit: int) -> int | None:
        """The number of keys in the partitions active here (a windowed table's: its (key, window) pairs),
        the writes since the last checkpoint included, without decoding any; None past `limit`, where the
        count stops (counting scans every key: not cheap for a large table)."""
        count = 0
        windowed = self.window is not None
        for part in list(self.active.values()):
            written: dict[bytes, bool] = {}  # store key -> written since the last checkpoint, and not deleted
            for overlay in (part.flushing or {}, part.writes()):
                for key, value in overlay.items():
                    written[self.locate(key)[0]] = value is not DELETED
            for raw_key, _ in part.store.items():
                if (windowed and raw_key.startswith(META_PREFIX)) or raw_key in written:
                    continue
                count += 1
                if count > limit:
                    return None
            count += sum(written.values())
            if count > limit:
                return None
        return count

    def _merged(self, part: TablePartition) -> Iterator[tuple[Any, Any]]:
        overlay: dict[Any, Any] = {}
        if part.flushing:
            overlay.update(part.flushing)
        overlay.update(part.writes())
        decode_key, decode_value = self.key_codec.decode, self.value_codec.decode
        for raw_key, raw_value in part.store.items():
            if self.window is not None and raw_key.startswith(META_PREFIX):
                continue
            key = decode_key(raw_key)
            if key in overlay:
                continue
            yield key, decode_value(raw_value)
        for key, value in overlay.items():
            if value is not DELETED:
                yield key, value

    def scan(self, store: StoreView, overlays: Sequence[Mapping[Any, Any]], low: bytes | None,
             high: bytes | None) -> Iterator[tuple[bytes, Any, Any]]:
        """(key bytes, key, value) of a non-windowed partition's keys with `low` <= bytes < `high`, ordered
        by their bytes as the store orders them: the `store`'s, overridden by the writes in `overlays`
        (oldest first: what is being flushed, then the buffer; none for a standby's store)."""
        pending: dict[bytes, tuple[Any, Any]] = {}
        for overlay in overlays:
            for key, value in overlay.items():
                encoded = self.locate_key(key)[0]
                if (low is None or encoded >= low) and (high is None or encoded < high):
                    pending[encoded] = (key, value)
        written = sorted(pending.items())
        at = 0
        decode_key, decode_value = self.key_codec.decode, self.value_codec.decode
        for raw_key, raw_value in store.items(low, high):
            while at < len(written) and written[at][0] <= raw_key:
                encoded, (key, value) = written[at]
                at += 1
                if value is not DELETED:
                    yield encoded, key, value
                if encoded == raw_key:
                    break
            else:
                yield raw_key, decode_key(raw_key), decode_value(raw_value)
        for encoded, (key, value) in written[at:]:
            if value is not DELETED:
                yield encoded, key, value

    def __iter__(self) -> Iterator[Any]:
        for number in sorted(self.active):
            for key, _ in self._merged(self.active[number]):
                yield key

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]  # a generator, not a view
        for number in sorted(self.active):
            yield from self._merged(self.active[number])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {len(self.active)} local partitions>"
