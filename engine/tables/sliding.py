"""Sliding-window tables: a table of windows [start, start + size] (both ends included) that exist where the
events are (engine.windows.SlidingWindow), maintained by a pipeline's aggregation (engine.pipelines):

    recent = app.stream(clicks).group_by(lambda c: c.user, key_type=str).sliding(60, grace=5).count("recent")

The algorithm is Kafka Streams' (KStreamSlidingWindowAggregate, reverse iteration, and its handling of
events earlier than `size` after the epoch), so that results are equal to Kafka Streams' own, also for
out-of-order and late events: an event updates every window containing it that is still open, makes its own
window from the aggregate of the window before it, makes the window after the event before it if that is
missing, and the window after itself from the window after it. It needs, beside each window's aggregate,
the time of the newest event in it: kept in the partition's index of live windows (engine.tables.keyed)
and, for restarts, as an engine record beside the window in the store and changelog
(`META_PREFIX + b"max-time:" + window store key`, skipped by every reader of table keys), made at the
checkpoint for the windows written since the last one.

The per-event path touches about twice as many windows as the event has neighbours within `size`, so it
reads them from what the partition holds: the key's window starts in order (a range by bisection), each
window's aggregate from the checkpoint buffer (no key encoded), the store only for a window not written
since the last checkpoint.

Windows are found by an event only while their start is after the newest window start written minus the
retention (2 * size + grace, Kafka Streams' default), and deleted at checkpoints after that.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.streams.current import current_event
from engine.tables.keyed import KeyedWindowsTable
from engine.tables.keys import META_PREFIX
from engine.tables.partition import DELETED, MISSING, KeyedWindowState
from engine.tables.windowed import _advance

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.tables.base import BaseTable
    from engine.tables.partition import TablePartition, WindowState
    from engine.tables.windowed import Timestamp
    from engine.topics import Topic
    from engine.windows import SlidingWindow

MAX_TIME_PREFIX = META_PREFIX + b"max-time:"

# (a window's aggregate, its newest event's time): Kafka Streams' ValueAndTimestamp
Aggregate = tuple[Any, int]


class SlidingState(KeyedWindowState):
    """A sliding-window partition's index: the keyed windows, and each key's window starts in order. An event
    reads the windows of a range of starts: found by bisection, they cost the same however many windows the
    key holds (between two checkpoints, windows past the retention stay in the index until expiry)."""

    __slots__ = ("starts",)

    def __init__(self) -> None:
        super().__init__()
        self.starts: dict[Any, list[int]] = {}


class SlidingTable(KeyedWindowsTable):
    """The sliding-window face of a Table: windows per key, each aggregated with `add(aggregate, value)`
    from `initial()`."""

    def __init__(
        self,
        table: BaseTable,
        window: SlidingWindow,
        *,
        initial: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        timestamp: Timestamp | None = None,
        late_topic: Topic | None = None,
        clock: Callable[[], float] = wall_time,
        close_idle_after: float | None = None,
    ) -> None:
        super().__init__(table, window, initial=initial, add=add, timestamp=timestamp, late_topic=late_topic,
                         clock=clock, close_idle_after=close_idle_after)
        self.window = window

    def _new_state(self) -> WindowState:
        return SlidingState()

    def _index(self, state: WindowState, stored: Any) -> None:
        """(The newest event time of each window is read after the windows: `_load_state`.)"""
        assert isinstance(state, SlidingState)
        key, start = stored
        state.windows.setdefault(key, {})[start] = (start + self.window.size_ms, True)
        insort(state.starts.setdefault(key, []), start)
        if state.store_time is None or start > state.store_time:
            state.store_time = start

    def _load_state(self, part: TablePartition) -> WindowState:
        state = super()._load_state(part)
        assert isinstance(state, KeyedWindowState)
        decode = self.table.key_codec.decode
        skip = len(MAX_TIME_PREFIX)
        for raw_key, raw_value in part.store.items(MAX_TIME_PREFIX, MAX_TIME_PREFIX + b"\xff"):
            key, start = decode(raw_key[skip:])
            windows = state.windows.get(key)
            if windows is not None and start in windows:
                windows[start] = (int(raw_value), True)
        return state

    def _window_key(self, key: Any, start: int, bound: int) -> tuple[Any, ...]:
        return key, start

    def _closes_at(self, window_key_: tuple[Any, ...]) -> int:
        start: int = window_key_[1]
        return start + self.window.size_ms + self.window.grace_ms

    def _latest(self, state: KeyedWindowState, window_key_: tuple[Any, ...]) -> int:
        """The newest event time the index keeps beside the window (restored from its engine record)."""
        key, start = window_key_
        newest: int = state.windows[key][start][0]
        return newest

    # -- updates ------------------------------------------------------------------------------------

    def update(self, key: Any, value: Any) -> bool:
        """Add the current event's `value` to the sliding windows of `key` at its time; False if late."""
        event = current_event() or self._event()
        ts = self._valid_time(event)
        part, _ = self.table._route_write(key, event)
        state = part.windows or self._state(part)
        assert isinstance(state, SlidingState)
        before = stream_time = state.stream_time
        if stream_time is None or ts > stream_time:
            stream_time = _advance(part, state, ts)
        size = self.window.size_ms
        close_time = stream_time - self.window.grace_ms
        if ts + size < close_time:
            self._late(part, event, ts, stream_time, close_time - (ts + size))
            return False
        run = _Run(self, part, state, key, value, ts, close_time, stream_time)
        if ts < size:
            run.early()
        else:
            run.reverse()
        if stream_time != before and state.due:
            self._close_due(part, state)
        return True

    # -- expiry (called at the checkpoint) ----------------------------------------------------------

    def expire(self, part: TablePartition) -> int:
        """Delete the windows past the retention (no event finds them any more), with their engine
        records; returns how many were deleted. Then give each window written since the last checkpoint
        its newest event time's engine record: made here, once per window and checkpoint, not per event."""
        state = part.windows
        if not isinstance(state, SlidingState):
            return 0
        gone = self._expire(part, state)
        self._record_newest_times(part, state)
        return gone

    def _record_newest_times(self, part: TablePartition, state: SlidingState) -> None:
        windows, meta = state.windows, part.meta
        for window_key_, value in part.buffer.items():
            if value is not DELETED:
                key, start = window_key_
                meta[self._max_time_key(window_key_)] = str(windows[key][start][0]).encode()

    def _expire(self, part: TablePartition, state: SlidingState) -> int:
        if state.store_time is None:
            return 0
        horizon = state.store_time - self.window.retention_ms
        gone = 0
        deleted: list[tuple[Any, int]] = []
        for key in [key for key, starts in state.starts.items() if starts and starts[0] <= horizon]:
            starts, windows = state.starts[key], state.windows[key]
            cut = bisect_right(starts, horizon)
            for start in starts[:cut]:
                _, in_store = windows.pop(start)
                window_key_ = (key, start)
                if in_store or (part.flushing is not None and window_key_ in part.flushing):
                    part.delete(window_key_)
                    deleted.append(window_key_)
                else:
                    part.discard(window_key_)
                    if part.meta:  # (records a failed checkpoint put back: the others are made after expiry)
                        part.meta.pop(self._max_time_key(window_key_), None)
            del starts[:cut]
            gone += cut
            if not starts:
                del state.starts[key], state.windows[key]
        for window_key_ in deleted:
            part.meta[self._max_time_key(window_key_)] = None
        return gone

    def _max_time_key(self, window_key_: tuple[Any, int]) -> bytes:
        return MAX_TIME_PREFIX + self.table.locate(window_key_)[0]

    def stored(self, part: TablePartition, writes: Mapping[Any, Any]) -> None:
        """A checkpoint wrote `writes` to the store: the windows still live are now there."""
        state = part.windows
        if not isinstance(state, KeyedWindowState):
            return
        for window_key_, value in writes.items():
            if value is DELETED:
                continue
            key, start = window_key_
            windows = state.windows.get(key)
            entry = windows.get(start) if windows is not None else None
            if entry is not None and windows is not None:
                windows[start] = (entry[0], True)

    def __repr__(self) -> str:
        return f"<SlidingTable {self.name!r} {self.window}>"


class _Run:
    """One event's pass over its key's windows: Kafka Streams' processReverse and processEarly, over the
    partition's index of live windows."""

    def __init__(self, table: SlidingTable, part: TablePartition, state: SlidingState, key: Any,
                 value: Any, ts: int, close_time: int, stream_time: int) -> None:
        self.table, self.part, self.state = table, part, state
        self.key, self.value, self.ts = key, value, ts
        self.close_time, self.stream_time = close_time, stream_time
        self.size = table.window.size_ms
        self.windows = state.windows.setdefault(key, {})
        self.starts = state.starts.setdefault(key, [])
        # What the event may find: Kafka Streams' window store hides windows past its retention.
        visible_from = 0 if state.store_time is None else state.store_time - table.window.retention_ms + 1
        self.visible_from = max(0, visible_from)

    def _aggregate(self, start: int) -> Aggregate:
        """A window's aggregate from what the partition holds: the windows written since the last
        checkpoint (or being flushed) without encoding a key (TablePartition.cached, inlined: it is called
        for each window of each event); the store only for the others."""
        window_key_ = (self.key, start)
        part = self.part
        value = part.buffer.get(window_key_, MISSING)
        if value is MISSING and part.flushing is not None:
            value = part.flushing.get(window_key_, MISSING)
        if value is MISSING:
            value = part.stored(self.table.table.locate(window_key_)[0])
        if value is MISSING or value is DELETED:
            value = self.table.initial()
        return value, self.windows[start][0]

    def _starts(self, low: int, high: int) -> list[int]:
        """The starts of the key's visible windows in [low, high], in order."""
        starts = self.starts
        return starts[bisect_left(starts, max(low, self.visible_from)):bisect_right(starts, high)]

    def _put(self, start: int, aggregate: Aggregate) -> None:
        windows, state = self.windows, self.state
        entry = windows.get(start)
        windows[start] = (aggregate[1], False if entry is None else entry[1])
        if entry is None:
            insort(self.starts, start)
        window_key_ = (self.key, start)
        self.part.buffer[window_key_] = aggregate[0]
        if state.store_time is None or start > state.store_time:
            state.store_time = start
        if self.table.closed_topic is not None:
            self.table._written(self.part, state, window_key_, entry is None, self.stream_time)

    def _update(self, start: int, aggregate: Aggregate) -> None:
        """updateWindowAndForward: add the event to a window still open (else it is skipped)."""
        if start + self.size >= self.close_time:
            value, newest = aggregate
            self._put(start, (self.table.add(value, self.value), max(self.ts, newest)))

    def reverse(self) -> None:
        ts, size = self.ts, self.size
        seen: set[int] = set()
        left: Aggregate | None = None
        right: Aggregate | None = None
        left_made = right_made = False
        previous: int | None = None
        close_time, add, value = self.close_time, self.table.add, self.value
        read, put = self._aggregate, self._put
        for start in reversed(self._starts(ts - 2 * size, ts + 1)):
            seen.add(start)
            end = start + size
            if start == ts + 1:
                right_made = True
                continue
            aggregate = read(start)
            if end > ts:  # (the most frequent case: _update inlined)
                if right is None:
                    right = aggregate
                if end >= close_time:
                    newest = aggregate[1]
                    put(start, (add(aggregate[0], value), ts if ts > newest else newest))
            elif end == ts:
                left_made = True
                self._update(start, aggregate)
                if aggregate[1] < ts:
                    previous = aggregate[1]
                else:
                    return
            else:
                left, previous = aggregate, aggregate[1]
                break
        self._make(seen, right, left, left_made, right_made, previous)

    def early(self) -> None:
        """An event less than `size` after the epoch: its window would start before 0, so it goes into the
        window [0, size] instead."""
        ts = self.ts
        combined: Aggregate | None = None
        right: Aggregate | None = None
        right_made = False
        seen: set[int] = set()
        previous: int | None = None
        for start in self._starts(0, ts + 1):
            seen.add(start)
            aggregate = self._aggregate(start)
            if start == 0:
                combined = aggregate
                if aggregate[1] < ts:
                    previous = aggregate[1]
            elif start <= ts:
                right = aggregate
                self._update(start, aggregate)
            elif start == ts + 1:
                right_made = True
        if right is None and combined is not None and combined[1] > ts:
            right = combined
        if not right_made and right is not None and right[1] > ts:
            self._put(ts + 1, right)
        if previous is not None and previous + 1 not in seen:
            self._update(previous + 1, (self.table.initial(), ts))
        self._update(0, combined if combined is not None else (self.table.initial(), ts))

    def _make(self, seen: set[int], right: Aggregate | None, left: Aggregate | None, left_made: bool,
              right_made: bool, previous: int | None) -> None:
        """createWindows: the window after the previous event, the event's own, the one after it."""
        ts, size = self.ts, self.size
        if previous is not None and previous + 1 not in seen and previous + 1 + size >= ts:
            self._update(previous + 1, (self.table.initial(), ts))
        if not left_made:
            if previous is not None and ts - size <= previous and left is not None:
                self._update(ts - size, (left[0], ts))
            else:
                self._update(ts - size, (self.table.initial(), ts))
        if not right_made and right is not None and right[1] > ts:
            self._put(ts + 1, right)  # a copy of the window after the event: no close check, no event added
