"""A stream joined with a versioned table, each event waiting a grace period for the table's updates that may
still come out of order (Kafka Streams' stream-table join with a grace period, KIP-923):

    prices = app.Table("prices", value_type=float).versioned(history=3600)

    @app.agent(orders)
    async def price(stream):
        async for order, price in stream.join(prices, grace=5):
            ...  # the price valid at the order's time, once 5 s of stream time passed it

Each event of the agent's stream is kept in the join's buffer, a table `<agent>-join-<n>-grace` of (key,
event time) -> the raw values at that time with their headers (`pack_record`), with a changelog like any
table's, until the buffer's stream time (the newest time put into it, recorded with each checkpoint) passes
its time by the grace; then it is joined, in the buffer's order (time, then the key's bytes, then arrival),
with the table's version valid at its time. An event already that far behind when it comes is joined at
once. Exactly Kafka Streams' steps (RocksDBTimeOrderedKeyValueBuffer and KStreamKTableJoinProcessor), so
results equal its own.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError
from engine.tables.partition import KeyedWindowState
from engine.tables.stream_joins import JoinBuffer, SameCodec
from engine.topics import event_time_ms
from engine.windows import JoinWindows, to_ms

if TYPE_CHECKING:
    from engine.events import Event, Headers
    from engine.tables.declarer import Declarer
    from engine.tables.partition import TablePartition, WindowState
    from engine.tables.stream_joins import Joined
    from engine.tables.versioned import VersionedTable
    from engine.topics import Topic
    from engine.windows import Seconds


class GraceState(KeyedWindowState):
    """A grace buffer partition's index, and its events waiting, a heap of (time, key bytes, sequence, key)
    (one entry per key and time: the buffer keeps a key's events at one time together, in arrival order)."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[tuple[int, bytes, int, Any]] = []


class GraceBuffer(JoinBuffer):
    """The events of a join with a versioned table that wait for its grace to pass; the partition's stream
    time is the newest time put into it (in the store too: a new owner goes on from it)."""

    def _new_state(self) -> WindowState:
        return GraceState()

    def _load_state(self, part: TablePartition) -> WindowState:
        state = super()._load_state(part)
        assert isinstance(state, GraceState)
        encode = self.table.plain_key_codec.encode
        for key, times in state.windows.items():
            for at in times:
                state.sequence += 1
                heappush(state.waiting, (at, encode(key) or b"", state.sequence, key))
        return state

    def grace_state(self, part: TablePartition) -> GraceState:
        state = self.state(part)
        assert isinstance(state, GraceState)
        return state

    def wait(self, part: TablePartition, state: GraceState, key: Any, at: int, raw: bytes) -> None:
        """Keep an event until the buffer's stream time passes its time by the grace."""
        if self.append(part, state, key, at, raw):
            state.sequence += 1
            heappush(state.waiting, (at, self.table.plain_key_codec.encode(key) or b"", state.sequence, key))
        if state.stream_time is None or at > state.stream_time:
            state.stream_time = at

    def advance(self, part: TablePartition, processed: int | None) -> None:
        """Record the buffer's stream time for the store when events moved it."""
        if part.windows is not None:
            self._record_stream_time(part, part.windows)

    def expire(self, part: TablePartition) -> int:
        return 0  # (its events leave when joined)


class GraceJoin:
    """One agent's join of its stream with a versioned table, with a grace period."""

    def __init__(self, topic: Topic, table: VersionedTable, buffer: GraceBuffer, grace_ms: int,
                 inner: bool) -> None:
        self.table, self.buffer, self.grace_ms, self.inner = table, buffer, grace_ms, inner
        self._decode = topic.value_codec.decode
        self._extract = topic.timestamp

    def process(self, event: Event) -> list[Joined]:
        """(key, value, the table's value valid at its time or None, its time) of each event joined now: this
        one if it is already past the grace, then every waiting one the grace passed, in the buffer's
        order."""
        key, value = event.key, event.value
        if value is None:
            return []  # (a tombstone joins nothing, as in Kafka Streams)
        at = event.time_ms
        if at is None:
            at = event_time_ms(self._extract, event)
        if key is None:
            return [] if self.inner else [(None, value, None, at, None)]
        buffer = self.buffer
        part = buffer.table.route_write(key, event)[0]
        state = buffer.grace_state(part)
        results: list[Joined] = []
        if state.stream_time is not None and state.stream_time - self.grace_ms > at:
            self._join(key, value, at, results)
            return results
        record = event.record
        assert record.value is not None
        buffer.wait(part, state, key, at, pack_record(record.headers, record.value))
        assert state.stream_time is not None
        waiting, horizon = state.waiting, state.stream_time - self.grace_ms
        while waiting and waiting[0][0] <= horizon:
            at, _, _, key = heappop(waiting)
            for packed in buffer.values(part, key, at):
                headers, raw = unpack_record(packed)
                self._join(key, self._decode(raw), at, results, headers)
            buffer.remove(part, state, key, at)
        return results

    def _join(self, key: Any, value: Any, at: int, results: list[Joined], headers: Headers | None = None
              ) -> None:
        found, other = self.table.find_at(key, at)
        if found or not self.inner:
            results.append((key, value, other, at, headers))


NO_VALUE = 0xFFFFFFFF  # a header's length in a packed record when it has no value (None)


def pack_record(headers: Headers, value: bytes) -> bytes:
    """A waiting event's headers and value as the buffer keeps them: the number of headers (2 bytes), each
    header's name (2 bytes of length, UTF-8) and value (4 bytes of length, NO_VALUE for None), then the
    value. (Kafka Streams' buffer keeps a record's headers too: a released event has its own.)"""
    if not headers:
        return b"\x00\x00" + value
    parts = [len(headers).to_bytes(2, "big")]
    for name, header in headers:
        encoded = name.encode()
        parts += [len(encoded).to_bytes(2, "big"), encoded]
        parts += [NO_VALUE.to_bytes(4, "big")] if header is None else [len(header).to_bytes(4, "big"), header]
    parts.append(value)
    return b"".join(parts)


def unpack_record(packed: bytes) -> tuple[Headers, bytes]:
    """(headers, value) of a record `pack_record` packed."""
    count, at = int.from_bytes(packed[:2], "big"), 2
    headers: list[tuple[str, Any]] = []
    for _ in range(count):
        size = int.from_bytes(packed[at:at + 2], "big")
        name, at = packed[at + 2:at + 2 + size].decode(), at + 2 + size
        size = int.from_bytes(packed[at:at + 4], "big")
        if size == NO_VALUE:
            headers.append((name, None))
            at += 4
        else:
            headers.append((name, packed[at + 4:at + 4 + size]))
            at += 4 + size
    return headers, packed[at:]


def grace_join(app: Declarer, agent: str, number: int, topic: Topic, table: VersionedTable, grace: Seconds,
               how: str, *, declaring: bool) -> GraceJoin:
    """The `number`th join with a grace period of `agent`'s stream (of `topic`) with the versioned `table`,
    over the buffer table the declaration run declared (it declares it when `declaring`)."""
    if how not in ("inner", "left"):
        raise ConfigError(f"no stream-table join {how!r}: inner or left")
    grace_ms = to_ms(grace, "grace")
    if grace_ms < 0:
        raise ConfigError(f"a join's grace must not be negative, not {grace!r}")
    if grace_ms > table.history.retention_ms:
        raise ConfigError(f"a join's grace ({grace_ms / 1000:g} s) must not be longer than versioned table "
                          f"{table.name!r}'s history ({table.history.retention_ms / 1000:g} s): the events "
                          "it holds back would be looked up past the history (Kafka Streams refuses it too)")
    name = f"{agent}-join-{number}-grace"
    buffer: Any = app.tables.get(name)
    if buffer is None:
        if not declaring:
            raise ConfigError(f"agent {agent!r}: its join with {table.name!r} was not declared when the "
                              "worker started; join the agent's stream before it awaits anything")
        buffer = app.Table(name, key_type=topic.key_type, key_serializer=SameCodec(topic.key_codec),
                           value_serializer="raw", partitions=topic.partitions)
        buffer.as_grace_buffer(JoinWindows(0, grace))  # (engine's own, not the user's API)
    assert isinstance(buffer.windowed, GraceBuffer)
    return GraceJoin(topic, table, buffer.windowed, grace_ms, how == "inner")
