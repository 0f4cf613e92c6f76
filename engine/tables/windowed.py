"""Windowed tables: a table whose keys are (key, window), updated on event time.

    views = app.Table("views", default=int).hopping(size=600, step=60, expires=3600, grace=30)
    views[page] += 1                 # every window that contains the event's time
    views[page].current()            # the newest window containing the event's time

The store and changelog key layout is in engine.tables.keys: one key's windows are contiguous and ordered by
start, and the partition of a windowed key is the partition of its key alone, so every window of a key lives
with the key. Each partition also keeps its stream time (the largest event time processed) as an engine
record carried by the partition's `meta` buffer, so that late events stay late across restarts.

An event updates every window containing its time unless stream time already passed that window's end plus
grace; if no window is left to update, the event is late: it is counted and, if the table asks for it, sent
to `<app>-<table>-late`. At each checkpoint, windows older than `expires` are deleted (tombstones in the
changelog), so state stays bounded.

Final results: `table.closed()` is the topic `<app>-<table>-closed`, which gets each window once, with its
final value, at the first checkpoint after stream time passes its end plus grace (before expiry can delete
it). Which windows were emitted is kept like stream time, as a per-partition engine record (the start of
the newest emitted window) written in the same checkpoint as the emission, so a restart or a rebalance
neither repeats nor skips a close. With `processing_guarantee="exactly_once"` the emission, that record and
the source offsets commit in one Kafka transaction; at-least-once, a crash between them can repeat closes.
A final record's timestamp is the largest event time of the window's events (Kafka Streams' rule for a
windowed aggregation's results), kept per window in the partition's window state (`latest`) for the windows
this run made; a window that was in the store when the partition was taken on gets its end - 1 (its events'
times are not in the store, which holds only the aggregate).
"""

from __future__ import annotations

import logging
import operator
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.partitioner import CACHED_KEYS
from engine.streams.current import current_event
from engine.tables.event_time import LATEST_EVENT_TIME_MS, EventTimeTable, Timestamp
from engine.tables.keys import (
    CLOSED_KEY,
    window_key,
)
from engine.tables.partition import DELETED, MISSING, WindowState
from engine.windows import TumblingWindow, WindowRange

if TYPE_CHECKING:

    from collections.abc import Callable, Iterable, Mapping

    from engine.events import Event
    from engine.streams.current import Processing
    from engine.tables.base import BaseTable
    from engine.tables.partition import Closed, TablePartition
    from engine.topics import Topic
    from engine.windows import Window


log = logging.getLogger(__name__)


class WindowedTable(EventTimeTable):
    """The windowed face of a Table of fixed-size windows: `table[key]` is that key's WindowSet."""

    def __init__(
        self,
        table: BaseTable,
        window: Window,
        *,
        timestamp: Timestamp | None = None,
        late_topic: Topic | None = None,
        clock: Callable[[], float] = wall_time,
        close_idle_after: float | None = None,
    ) -> None:
        super().__init__(table, window, timestamp=timestamp, late_topic=late_topic, clock=clock,
                         close_idle_after=close_idle_after)
        self.window = window
        self._sets: dict[Any, WindowSet] = {}
        # A tumbling window's one start is found inline by `apply`: no call and no list of starts per event.
        tumbling = window if isinstance(window, TumblingWindow) else None
        self._tumbling_ms = tumbling.size_ms if tumbling is not None else 0
        self._closes_after_ms = tumbling.closes_after_ms if tumbling is not None else 0

    def _next_due_ms(self, state: WindowState) -> int | None:
        """The earliest close (of a window not emitted yet, with a closed topic) or expiry of a live one."""
        window, done = self.window, state.closed_upto
        emitting = self.closed_topic is not None
        expires_after = window.size_ms + window.expires_ms
        due: int | None = None
        for start in state.live:
            at = start + expires_after
            if emitting and (done is None or start > done):
                at = min(at, start + window.closes_after_ms)
            if due is None or at < due:
                due = at
        return due

    # -- updates ------------------------------------------------------------------------------------

    def update(self, key: Any, fun: Callable[[Any, Any], Any], arg: Any) -> bool:
        """Set every open window of `key` containing the event's time to `fun(old, arg)`; False if it was
        late. (`fun` with an argument, not a closure: `+=` passes operator.add, made once, not a lambda per
        event.)"""
        event = current_event()
        if event is None:
            event = self.require_event()  # raises, naming the table
        part = self.table.route_write(key, event)[0]
        return self.apply_run(part, ((event, key, arg),), fun) == 1

    def apply_run(self, part: TablePartition, run: Iterable[tuple[Event, Any, Any]],
                  fun: Callable[[Any, Any], Any], source: Processing | None = None) -> int:
        """`update` for each (event, key, arg) of `run`, events of one partition in order, each key's
        writes going to `part` (routed by the caller); returns how many were not late. `source`, if given,
        has each event as its `current_event` while it is applied (an aggregate may read it, and the event
        an error leaves there is the one it failed on): a fused pipeline folds a run of a fetched batch in
        one call (engine.fused), the agent path one event.

        The per-event path of a table of fixed windows (tumbling, hopping), so it holds to these: what every
        event of the run reads (the partition's state, the buffer, the table's settings) is read once per
        run; the key is encoded (cached) only to read the store, not once per window; a window's store key
        is built only to read the store; the store is read only for a window the live index says it has,
        so a new window costs no RocksDB read; and a tumbling window's one start is computed here, as
        `TumblingWindow.open_starts_ms` does, without the call and its list (the figures:
        benchmarks/README.md, `benchmarks.windowed`)."""
        table = self.table
        locations = table.located
        state = part.windows or self._state(part)
        if self.close_idle_after is not None:  # (idle time first: the run's events may be late by it)
            self._move_idle(state)
        live_at = state.live
        buffer, flushing = part.buffer, part.flushing
        latest = None if self.closed_topic is None else state.latest  # (for final results' time only)
        extracted = self.timestamp is not None
        size, closes_after = self._tumbling_ms, self._closes_after_ms
        open_starts = self.window.open_starts_ms
        applied = 0
        for event, key, arg in run:
            if source is not None:
                source.current_event = event
            ts = event.time_ms  # the topic's extractor (or the record's time), applied at dispatch
            if ts is None or not 0 <= ts <= LATEST_EVENT_TIME_MS or extracted:
                ts = self._valid_time(event)
            # (Each key checked and encoded once, cached: a None key raises here. Looked up per event: an
            # aggregate writing the table may make the cache forget it.)
            found = locations.get(key) or table.locate_new(key)
            stream_time = state.stream_time  # (per event: an aggregate may write the table, and move it)
            if stream_time is None or ts > stream_time:
                stream_time = state.stream_time = ts  # (recorded for the store by the next checkpoint)
            if size:  # (TumblingWindow.open_starts_ms, inline)
                start = ts - ts % size
                starts: Iterable[int] = (start,) if stream_time < start + closes_after else ()
            else:
                starts = open_starts(ts, stream_time)
            late = True
            for start in starts:
                late = False
                window_key_ = (key, start)
                live = live_at.get(start)
                if live is None:
                    live = live_at[start] = {}
                in_store = live.get(key)
                if in_store is None:  # a new window: nowhere yet, so nothing to look up
                    current = self._default()
                    live[key] = False  # not in the store until a checkpoint writes it (`stored`)
                    if latest is not None:
                        latest[window_key_] = ts
                else:
                    if latest is not None and ts > latest.get(window_key_, ts):
                        latest[window_key_] = ts
                    current = buffer.get(window_key_, MISSING)
                    if current is MISSING:
                        if flushing is not None:
                            current = flushing.get(window_key_, MISSING)
                        if current is MISSING and in_store:
                            current = part.stored(window_key(found[0], start))
                    if current is MISSING or current is DELETED:
                        current = self._default()
                buffer[window_key_] = fun(current, arg)
            if late:
                window = self.window
                closes_at = window.current_start_ms(ts) + window.size_ms + window.grace_ms
                self._late(part, event, ts, stream_time, stream_time - closes_at + 1)
            else:
                applied += 1
        return applied

    def _default(self) -> Any:
        if self.table.default is None:
            raise KeyError("no value for this window and the table has no default")
        return self.table.default()

    def value_at(self, key: Any, ts_ms: int) -> Any:
        """The value of the newest window of `key` containing `ts_ms` (the default if none)."""
        part, inner = self.table.route_read(key)
        start = self.window.current_start_ms(ts_ms)
        value = part.get((key, start), window_key(inner, start))
        return self._default() if value is MISSING else value

    # -- closing and expiry (called at the checkpoint) ----------------------------------------------

    def close_windows(self, part: TablePartition) -> list[Closed]:
        """The windows of this partition that closed since the last checkpoint, as (store key, value)
        records, oldest first; marks them emitted (an engine record in the same checkpoint)."""
        state = part.windows
        if self.closed_topic is None or state is None or state.stream_time is None:
            return part.take_closes()
        done = state.closed_upto
        starts = sorted(s for s in state.live if (done is None or s > done)
                        and self.window.closed(s, state.stream_time))
        if not starts:
            return part.take_closes()
        keys = [(key, start) for start in starts for key in sorted(state.live[start], key=repr)]
        return self._emit(part, state, keys, starts[-1])

    def _emit(self, part: TablePartition, state: WindowState, keys: list[tuple[Any, ...]],
              closed_upto: int) -> list[Closed]:
        """Closed windows (their table keys, in order) as (store key, value) records, marked emitted up to
        `closed_upto` (an engine record in the same checkpoint). A window's time is the largest event time
        of its events where this run saw them all (`state.latest`), else its end - 1, the latest time an
        event in it can have (a window that was in the store when the partition was taken on: what its
        events' times were is not kept)."""
        latest = state.latest
        size = self.window.size_ms
        for window_key_ in keys:
            self._emit_final(part, window_key_, latest.pop(window_key_, window_key_[1] + size - 1))
        state.closed_upto = closed_upto
        part.meta[CLOSED_KEY] = str(closed_upto).encode()
        return part.take_closes()

    def expire(self, part: TablePartition) -> int:
        """Delete this partition's windows older than `expires` (called as a checkpoint takes the buffer);
        returns how many were deleted. A window the store has gets a tombstone (store and changelog); one
        written only since the last checkpoint is dropped from the buffer, never sent: when event time
        runs ahead of the checkpoints (catching up, reprocessing), most windows open and expire between
        two of them, and their writes and tombstones were most of a checkpoint's records (Kafka Streams'
        window stores likewise drop writes to expired segments)."""
        state = part.windows
        if state is None or state.stream_time is None:
            return 0
        deleted = 0
        for start in [s for s in state.live if self.window.expired(s, state.stream_time)]:
            for key, in_store in state.live.pop(start).items():
                state.latest.pop((key, start), None)
                if in_store:
                    part.delete((key, start))
                else:
                    part.discard((key, start))
                deleted += 1
        return deleted

    def stored(self, part: TablePartition, writes: Mapping[Any, Any]) -> None:
        """A checkpoint wrote `writes` (window key -> value or DELETED) to the partition's store: those
        windows now need a tombstone when they expire."""
        state = part.windows
        if state is None:
            return
        live = state.live
        for (key, start), value in writes.items():
            if value is not DELETED:
                keys = live.get(start)
                if keys is not None and key in keys:
                    keys[key] = True

    # -- the mapping face ---------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> WindowSet:
        """(Cached per key, bounded like the table's key locations: `table[key] += n` asks for one per event,
        and building a new one each time was a noticeable part of the update.)"""
        found = self._sets.get(key)
        if found is None:
            if len(self._sets) >= CACHED_KEYS:
                self._sets.clear()
            found = self._sets[key] = WindowSet(self, key)
        return found

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, WindowSet):
            return  # `table[key] += n` already updated the windows in WindowSet.__iadd__
        self.update(key, _replace, value)

    def __repr__(self) -> str:
        return f"<WindowedTable {self.name!r} {self.window}>"


def _replace(_old: Any, new: Any) -> Any:
    return new


def _call(old: Any, fun: Callable[[Any], Any]) -> Any:
    return fun(old)


class WindowSet:
    """One key's windows, seen from the current event."""

    __slots__ = ("key", "table")

    def __init__(self, table: WindowedTable, key: Any) -> None:
        self.table = table
        self.key = key

    def __iadd__(self, other: Any) -> WindowSet:
        self.table.update(self.key, operator.add, other)
        return self

    def __isub__(self, other: Any) -> WindowSet:
        self.table.update(self.key, operator.sub, other)
        return self

    def apply(self, fun: Callable[[Any], Any]) -> bool:
        """Update every open window containing the event's time with `fun(old)`; False if late."""
        return self.table.update(self.key, _call, fun)

    def current(self) -> Any:
        """The newest window containing the current event's time."""
        event = self.table.require_event()
        return self.table.value_at(self.key, self.table.event_time_ms(event))

    value = current

    def now(self) -> Any:
        """The newest window containing the wall-clock time."""
        return self.table.value_at(self.key, round(self.table.clock() * 1000))

    def delta(self, seconds: float) -> Any:
        """The newest window containing the event's time minus `seconds`."""
        event = self.table.require_event()
        return self.table.value_at(self.key, self.table.event_time_ms(event) - round(seconds * 1000))

    def items(self) -> list[tuple[WindowRange, Any]]:
        """(window, value) of every stored window of this key, oldest first."""
        return list(self.table.windows(self.key))

    def __repr__(self) -> str:
        return f"<WindowSet {self.table.name}[{self.key!r}]>"
