"""The event-time base every windowed face of a table stands on (fixed windows in engine.tables.windowed,
sessions, sliding windows, join buffers, versioned tables): event time read once per event, stream time per
partition (the largest event time processed, advanced by events or by idleness with `close_idle_after`),
recorded for the store so that late events stay late across restarts, the final-results and late topics, and
late events counted and reported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.errors import ConfigError, EngineError, InvalidTimestamp
from engine.scope import PerWorker
from engine.streams.current import current_event
from engine.tables.keys import (
    CLOSED_KEY,
    META_PREFIX,
    STREAM_TIME_KEY,
    WindowedChangelogKeyCodec,
    key_prefix,
    window_bounds,
)
from engine.tables.late import LateEvent, LateEvents
from engine.tables.partition import DELETED, MISSING, WindowState
from engine.topics import event_time_ms
from engine.windows import WindowRange

if TYPE_CHECKING:
    from datetime import datetime

    from engine.events import Event
    from engine.stores.base import StoreView
    from engine.tables.base import BaseTable
    from engine.tables.partition import TablePartition
    from engine.topics import Topic
    from engine.windows import WindowKind

Timestamp = Callable[[Any], "float | int | datetime"]

log = logging.getLogger(__name__)


def advance_stream_time(state: WindowState, ts: int) -> int:
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
    def latest_late_events(self) -> list[LateEvent]:
        """The latest late events of the run `late_events` counts, the latest first."""
        return list((self._late_runs.inside() or self._late_last).latest)

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
        return self.table.route_write(event.key, event)[0]

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

    def require_event(self) -> Event:
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
        late.latest.appendleft(LateEvent(time.time(), event.topic, event.partition, event.offset,
                                         stream_time - ts))
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
            advance_stream_time(state, processed)
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
            part, inner = self.table.route_read(key)
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
