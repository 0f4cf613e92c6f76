"""Stream-stream windowed joins (Kafka Streams' KStream-KStream join, `JoinWindows.ofTimeDifferenceAndGrace`):

    @app.agent(orders)
    async def match(stream):
        async for order, payment in stream.left_join(payments, within=60, grace=5):
            ...  # the key is current_event().key

The agent reads both topics, co-partitioned by key, into its own stream: their records reach it in timestamp
order (engine.tasks.inputs, as Kafka Streams' tasks take them). Each record is kept in its stream's join
buffer, a table `<agent>-join-<n>-left` or `-right` of (key, event time) -> the raw values at that time, with
a changelog like any table's; it is joined with every record of the other buffer with its key and a time at
most `within` away, found while that record is within the other stream's retention (engine.windows.
JoinWindows). A record with no partner in a left (outer) join waits in `-left-pending` (`-right-pending`)
until the join's stream time (the newest time of every record given to it, of either stream) passes its
time + within + grace, and is then emitted alone, when a record comes at stream time, by Kafka Streams' rule
for a look at the records waiting (`StreamJoin._emit_waited`); a partner found before that takes it out.
Exactly Kafka Streams' order of steps, so results equal its own (with its emit interval for those results at
0; see tests/kafka/reference).

Values are kept as their topic encoded them (the raw record value), so a buffer needs no codec of its own:
a buffer entry is the values at one time, each prefixed by its 4-byte length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, cast

from engine.errors import ConfigError
from engine.tables.event_time import EventTimeTable
from engine.tables.partition import DELETED, MISSING, KeyedWindowState
from engine.topics import event_time_ms

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.codecs import Codec
    from engine.events import Event, Headers
    from engine.tables.base import BaseTable
    from engine.tables.declarer import Declarer
    from engine.tables.partition import Closed, TablePartition, WindowState
    from engine.topics import Topic
    from engine.windows import JoinWindows

How = Literal["inner", "left", "outer"]
HOWS: tuple[How, ...] = ("inner", "left", "outer")
# (key, left value or None, right value or None, the result's event time in ms: Kafka Streams' record
# timestamp of a join result, the later of the pair's times, or the time of a record emitted alone; the
# result's headers, or None for the current record's)
Joined = tuple[Any, Any, Any, int, "Headers | None"]


def as_how(how: str) -> How:
    """`how` checked: "inner", "left" or "outer"."""
    for known in HOWS:
        if how == known:
            return known
    raise ConfigError(f"no stream-stream join {how!r}: inner, left or outer")


def pack(values: list[bytes]) -> bytes:
    """Values as one stored value, each prefixed by its length (so appending one is a concatenation)."""
    return b"".join(len(value).to_bytes(4, "big") + value for value in values)


def unpack(raw: bytes) -> list[bytes]:
    length = int.from_bytes(raw[:4], "big")
    if length + 4 == len(raw):  # (one value: the usual case)
        return [raw[4:]]
    values, at = [], 0
    while at < len(raw):
        length = int.from_bytes(raw[at:at + 4], "big")
        values.append(raw[at + 4:at + 4 + length])
        at += 4 + length
    return values


class JoinBuffer(EventTimeTable):
    """One stream's records of a join, by (key, event time): what the other stream's records join with.
    Its partitions' index (engine.tables.keyed's KeyedWindowState) holds each key's times and the newest
    time written (the buffer's store time, from which its retention counts)."""

    def __init__(self, table: BaseTable, window: JoinWindows) -> None:
        super().__init__(table, window)
        self.window = window

    def _new_state(self) -> WindowState:
        return KeyedWindowState()

    def _index(self, state: WindowState, stored: Any) -> None:
        assert isinstance(state, KeyedWindowState)
        key, at = stored
        state.windows.setdefault(key, {})[at] = (0, True)
        if state.store_time is None or at > state.store_time:
            state.store_time = at

    def state(self, part: TablePartition) -> KeyedWindowState:
        state = part.windows or self._state(part)
        assert isinstance(state, KeyedWindowState)
        return state

    def append(self, part: TablePartition, state: KeyedWindowState, key: Any, at: int, raw: bytes) -> bool:
        """Keep a record's raw value at its time; True if it is the key's first at that time."""
        times = state.windows.get(key)
        if times is None:
            times = state.windows[key] = {}
        entry = times.get(at)
        window_key_ = (key, at)
        packed = len(raw).to_bytes(4, "big") + raw  # pack([raw])
        if entry is None:
            # (removed since the last checkpoint but in the store still: its tombstone must stay pending)
            times[at] = (0, part.deleting(window_key_))
            part.buffer[window_key_] = packed
        else:
            part.buffer[window_key_] = self._packed(part, window_key_) + packed
        if state.store_time is None or at > state.store_time:
            state.store_time = at
        return entry is None

    def values(self, part: TablePartition, key: Any, at: int) -> list[bytes]:
        packed = self._packed(part, (key, at))
        return unpack(packed) if packed else []

    def _packed(self, part: TablePartition, window_key_: tuple[Any, int]) -> bytes:
        """The stored value of a key's records at a time (b"" if none): the buffer's if written since the
        last checkpoint, else the store's (located only then: most reads are of recent records)."""
        packed = part.cached(window_key_)
        if packed is MISSING:
            packed = part.stored(self.table.locate(window_key_)[0])
        return b"" if packed is MISSING or packed is DELETED else cast("bytes", packed)

    def remove(self, part: TablePartition, state: KeyedWindowState, key: Any, at: int) -> None:
        state.drop(part, key, at)

    # -- the checkpoint's steps (engine.tables.partition.Windowing) -----------------------------------

    def advance(self, part: TablePartition, processed: int | None) -> None:
        """(A join's stream time moves with its records, in `StreamJoin.process`: nothing to advance.)"""

    def close_windows(self, part: TablePartition) -> list[Closed]:
        return []

    def expire(self, part: TablePartition) -> int:
        """Delete the records past the retention: no record of the other stream finds them any more."""
        state = part.windows
        if not isinstance(state, KeyedWindowState) or state.store_time is None:
            return 0
        horizon = state.store_time - self.window.retention_ms
        gone = [(key, at) for key, times in state.windows.items() for at in times if at <= horizon]
        for key, at in gone:
            self.remove(part, state, key, at)
        return len(gone)

    def stored(self, part: TablePartition, writes: Mapping[Any, Any]) -> None:
        state = part.windows
        if not isinstance(state, KeyedWindowState):
            return
        for (key, at), _ in writes.items():
            times = state.windows.get(key)
            if times is not None and at in times:
                times[at] = (0, True)


class PendingState(KeyedWindowState):
    """A pending buffer's partition index, with Kafka Streams' TimeTracker of the join (kept on the left
    side's state when the join has one, for both sides: Kafka Streams keeps one per join and task):
    `stream_time`, the newest time of every record the join was given (those it skips, a tombstone or a
    record without key, included), and `min_time`, the oldest record put to wait since the last look or the
    record that look stopped at. In memory only, as Kafka Streams' are: a partition taken on here starts
    without them (None), as a Kafka Streams task starts with stream time -1 and minTime Long.MAX_VALUE."""

    __slots__ = ("min_time", "stream_time")

    def __init__(self) -> None:
        super().__init__()
        self.min_time: int | None = None
        self.stream_time: int | None = None


class PendingBuffer(JoinBuffer):
    """A left (outer) join's records that found no partner yet, waiting to be emitted alone: its partitions'
    index (each key's times) is what a look goes through (`StreamJoin._emit_waited`)."""

    def _new_state(self) -> WindowState:
        return PendingState()

    def state(self, part: TablePartition) -> PendingState:
        state = super().state(part)
        assert isinstance(state, PendingState)
        return state

    def expire(self, part: TablePartition) -> int:
        return 0  # they leave when emitted, or when a partner comes


class StreamJoin:
    """One stream-stream join of an agent: its buffers, and what each record makes of them."""

    def __init__(self, left: Topic, right: Topic, window: JoinWindows, buffers: list[JoinBuffer],
                 pending: list[PendingBuffer | None]) -> None:
        self.window = window
        self.buffers = buffers  # [left, right]
        self.pending = pending  # [left's, right's]: a side's records with no partner, if that side is outer
        self.outer = pending[0] is not None or pending[1] is not None
        self._left_name = left.name
        self._decode = (left.value_codec.decode, right.value_codec.decode)
        self._encode_key = (left.key_codec.encode, right.key_codec.encode)  # (the order of a look's records)
        self._extract = (left.timestamp, right.timestamp)  # event time extractors (None: the record's)

    def process(self, event: Event) -> list[Joined]:
        """The results of one record of either stream, in Kafka Streams' order: the records without partner
        whose wait ended (if this record is at stream time), then its joins."""
        side = 0 if event.tp.topic == self._left_name else 1
        key, value = event.key, event.value
        at = event.time_ms
        if at is None and (value is not None or self._extract[side] is None):  # (an extractor reads a value)
            at = event_time_ms(self._extract[side], event)
        lead = self._lead(event) if self.outer else None
        if lead is not None and at is not None and (lead.stream_time is None or at > lead.stream_time):
            lead.stream_time = at  # (every record moves it, those skipped below too, as in Kafka Streams)
        if value is None or at is None:
            return []  # a tombstone joins nothing (Kafka Streams skips it)
        pending = self.pending[side]
        if key is None:
            return [] if pending is None else [_pair(side, None, value, None, at)]
        mine, theirs = self.buffers[side], self.buffers[1 - side]
        my_part, _ = mine.table.route_write(key, event)
        their_part = theirs.table.active.get(my_part.number)  # (the same partition: co-partitioned)
        if their_part is None:
            their_part, _ = theirs.table.route_write(key, event)  # raises, saying why
        my_state = my_part.windows or mine.state(my_part)
        their_state = their_part.windows or theirs.state(their_part)
        assert isinstance(my_state, KeyedWindowState)
        assert isinstance(their_state, KeyedWindowState)
        raw = event.record.value
        assert raw is not None
        mine.append(my_part, my_state, key, at, raw)
        their_time = their_state.store_time
        results: list[Joined] = []
        stream_time = at
        if lead is not None:
            assert lead.stream_time is not None  # (moved by this record above)
            stream_time = lead.stream_time
            if at == stream_time:
                self._emit_waited(event, lead, stream_time, results)
        within = self.window.within_ms
        low, high = at - within, at + within
        shown = 0 if their_time is None else their_time - self.window.retention_ms + 1
        if shown > low:  # what their buffer's retention still shows
            low = shown
        if low < 0:
            low = 0
        if high < 0:
            high = 0
        times = their_state.windows.get(key)
        matched = False
        if times:
            found: list[int] = []
            gone: list[int] = []
            for other_at in times:  # (one loop, no comprehension: a key has a few times)
                if other_at < shown:
                    gone.append(other_at)
                elif low <= other_at <= high:
                    found.append(other_at)
            for other_at in gone:  # past the retention: deleted now (the checkpoint would, later)
                theirs.remove(their_part, their_state, key, other_at)
            if found:
                matched = True
                if len(found) > 1:
                    found.sort()
                decode = self._decode[1 - side]
                their_pending = self.pending[1 - side]
                for other_at in found:
                    later = at if at > other_at else other_at
                    for other in theirs.values(their_part, key, other_at):
                        results.append(_pair(side, key, value, decode(other), later))
                    if their_pending is not None:
                        self._partnered(their_pending, event, key, other_at)
        if not matched and pending is not None:
            if high < stream_time:  # its wait is over already
                results.append(_pair(side, key, value, None, at))
            else:
                part, _ = pending.table.route_write(key, event)
                state = pending.state(part)
                pending.append(part, state, key, at, raw)
                assert lead is not None
                if lead.min_time is None or at < lead.min_time:
                    lead.min_time = at  # (Kafka Streams' updatedMinTime)
        return results

    def _lead(self, event: Event) -> PendingState:
        """The state that keeps the join's `min_time` for `event`'s partition (its first side's pending)."""
        pending = self.pending[0] if self.pending[0] is not None else self.pending[1]
        assert pending is not None
        return pending.state(pending.table.local_partition(event.tp.partition, event.key))

    @staticmethod
    def _partnered(pending: PendingBuffer, event: Event, key: Any, at: int) -> None:
        """Records of the other stream at `at` found a partner: they no longer wait to be emitted alone."""
        part, _ = pending.table.route_write(key, event)
        state = pending.state(part)
        times = state.windows.get(key)
        if times is not None and at in times:
            pending.remove(part, state, key, at)

    def _emit_waited(self, event: Event, lead: PendingState, stream_time: int, results: list[Joined]) -> None:
        """The records of this partition whose wait for a partner ended before `stream_time`, alone: Kafka
        Streams' emitNonJoinedOuterRecords, step for step. It looks only once stream time passed the join
        window of `min_time` (the oldest record put since its last look, or the record its last look stopped
        at; never before one is put when the window is 0 wide, as Long.MAX_VALUE + 0 in Kafka Streams), then
        goes through the waiting records of both sides in its store's order (time, the right side's first,
        the key's bytes) and emits each whose window closed, until a record of each side with its window
        still open was seen; `min_time` is left at the last record it looked at. (So a record waits past its
        own window while an older one of the other side is still open, and a late partner may yet take it
        out, as in Kafka Streams: results equal its own.)"""
        window = self.window
        reach = window.within_ms + window.grace_ms
        if lead.min_time is None:
            if reach == 0:
                return
        elif lead.min_time + reach >= stream_time:
            return
        waiting: list[tuple[int, int, bytes, int, Any]] = []  # (time, right first, key bytes, side, key)
        states: list[tuple[PendingBuffer, TablePartition, PendingState] | None] = [None, None]
        for side, pending in enumerate(self.pending):
            if pending is None:
                continue
            part = pending.table.local_partition(event.tp.partition, event.key)
            state = pending.state(part)
            states[side] = (pending, part, state)
            encode = self._encode_key[side]
            waiting += [(at, 1 - side, encode(key) or b"", side, key)  # (its index: the records waiting)
                        for key, times in state.windows.items() for at in times]
        waiting.sort(key=lambda entry: entry[:3])
        lead.min_time = None
        open_sides = [False, False]
        for at, _, _, side, key in waiting:
            lead.min_time = at
            if open_sides[0] and open_sides[1]:
                break
            if at + reach >= stream_time:
                open_sides[side] = True
                continue
            found = states[side]
            assert found is not None
            pending, part, state = found
            decode = self._decode[side]
            for raw in pending.values(part, key, at):
                results.append(_pair(side, key, decode(raw), None, at))
            pending.remove(part, state, key, at)


def _pair(side: int, key: Any, mine: Any, theirs: Any, at: int) -> Joined:
    return (key, mine, theirs, at, None) if side == 0 else (key, theirs, mine, at, None)


def stream_join(app: Declarer, agent: str, number: int, left: Topic, right: Topic, window: JoinWindows,
                how: How, *, declaring: bool) -> StreamJoin:
    """The `number`th stream-stream join of `agent`, over the tables the declaration run declared (it declares
    them when `declaring`)."""
    base = f"{agent}-join-{number}"

    def buffer(name: str, topic: Topic, pending: bool) -> Any:
        table = app.tables.get(name)
        if table is None:
            if not declaring:
                raise ConfigError(
                    f"agent {agent!r}: its stream-stream join was not declared when the worker started; join "
                    "the agent's stream before anything is awaited in the agent")
            table = app.Table(name, key_type=topic.key_type, key_serializer=SameCodec(topic.key_codec),
                              value_serializer="raw", partitions=topic.partitions)
            table.as_join_buffer(window, pending=pending)  # (engine's own, not the user's API)
        return table.windowed

    buffers = [buffer(f"{base}-left", left, False), buffer(f"{base}-right", right, False)]
    pending = [buffer(f"{base}-left-pending", left, True) if how in ("left", "outer") else None,
               buffer(f"{base}-right-pending", right, True) if how == "outer" else None]
    return StreamJoin(left, right, window, buffers, pending)


class SameCodec:
    """A join buffer's key format: its stream's own key codec (a registry format's included), so that the
    buffer keys records exactly as their topic does."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self.name = codec.name

    def codec(self, type_: type | None, *, topic: str, is_key: bool) -> Codec:
        return self._codec
