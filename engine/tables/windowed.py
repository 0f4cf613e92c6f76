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

import asyncio
import logging
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.errors import ConfigError, EngineError, InvalidTimestamp
from engine.partitioner import CACHED_KEYS
from engine.scope import PerWorker
from engine.streams.current import current_event
from engine.tables.keys import (
    CLOSED_KEY,
    META_PREFIX,
    STREAM_TIME_KEY,
    WindowedChangelogKeyCodec,
    key_prefix,
    window_bounds,
    window_key,
)
from engine.tables.late import LateEvents
from engine.tables.partition import DELETED, MISSING, WindowState
from engine.topics import event_time_ms
from engine.windows import TumblingWindow, WindowRange

if TYPE_CHECKING:
    from datetime import datetime

    from engine.events import Event
    from engine.stores.base import StoreView
    from engine.streams.current import Processing
    from engine.tables.base import BaseTable
    from engine.tables.partition import Closed, TablePartition
    from engine.topics import Topic
    from engine.windows import Window, WindowKind

Timestamp = Callable[[Any], "float | int | datetime"]

log = logging.getLogger(__name__)


def _advance(state: WindowState, ts: int) -> int:
    """Stream time is the largest event time seen: raise it to `ts`; returns it. (Recorded for the store
    by the next checkpoint, `EventTimeTable.advance`, not per event: late events stay late across
    restarts.)"""
    current = state.stream_time
    if current is None or ts > current:
        state.stream_time = current = ts
    return current


# Event times past this (the year 3000, in ms) are refused: an extractor returning milliseconds where seconds
# are meant gives times a thousand times too large, and no record's own timestamp is ever that late.
LATEST_EVENT_TIME_MS = 32_503_680_000_000

class EventTimeTable:
    """What every windowed face of a table shares (fixed-size windows here, sessions in
    engine.tables.sessions): event time, stream time per partition (advanced by events, or by idleness with
    `close_idle_after`), the final-results and late topics, and reporting late events."""

    # How a late event's report names the table, what befell the event, and what would have kept it.
    kind_name = "windowed table"
    late_means = "left out of its windows"
    kept_by = "a grace"

    def __init__(
        self,
        table: BaseTable,
        window: WindowKind,
        *,
        timestamp: Timestamp | None = None,
        late_topic: Topic | None = None,
        clock: Callable[[], float] = wall_time,
        close_idle_after: float | None = None,
    ) -> None:
        if close_idle_after is not None and close_idle_after <= 0:
            raise ConfigError(f"table {table.name!r}: close_idle_after must be a positive number of seconds")
        self.table = table
        self.window_kind = window
        self.close_idle_after = close_idle_after
        self.timestamp = timestamp
        self.late_topic = late_topic
        self.clock = clock
        self._late_runs: PerWorker[LateEvents] = PerWorker()  # each running worker's (engine.tables.late)
        self._late_last = LateEvents()  # the run started last: what a read outside every worker sees
        self.topics: dict[str, Topic] = {}
        self.closed_topic: Topic | None = None

    @property
    def name(self) -> str:
        return self.table.name

    def bind(self, worker: object) -> None:
        """A worker starts running this table: its late events count from zero."""
        self._late_last = LateEvents()
        self._late_runs.bind(worker, self._late_last)

    def unbind(self, worker: object) -> None:
        """The worker stopped (its count stays readable until the next run starts)."""
        self._late_runs.unbind(worker)

    @property
    def late_events(self) -> int:
        """Events too late for every window they belong to, in the run of the worker the running code
        belongs to; outside every worker (a test, after its run), in the run started last."""
        return (self._late_runs.inside() or self._late_last).count

    def changelog(self) -> Topic:
        return self.table.changelog()

    def changes(self) -> Topic:
        """Every update of every window: ((key, WindowRange), value) events (see BaseTable.changes)."""
        return self.table.changes()

    def closed(self) -> Topic:
        """The final-results topic: each window once, when it closes; keys are (key, WindowRange)."""
        if self.closed_topic is None:
            from engine.topics import Topic

            self.closed_topic = Topic(f"{self.table.app_id}-{self.name}-closed", internal=True)
            self.closed_topic.use_codecs(
                key=WindowedChangelogKeyCodec(self.table.plain_key_codec, getattr(self.window_kind, "size_ms",
                                                                                  None)),
                value=self.table.value_codec,
            )
        return self.closed_topic

    def own_partition(self, event: Event) -> TablePartition:
        """The partition `event`'s own key writes to, routed and checked as `update` does: what a fused
        pipeline (engine.fused) gives `apply` for the events of one partition's run, each writing its own
        key (the event's own key is in the event's partition, whatever its hash says)."""
        return self.table._route_write(event.key, event)[0]

    # -- event time ---------------------------------------------------------------------------------

    def event_time_ms(self, event: Event) -> int:
        extract = self.timestamp
        if extract is None:
            known = event.time_ms  # the topic's extractor, already applied at dispatch
            if known is not None:
                return known
            topic = self.topics.get(event.topic)
            extract = topic.timestamp if topic is not None else None
        return event_time_ms(extract, event)

    def _valid_time(self, event: Event) -> int:
        """The event's time in ms, refused if the record has none."""
        ts = event.time_ms  # the topic's extractor, applied at dispatch
        if ts is None or self.timestamp is not None:
            ts = self.event_time_ms(event)
        if ts < 0:
            raise InvalidTimestamp(
                f"{self.kind_name} {self.name!r}: {event.topic}[{event.partition}]@{event.offset} has no "
                f"valid event time ({ts} ms): it was written without a timestamp; give the topic or the "
                "table a timestamp= extractor"
            )
        if ts > LATEST_EVENT_TIME_MS:  # (a record's own timestamp never is: the broker refuses it)
            raise InvalidTimestamp(
                f"{self.kind_name} {self.name!r}: {event.topic}[{event.partition}]@{event.offset} has an "
                f"event time past the year 3000 ({ts // 1000} s): a timestamp= extractor returns seconds (an "
                "int or a float) or a datetime; one returning milliseconds puts windows in the year 50,000 "
                "(divide by 1000)"
            )
        return ts

    def _state(self, part: TablePartition) -> WindowState:
        state = part.windows
        if state is None:
            state = part.windows = self._load_state(part)
        return state

    def _load_state(self, part: TablePartition) -> WindowState:
        """Rebuild stream time and the index of live windows from the store (once per activation)."""
        state = self._new_state()
        state.seen_time, state.moved_at = None, self.clock()  # (idle from when it is taken here, unless...)
        raw = part.store.get(STREAM_TIME_KEY)
        if raw is not None:
            # "<stream time>", or with close_idle_after "<stream time> <moved_at> <idle_upto or ->": the wall
            # clock's part of it, so that a new owner goes on moving an idle partition's time from where
            # the last checkpoint left it (no checkpoint records it while the partition waits for its
            # next window to close by the clock: engine.tasks.manager), not from when it took it.
            recorded = raw.split()
            state.stream_time = state.recorded_time = int(recorded[0])
            if len(recorded) == 3 and self.close_idle_after is not None:
                state.moved_at = float(recorded[1])
                state.idle_upto = None if recorded[2] == b"-" else float(recorded[2])
        raw = part.store.get(CLOSED_KEY)
        if raw is not None:
            state.closed_upto = int(raw)
        state.seen_time = state.stream_time
        decode = self.table.key_codec.decode
        for raw_key, _ in part.store.items():
            if not raw_key.startswith(META_PREFIX):
                self._index(state, decode(raw_key))
        return state

    def _new_state(self) -> WindowState:
        return WindowState()

    def _index(self, state: WindowState, stored: Any) -> None:
        """Add a window the store has (its decoded store key) to the partition's index of live windows."""
        key, start = stored
        state.live.setdefault(start, {})[key] = True

    def _event(self) -> Event:
        event = current_event()
        if event is None:
            raise EngineError(f"{self.kind_name} {self.name!r}: updates need an event (write from an agent)")
        return event

    def _late(self, part: TablePartition, event: Event, ts: int, stream_time: int, needed: int) -> None:
        """Count a late event, keep it for the late topic if asked, and say so (at most once per
        LATE_WARNING_INTERVAL of the worker's clock per table and run): how many, and the grace that would
        have kept them (`needed` ms more than there is)."""
        if self.late_topic is not None:
            part.late.append(event.record)
        late = self._late_runs.inside() or self._late_last
        report = late.add(needed + self.window_kind.grace_ms, asyncio.get_running_loop().time())
        if report is not None:
            log.warning(
                "%s %r: %d late event(s) since the last report (%d in all; e.g. %s[%d]@%d, %.3f s behind "
                "stream time) %s, %s: %s of %.3f s would have kept them (it is %.3f s)", self.kind_name,
                self.name, report[0], late.count, event.topic, event.partition, event.offset,
                (stream_time - ts) / 1000, self.late_means,
                f"sent to {self.late_topic.name} as read (raw bytes)" if self.late_topic is not None
                else "dropped", self.kept_by, report[1] / 1000, self.window_kind.grace_ms / 1000)

    def advance(self, part: TablePartition, processed: int | None) -> None:
        """Advance the partition's stream time to `processed`, the largest event time of the records its
        task processed, written or not (an event an agent filtered out also moves time on). With
        `close_idle_after`, a partition whose stream time no event moved for that long (wall clock) has it
        moved on by the wall-clock time since, so that its windows close. Called by every checkpoint's cut
        (engine.tasks.active), which is where a changed stream time is recorded for the store."""
        state = self._state(part)
        if processed is not None:
            _advance(state, processed)
        self._move_idle(state)
        self._record_stream_time(part, state)

    def _record_stream_time(self, part: TablePartition, state: WindowState) -> None:
        """Put the partition's stream time in its next checkpoint's records (STREAM_TIME_KEY) if it changed
        since the last one: what `_load_state` reads back when the partition is taken on again."""
        if state.stream_time == state.recorded_time:
            return
        state.recorded_time = state.stream_time
        record = str(state.stream_time)
        if self.close_idle_after is not None:
            idle_upto = "-" if state.idle_upto is None else repr(state.idle_upto)
            record = f"{record} {state.moved_at!r} {idle_upto}"
        part.meta[STREAM_TIME_KEY] = record.encode()

    def _move_idle(self, state: WindowState) -> None:
        now = self.clock()
        if state.stream_time != state.seen_time:  # events moved it
            state.seen_time, state.moved_at, state.idle_upto = state.stream_time, now, None
            return
        idle_after = self.close_idle_after
        if idle_after is None or state.stream_time is None or now - state.moved_at < idle_after:
            return
        since = state.idle_upto if state.idle_upto is not None else state.moved_at
        added = round((now - since) * 1000)
        if added > 0:
            state.stream_time = state.seen_time = state.stream_time + added
            state.idle_upto = now

    def clock_work_at(self, part: TablePartition) -> float | None:
        """When the wall clock alone (`close_idle_after`) next gives the partition work: the wall-clock time
        at which its stream time, moved on by the clock once idle, reaches a window's close or expiry; None
        when the clock alone gives it none (no such option, no stream time yet, no window left). The commit
        loop sleeps until then (engine.tasks.manager) instead of running a checkpoint every interval that
        finds nothing: such a checkpoint would only move stream time on, which each event does first
        anyway (`_move_idle`)."""
        state = part.windows
        idle_after = self.close_idle_after
        if idle_after is None or state is None or state.stream_time is None:
            return None
        due = self._next_due_ms(state)
        if due is None:
            return None
        if state.stream_time != state.seen_time or due <= state.stream_time:
            return self.clock()  # (events moved it since a checkpoint looked, or work is due: next round)
        since = state.idle_upto if state.idle_upto is not None else state.moved_at
        return max(state.moved_at + idle_after, since + (due - state.stream_time) / 1000)

    def _next_due_ms(self, state: WindowState) -> int | None:
        """The stream time at which a window of the partition next closes or expires (None: no window).
        A kind that cannot tell says its current stream time: work every round while it has windows."""
        return state.stream_time

    def windows(self, key: Any) -> Iterator[tuple[WindowRange, Any]]:
        for start, end, value in self.windows_ms(key):
            yield WindowRange.from_ms(start, end), value

    def windows_ms(self, key: Any, standby: StoreView | None = None) -> list[tuple[int, int, Any]]:
        """(start ms, end ms, value) of every window of `key`, oldest first: from its partition active here
        (writes since the last checkpoint included), or from a `standby` store (a standby's, or one opened
        offline: as its changelog has it)."""
        overlays: tuple[Mapping[Any, Any], ...] = ()
        if standby is not None:
            store, inner = standby, self.table.plain_key_codec.encode(key)  # (no partition count offline)
            if inner is None:
                raise EngineError(f"windowed table {self.name!r}: a key cannot be None")
        else:
            part, inner = self.table._route_read(key)
            store, overlays = part.store, (part.flushing or {}, part.writes())
        low, high = key_prefix(inner)
        size: int | None = getattr(self.window_kind, "size_ms", None)  # (sessions: their keys have their end)
        values: dict[tuple[int, int], Any] = {}
        decode = self.table.value_codec.decode
        for raw_key, raw_value in store.items(low, high):
            values[window_bounds(raw_key, size)] = decode(raw_value)
        for overlay in overlays:
            for window_key_, value in overlay.items():
                if isinstance(window_key_, tuple) and window_key_[0] == key:
                    bounds = ((window_key_[1], window_key_[2]) if len(window_key_) == 3 or size is None
                              else (window_key_[1], window_key_[1] + size))
                    if value is DELETED:
                        values.pop(bounds, None)
                    else:
                        values[bounds] = value
        return [(start, end, values[start, end]) for start, end in sorted(values)]

    def _value_now(self, part: TablePartition, window_key_: tuple[Any, ...], store_key: bytes) -> Any:
        """A window's value now, or MISSING."""
        return part.get(window_key_, store_key)

    def _emit_final(self, part: TablePartition, window_key_: tuple[Any, ...], time_ms: int) -> None:
        """Keep a window's value now as a final result, for the next checkpoint to send with `time_ms`, the
        largest event time of the window's events, as its timestamp."""
        store_key = self.table.locate(window_key_)[0]
        value = self._value_now(part, window_key_, store_key)
        if value is not MISSING:
            encoded = self.table.value_codec.encode(value)
            assert encoded is not None
            part.unsent_closes.append((store_key, encoded, time_ms))


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
            event = self._event()  # raises, naming the table
        part = self.table._route_write(key, event)[0]
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
        locations = table._locations
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
            found = locations.get(key) or table._locate_new(key)
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
        part, inner = self.table._route_read(key)
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
        event = self.table._event()
        return self.table.value_at(self.key, self.table.event_time_ms(event))

    value = current

    def now(self) -> Any:
        """The newest window containing the wall-clock time."""
        return self.table.value_at(self.key, round(self.table.clock() * 1000))

    def delta(self, seconds: float) -> Any:
        """The newest window containing the event's time minus `seconds`."""
        event = self.table._event()
        return self.table.value_at(self.key, self.table.event_time_ms(event) - round(seconds * 1000))

    def items(self) -> list[tuple[WindowRange, Any]]:
        """(window, value) of every stored window of this key, oldest first."""
        return list(self.table.windows(self.key))

    def __repr__(self) -> str:
        return f"<WindowSet {self.table.name}[{self.key!r}]>"
