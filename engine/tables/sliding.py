"""Sliding-window tables: a table of windows [start, start + size] (both ends included) that exist where the
events are (engine.windows.SlidingWindow), maintained by a pipeline's aggregation (engine.pipelines):

    recent = app.stream(clicks).group_by(lambda c: c.user, key_type=str).sliding(60, grace=5).count("recent")

The algorithm is Kafka Streams' (KStreamSlidingWindowAggregate, reverse iteration, and its handling of
events earlier than `size` after the epoch), so that results are equal to Kafka Streams' own, also for
out-of-order and late events: an event updates every window containing it that is still open, makes its own
window from the aggregate of the window before it, makes the window after the event before it if that is
missing, and the window after itself from the window after it. It needs, beside each window's aggregate,
the time of the newest event in it: kept in memory beside the window and, for restarts, as an engine
record beside the window in the store and changelog (`META_PREFIX + b"max-time:" + window store key`,
skipped by every reader of table keys), made at the checkpoint for the windows written since the last one.

The per-event path touches about twice as many windows as the event has neighbours within `size`, so each
partition keeps every key's live windows in memory, in start order (engine.tables.sliding_windows): an event
finds its range of windows by bisection and reads and updates each in place, its aggregate and newest time
together, with no key encoded and no lookup by key. The store is read only for a window that was there when
the partition was taken on and not written since (its aggregate is read once, then kept). A written window is
only marked changed: the changed ones go into the partition's buffer (with their newest-time records) when it
is read (`TablePartition.writes`: the checkpoint, queries), so a window written by several events goes there
once, and one that expires before that (most of them, when event time runs ahead of the checkpoints) never
does.

Windows are found by an event only while their start is after the newest window start written minus the
retention (2 * size + grace, Kafka Streams' default), and deleted at checkpoints after that.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import partial
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.tables.event_time import LATEST_EVENT_TIME_MS, advance_stream_time
from engine.tables.keyed import KeyedWindowsTable
from engine.tables.keys import META_PREFIX
from engine.tables.partition import DELETED, MISSING, EventWindowState
from engine.tables.sliding_windows import EarlyWindows, KeyWindows, SlidingState, own

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from engine.events import Event
    from engine.tables.base import BaseTable
    from engine.tables.event_time import Timestamp
    from engine.tables.partition import TablePartition, WindowState
    from engine.topics import Topic
    from engine.windows import SlidingWindow

MAX_TIME_PREFIX = META_PREFIX + b"max-time:"


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
        windows = state.keys.get(key)
        if windows is None:
            windows = state.keys[key] = KeyWindows()
        windows.insert(bisect_left(windows.starts, start), start, MISSING, start + self.window.size_ms,
                       stored=True)
        if state.store_time is None or start > state.store_time:
            state.store_time = start

    def _load_state(self, part: TablePartition) -> WindowState:
        state = super()._load_state(part)
        assert isinstance(state, SlidingState)
        decode = self.table.key_codec.decode
        skip = len(MAX_TIME_PREFIX)
        for raw_key, raw_value in part.store.items(MAX_TIME_PREFIX, MAX_TIME_PREFIX + b"\xff"):
            key, start = decode(raw_key[skip:])
            windows = state.keys.get(key)
            at = windows.find(start) if windows is not None else None
            if windows is not None and at is not None:
                windows.newest[at] = int(raw_value)
        part.unbuffered = partial(self._buffer_changes, part, state)
        return state

    def _live(self, state: EventWindowState) -> Iterator[tuple[Any, int, int]]:
        assert isinstance(state, SlidingState)
        for key, windows in state.keys.items():
            yield from ((key, start, newest) for start, newest in zip(windows.starts, windows.newest,
                                                                      strict=True))

    def _bound(self, state: EventWindowState, key: Any, start: int) -> int | None:
        assert isinstance(state, SlidingState)
        windows = state.keys.get(key)
        at = windows.find(start) if windows is not None else None
        return None if windows is None or at is None else windows.newest[at]

    def _window_key(self, key: Any, start: int, bound: int) -> tuple[Any, ...]:
        return key, start

    def _closes_at(self, window_key_: tuple[Any, ...]) -> int:
        start: int = window_key_[1]
        return start + self.window.size_ms + self.window.grace_ms

    def _latest(self, state: EventWindowState, window_key_: tuple[Any, ...]) -> int:
        """The newest event time kept beside the window (restored from its engine record)."""
        newest = self._bound(state, window_key_[0], window_key_[1])
        assert newest is not None
        return newest

    # -- updates ------------------------------------------------------------------------------------

    def apply(self, part: TablePartition, event: Event, key: Any, value: Any) -> bool:
        """Add the event's `value` to the sliding windows of `key` at its time; False if late."""
        ts = event.time_ms  # the topic's extractor (or the record's time), applied at dispatch
        if ts is None or not 0 <= ts <= LATEST_EVENT_TIME_MS or self.timestamp is not None:
            ts = self._valid_time(event)
        state = part.windows or self._state(part)
        assert isinstance(state, SlidingState)
        before = state.stream_time
        # Idle time first: the event may be late by it, and the windows it closed are emitted below (stream
        # time moved since `before`), before any the event itself makes.
        if self.close_idle_after is not None:
            self._move_idle(state)
        stream_time = state.stream_time
        if stream_time is None or ts > stream_time:
            stream_time = advance_stream_time(state, ts)
        window = self.window
        size = window.size_ms
        close_time = stream_time - window.grace_ms
        if ts + size < close_time:
            self._late(part, event, ts, stream_time, close_time - (ts + size))
            return False
        windows = state.keys.get(key)
        if windows is None:
            windows = state.keys[key] = KeyWindows()
        # What the event may find: Kafka Streams' window store hides windows past its retention.
        visible_from = 0 if state.store_time is None else max(0, state.store_time - window.retention_ms + 1)
        if ts < size:
            EarlyWindows(self, part, state, windows, key, value, ts, close_time, stream_time,
                         visible_from).run()
        else:
            self._reverse(part, state, windows, key, value, ts, close_time, stream_time, visible_from)
        state.changed.add(key)
        if stream_time != before and state.due:
            self._close_due(part, state)
        return True

    def _reverse(self, part: TablePartition, state: SlidingState, windows: KeyWindows, key: Any, value: Any,
                 ts: int, close_time: int, stream_time: int, visible_from: int) -> None:
        """Kafka Streams' processReverse: the key's windows from the newest that can hold the event down to
        the first that ends before it, each updated in place where it holds the event and is still open;
        then createWindows: the window after the previous event, the event's own, the one after it."""
        size, add = self.window.size_ms, self.add
        final = self.closed_topic is not None
        starts, values, newests, changed = windows.starts, windows.values, windows.newest, windows.changed
        at = bisect_right(starts, ts + 1) - 1
        stop = bisect_left(starts, max(ts - 2 * size, visible_from))
        right: tuple[Any, int] | None = None  # (aggregate, newest) of the window after the event, to make
        right_seen = False
        left: Any = MISSING
        left_made = right_made = False
        previous: int | None = None
        while at >= stop:
            start = starts[at]
            if start == ts + 1:
                right_made = True
                at -= 1
                continue
            aggregate = values[at]
            if aggregate is MISSING:
                aggregate = self.stored_value(part, windows, at, key)
            newest = newests[at]
            end = start + size
            if end < ts:  # the first window that ends before the event: the loop's end
                left, previous = aggregate, newest
                break
            if end > ts and not right_seen:  # (ts + 1, if there, came first: right_made is known)
                right_seen = True
                if not right_made and newest > ts:  # the window after the event starts as this one is
                    right = (own(aggregate), newest)
            if end >= close_time:  # updateWindowAndForward: the event added to a window still open
                values[at] = add(aggregate, value)
                changed[at] = True
                if ts > newest:
                    newests[at] = ts
                if final:
                    self._written(part, state, (key, start), False, stream_time)
            if end == ts:  # the event's own window exists
                left_made = True
                if newest >= ts:
                    return
                previous = newest
            at -= 1
        # (Every start asked about below lies between the lowest window the loop read and the event's time +
        # 1, so the loop read it if it exists: its presence is what the loop saw.)
        if previous is not None and previous + 1 + size >= close_time and previous + 1 + size >= ts \
                and windows.find(previous + 1) is None:
            self.put_window(part, state, windows, key, previous + 1, add(self.initial(), value), ts,
                            stream_time)
        if not left_made and ts >= close_time:
            base = own(left) if previous is not None and ts - size <= previous and left is not MISSING \
                else self.initial()
            self.put_window(part, state, windows, key, ts - size, add(base, value), ts, stream_time)
        if right is not None:  # a copy of the window after the event: no close check, no event added
            self.put_window(part, state, windows, key, ts + 1, *right, stream_time)

    def stored_value(self, part: TablePartition, windows: KeyWindows, at: int, key: Any) -> Any:
        """The aggregate of a window the store had when the partition was taken on, not written since: read
        once, then kept."""
        value = part.stored(self.table.locate((key, windows.starts[at]))[0])
        windows.values[at] = value = self.initial() if value is MISSING else value
        return value

    def put_window(self, part: TablePartition, state: SlidingState, windows: KeyWindows, key: Any,
                   start: int, value: Any, newest: int, stream_time: int) -> None:
        """Write a window (made if new), marked changed."""
        starts = windows.starts
        at = bisect_left(starts, start)
        new = at == len(starts) or starts[at] != start
        if new:
            windows.insert(at, start, value, newest)
        else:
            windows.values[at], windows.newest[at], windows.changed[at] = value, newest, True
        if state.store_time is None or start > state.store_time:
            state.store_time = start
        if self.closed_topic is not None:
            self._written(part, state, (key, start), new, stream_time)

    # -- expiry (called at the checkpoint) ----------------------------------------------------------

    def expire(self, part: TablePartition) -> int:
        """Delete the windows past the retention (no event finds them any more), with their engine
        records; returns how many were deleted."""
        state = part.windows
        if not isinstance(state, SlidingState):
            return 0
        return self._expire(part, state)

    def _buffer_changes(self, part: TablePartition, state: SlidingState) -> None:
        """Put each window changed since the last time into the partition's buffer, with its newest event
        time's engine record (`TablePartition.unbuffered`)."""
        buffer, meta, keys, locate = part.buffer, part.meta, state.keys, self.table.locate
        for key in state.changed:
            windows = keys.get(key)
            if windows is None or True not in windows.changed:
                continue
            starts, values, newest, changed = windows.starts, windows.values, windows.newest, windows.changed
            for at, start in enumerate(starts):
                if changed[at]:
                    changed[at] = False
                    window_key_ = (key, start)
                    buffer[window_key_] = values[at]
                    meta[MAX_TIME_PREFIX + locate(window_key_)[0]] = str(newest[at]).encode()
        state.changed.clear()

    def _expire(self, part: TablePartition, state: SlidingState) -> int:
        if state.store_time is None:
            return 0
        horizon = state.store_time - self.window.retention_ms
        gone = 0
        flushing, buffered = part.flushing, part.buffer
        # (a key whose event made no window, its own being closed, has none: dropped here too)
        for key in [key for key, windows in state.keys.items()
                    if not windows.starts or windows.starts[0] <= horizon]:
            windows = state.keys[key]
            cut = bisect_right(windows.starts, horizon)
            for start, stored in zip(windows.starts[:cut], windows.stored[:cut], strict=True):
                window_key_ = (key, start)
                if stored or (flushing is not None and window_key_ in flushing):
                    part.delete(window_key_)
                    part.meta[self._max_time_key(window_key_)] = None
                elif buffered:  # (the buffer has only what a read or a failed checkpoint put there)
                    part.discard(window_key_)
            windows.cut(cut)
            gone += cut
            if not windows.starts:
                del state.keys[key]
        if gone:
            self._drop_newest_times_of_gone(part, state)
        return gone

    def _drop_newest_times_of_gone(self, part: TablePartition, state: SlidingState) -> None:
        """Forget the newest-time records of windows expired before the store had them: only a checkpoint
        that failed puts such records back (the others are made after expiry), so this reads the few
        records the partition's next checkpoint holds, not every window expired."""
        decode = self.table.key_codec.decode
        skip = len(MAX_TIME_PREFIX)
        for raw_key in [raw_key for raw_key, value in part.meta.items()
                        if value is not None and raw_key.startswith(MAX_TIME_PREFIX)]:
            key, start = decode(raw_key[skip:])
            windows = state.keys.get(key)
            if windows is None or windows.find(start) is None:
                del part.meta[raw_key]

    def _value_now(self, part: TablePartition, window_key_: tuple[Any, ...], store_key: bytes) -> Any:
        """(From memory: the buffer has not got the changed windows.)"""
        state = part.windows
        assert isinstance(state, SlidingState)
        windows = state.keys.get(window_key_[0])
        at = windows.find(window_key_[1]) if windows is not None else None
        if windows is None or at is None:
            return MISSING
        value = windows.values[at]
        return self.stored_value(part, windows, at, window_key_[0]) if value is MISSING else value

    def _max_time_key(self, window_key_: tuple[Any, int]) -> bytes:
        return MAX_TIME_PREFIX + self.table.locate(window_key_)[0]

    def stored(self, part: TablePartition, writes: Mapping[Any, Any]) -> None:
        """A checkpoint wrote `writes` to the store: the windows still live are now there."""
        state = part.windows
        if not isinstance(state, SlidingState):
            return
        keys = state.keys
        for window_key_, value in writes.items():
            if value is DELETED:
                continue
            key, start = window_key_
            windows = keys.get(key)
            at = windows.find(start) if windows is not None else None
            if windows is not None and at is not None:
                windows.stored[at] = True

    def __repr__(self) -> str:
        return f"<SlidingTable {self.name!r} {self.window}>"
