"""One partition of a table: its store, and the writes made since the last checkpoint.

Writes go to a buffer keyed by the decoded key, so between two checkpoints only the latest value of each key
exists (coalescing, like Kafka Streams' record cache): 200k increments of 1,000 keys become 1,000 changelog
records and one store batch per checkpoint. Reads look in the buffer, then in what is being flushed, then in
the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.codecs import Codec
    from engine.events import RawRecord
    from engine.stores import PartitionStore
    from engine.stores.base import StoreView
    from engine.tables.late import LateEvent
    from engine.topics import Topic

MISSING: Any = object()
DELETED: Any = object()

# A final window for the closed topic: its store key, its value encoded, and its event time (ms), which the
# record carries as its timestamp (engine.tables.windowed).
Closed = tuple[bytes, bytes, int]


class WindowState:
    """A windowed table partition's stream time, the windows alive (for expiry), and the newest one emitted
    closed.

    `live` maps a window start to its keys, each with whether the store has that window (True) or it was
    only written since the last checkpoint (False): expiring one the store never had needs no tombstone.
    `latest` maps a window (its table key) made since the partition was taken on to the largest event time
    of its events, for its final record (a table with a closed topic only; engine.tables.windowed).
    """

    __slots__ = ("closed_upto", "idle_upto", "latest", "live", "moved_at", "recorded_time", "seen_time",
                 "stream_time")

    def __init__(self) -> None:
        self.stream_time: int | None = None
        # The stream time the partition's next checkpoint writes, or its store holds: events raise
        # `stream_time` alone, and each checkpoint's cut records it once (engine.tables.windowed.advance).
        self.recorded_time: int | None = None
        self.closed_upto: int | None = None
        self.live: dict[int, dict[Any, bool]] = {}
        self.latest: dict[tuple[Any, int], int] = {}
        # For close_idle_after (engine.tables.windowed): the stream time the last checkpoint saw, the wall
        # clock when events last moved it, and up to when idle time was added to it since.
        self.seen_time: int | None = None
        self.moved_at = 0.0
        self.idle_upto: float | None = None


class EventWindowState(WindowState):
    """The window state of a partition of a table whose windows depend on its events, not only on the clock
    (sessions, sliding windows, join windows: engine.tables.keyed): the windows waiting to be emitted final,
    a heap of (stream time at which they close, sequence, table key), and the newest window start written
    (sliding and join windows' store time). Each kind keeps its live windows its own way, in a subclass.
    `live` and `closed_upto` are unused."""

    __slots__ = ("due", "sequence", "store_time")

    def __init__(self) -> None:
        super().__init__()
        self.due: list[tuple[int, int, tuple[Any, ...]]] = []
        self.sequence = 0  # orders windows closing at the same time (keys need not be comparable)
        self.store_time: int | None = None


class KeyedWindowState(EventWindowState):
    """Each key's live windows, start -> (a number the kind keeps: a session's end, a join record's 0;
    whether the store has it): sessions' and join windows' index."""

    __slots__ = ("windows",)

    def __init__(self) -> None:
        super().__init__()
        self.windows: dict[Any, dict[int, tuple[int, bool]]] = {}

    def forget(self, key: Any, at: int) -> bool:
        """Remove the entry of `key` at `at` from the index alone; whether the store has it."""
        times = self.windows[key]
        _, in_store = times.pop(at)
        if not times:
            del self.windows[key]
        return in_store

    def drop(self, part: TablePartition, key: Any, at: int) -> None:
        """Remove the entry of `key` at `at` from the index and from the partition: a tombstone if the store
        has it (or gets it from the flush under way), else the write forgotten."""
        in_store = self.forget(key, at)
        entry = (key, at)
        if in_store or (part.flushing is not None and entry in part.flushing):
            part.delete(entry)
        else:
            part.discard(entry)


class Windowing(Protocol):
    """What a table's windowed face (engine.tables.windowed) does for the rest of engine: a checkpoint's steps
    on one partition, and its topics. (Typed here, below both, so that the table and its windowed face do not
    import each other.)"""

    timestamp: Callable[[Any], Any] | None  # the table's own event-time extractor, if any
    late_topic: Topic | None
    closed_topic: Topic | None
    topics: dict[str, Topic]  # the app's topics, for their extractors (set by the worker)

    @property
    def late_events(self) -> int: ...  # events too late for every window they belong to, in this run

    @property
    def latest_late_events(self) -> list[LateEvent]: ...  # the latest of them, the latest first

    def bind(self, worker: object) -> None: ...

    def unbind(self, worker: object) -> None: ...

    def advance(self, part: TablePartition, processed: int | None) -> None: ...

    def clock_work_at(self, part: TablePartition) -> float | None: ...

    def windows_ms(self, key: Any, standby: StoreView | None = None) -> list[tuple[int, int, Any]]: ...

    def close_windows(self, part: TablePartition) -> list[Closed]: ...

    def expire(self, part: TablePartition) -> int: ...

    def stored(self, part: TablePartition, writes: Mapping[Any, Any]) -> None: ...


class TablePartition:
    """One table partition of an active task: its store, buffers and, for a windowed table, its window state,
    late records and closed windows not yet sent. All of it goes with the partition when its task closes
    (nothing per partition is kept anywhere else, so nothing is left behind for a later owner to trip on)."""

    __slots__ = ("_decode", "buffer", "flushing", "late", "meta", "number", "store", "unbuffered",
                 "unsent_closes", "windows")

    def __init__(self, number: int, store: PartitionStore, value_codec: Codec) -> None:
        self.number = number
        self.store = store
        self.buffer: dict[Any, Any] = {}
        self.flushing: dict[Any, Any] | None = None
        # Engine's own records, already encoded (key starts with META_PREFIX), sent with the next checkpoint.
        self.meta: dict[bytes, bytes | None] = {}  # (None: a tombstone)
        self._decode = value_codec.decode
        self.windows: WindowState | None = None  # loaded from the store at the first windowed use
        self.late: list[RawRecord] = []  # records too late for their windows, for the late topic
        self.unsent_closes: list[Closed] = []  # closed windows of a checkpoint that failed
        # A windowed face that keeps its writes in memory until they are read (sliding windows: an event
        # writes several windows, most of them expired before the next checkpoint) sets this to what moves
        # them into the buffer: `writes` calls it.
        self.unbuffered: Callable[[], None] | None = None

    def get(self, key: Any, key_bytes: bytes) -> Any:
        """The value, or MISSING. (`cached`, then `stored`, inlined: this is every table read, so the two
        calls would be paid on every read.)"""
        value = self.buffer.get(key, MISSING)
        if value is MISSING and self.flushing is not None:
            value = self.flushing.get(key, MISSING)
        if value is MISSING:
            raw = self.store.get(key_bytes)
            return MISSING if raw is None else self._decode(raw)
        return MISSING if value is DELETED else value

    def cached(self, key: Any) -> Any:
        """What was written since the last checkpoint: the value, DELETED, or MISSING (then the store
        has the answer)."""
        value = self.buffer.get(key, MISSING)
        if value is MISSING and self.flushing is not None:
            value = self.flushing.get(key, MISSING)
        return value

    def stored(self, key_bytes: bytes) -> Any:
        """The value in the store, or MISSING."""
        raw = self.store.get(key_bytes)
        return MISSING if raw is None else self._decode(raw)

    def set(self, key: Any, value: Any) -> None:
        self.buffer[key] = value

    def delete(self, key: Any) -> None:
        self.buffer[key] = DELETED

    def deleting(self, key: Any) -> bool:
        """Whether a tombstone of `key` waits for the next checkpoint: the store has it until then, so a
        write made there now must still count as one the store has (its own removal sends a tombstone)."""
        return self.cached(key) is DELETED

    def discard(self, key: Any) -> None:
        """Forget a write not yet flushed, as if never made (for a key the store does not have: a delete
        would only send a tombstone for nothing)."""
        self.buffer.pop(key, None)

    def writes(self) -> dict[Any, Any]:
        """The buffer, with the writes kept in memory moved in first (`unbuffered`): what every reader of
        the writes since the last checkpoint reads, but the per-event paths of tables that keep none."""
        if self.unbuffered is not None:
            self.unbuffered()
        return self.buffer

    def take_buffer(self) -> dict[Any, Any]:
        """Start a flush: the buffer becomes `flushing` (still readable) and a new buffer starts."""
        taken, self.buffer = self.buffer, {}
        self.flushing = taken
        return taken

    def take_meta(self) -> dict[bytes, bytes | None]:
        taken, self.meta = self.meta, {}
        return taken

    def take_late(self) -> list[RawRecord]:
        """The records too late for their windows since the last checkpoint, for the late topic."""
        taken, self.late = self.late, []
        return taken

    def take_closes(self) -> list[Closed]:
        """The closed windows a failed checkpoint did not send, to send first."""
        taken, self.unsent_closes = self.unsent_closes, []
        return taken

    def put_back(self, writes: Mapping[Any, Any], meta: Mapping[bytes, bytes | None],
                 closes: list[Closed], late: list[RawRecord]) -> None:
        """A checkpoint that took these failed before anything committed: they go back under what was
        written since (newer writes of a key win), to be sent by the next checkpoint; the flush ends."""
        merged = dict(writes)
        merged.update(self.buffer)
        self.buffer = merged
        self.meta = {**meta, **self.meta}
        self.flushing = None
        self.unsent_closes = [*closes, *self.unsent_closes]
        self.late = [*late, *self.late]

    def flushed(self) -> None:
        self.flushing = None
