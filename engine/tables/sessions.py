"""Session tables: a table whose keys are (key, start, end), one per session of events per key (Kafka Streams'
session windows), maintained by a pipeline's aggregation (engine.pipelines):

    visits = app.stream(clicks).group_by(lambda c: c.user, key_type=str).session(300, grace=10).count("v")

An event at time t joins every session of its key that ends at t - gap or later and starts at t + gap or
earlier: none makes a new session [t, t]; one is extended to t; several are merged into one, whose value is
their values combined by `merge` (then the event added): the sessions merged away get tombstones in the
changelog, as in Kafka Streams. A session's store key carries its end (engine.tables.keys), so a session that
grows is written under a new key and its old one deleted; between two checkpoints the buffer coalesces that
to one write and, if the store had the old one, one tombstone.

Each partition keeps, in memory, every live session of every key (start -> end, and whether the store has
it; engine.tables.keyed). Stream time and lateness work as for the other windowed tables
(engine.tables.windowed), with a session's end in place of a window's: see engine.windows.SessionWindow.

Final results on `closed()`: engine.tables.keyed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.tables.event_time import LATEST_EVENT_TIME_MS, advance_stream_time
from engine.tables.keyed import KeyedWindowsTable
from engine.tables.keys import session_key
from engine.tables.partition import DELETED, MISSING, EventWindowState, KeyedWindowState

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.events import Event
    from engine.tables.base import BaseTable
    from engine.tables.event_time import Timestamp
    from engine.tables.partition import TablePartition, WindowState
    from engine.topics import Topic
    from engine.windows import SessionWindow


class SessionTable(KeyedWindowsTable):
    """The session face of a Table: sessions per key, each aggregated with `add(aggregate, value)` from
    `initial()`, two sessions merged with `merge(aggregate, aggregate)`."""

    def __init__(
        self,
        table: BaseTable,
        window: SessionWindow,
        *,
        initial: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any],
        timestamp: Timestamp | None = None,
        late_topic: Topic | None = None,
        clock: Callable[[], float] = wall_time,
        close_idle_after: float | None = None,
    ) -> None:
        super().__init__(table, window, initial=initial, add=add, timestamp=timestamp, late_topic=late_topic,
                         clock=clock, close_idle_after=close_idle_after)
        self.window = window
        self.merge = merge

    def _index(self, state: WindowState, stored: Any) -> None:
        assert isinstance(state, KeyedWindowState)
        key, start, end = stored
        state.windows.setdefault(key, {})[start] = (end, True)

    def _window_key(self, key: Any, start: int, bound: int) -> tuple[Any, ...]:
        return key, start, bound

    def _closes_at(self, window_key_: tuple[Any, ...]) -> int:
        return self.window.closes_at(window_key_[2])

    def _latest(self, state: EventWindowState, window_key_: tuple[Any, ...]) -> int:
        """A session ends at its last event."""
        end: int = window_key_[2]
        return end

    # -- updates ------------------------------------------------------------------------------------

    def apply(self, part: TablePartition, event: Event, key: Any, value: Any) -> bool:
        """Add the event's `value` to the session of `key` its time makes (merging the sessions it
        bridges); False if that session would be late. Then emit the sessions this event closed (after the
        merge: a session merged away by the event that closes it is not final, as in Kafka Streams)."""
        ts = event.time_ms  # the topic's extractor (or the record's time), applied at dispatch
        if ts is None or not 0 <= ts <= LATEST_EVENT_TIME_MS or self.timestamp is not None:
            ts = self._valid_time(event)
        found_key = self.table.located.get(key)  # (the key checked and encoded, cached)
        inner = found_key[0] if found_key is not None else self.table.locate_new(key)[0]
        state = part.windows or self._state(part)
        assert isinstance(state, KeyedWindowState)
        before = state.stream_time
        # Idle time first: the event may be late by it, and the windows it closed are emitted below (stream
        # time moved since `before`), before any the event itself makes.
        if self.close_idle_after is not None:
            self._move_idle(state)
        stream_time = state.stream_time
        if stream_time is None or ts > stream_time:
            stream_time = advance_stream_time(state, ts)
        window = self.window
        gap = window.gap_ms
        sessions = state.windows.get(key)
        found: list[tuple[int, int, bool]] = []
        start = end = ts
        if sessions:
            # Sessions past `expires` are gone for events, whether or not a checkpoint deleted them yet.
            low = ts - gap if before is None else max(ts - gap, before - gap - window.expires_ms + 1)
            high = ts + gap
            for session_start, (session_end, in_store) in sessions.items():
                if session_end >= low and session_start <= high:
                    found.append((session_start, session_end, in_store))
                    start, end = min(start, session_start), max(end, session_end)
        if window.late(end, stream_time):
            self._late(part, event, ts, stream_time, stream_time - (end + gap + window.grace_ms))
            return False
        aggregate, kept = self.initial(), False
        for session_start, session_end, in_store in sorted(found):
            aggregate = self.merge(aggregate, self._value(part, inner, key, session_start, session_end,
                                                          in_store))
            if (session_start, session_end) == (start, end):
                kept = in_store
            else:
                self._remove(part, state, key, session_start, session_end, in_store)
        sessions = state.windows.get(key)  # (a merge may have removed the key's last entry)
        if sessions is None:
            sessions = state.windows[key] = {}
        sessions[start] = (end, kept)
        window_key_ = (key, start, end)
        part.buffer[window_key_] = self.add(aggregate, value)
        self._written(part, state, window_key_, len(found) != 1 or found[0][:2] != (start, end), stream_time)
        if stream_time != before and state.due:
            self._close_due(part, state)
        return True

    def _value(self, part: TablePartition, inner: bytes, key: Any, start: int, end: int,
               in_store: bool) -> Any:
        window_key_ = (key, start, end)
        value = part.cached(window_key_)
        if value is MISSING and in_store:
            value = part.stored(session_key(inner, start, end))
        return self.initial() if value is MISSING or value is DELETED else value

    @staticmethod
    def _remove(part: TablePartition, state: KeyedWindowState, key: Any, start: int, end: int,
                in_store: bool) -> None:
        """Forget a session: a tombstone if the store has it or a checkpoint is writing it there now."""
        sessions = state.windows[key]
        del sessions[start]
        if not sessions:
            del state.windows[key]
        window_key_ = (key, start, end)
        if in_store or (part.flushing is not None and window_key_ in part.flushing):
            part.delete(window_key_)
        else:
            part.discard(window_key_)

    # -- expiry (called at the checkpoint) ----------------------------------------------------------

    def expire(self, part: TablePartition) -> int:
        """Delete this partition's sessions past `expires`; returns how many were deleted."""
        state = part.windows
        if not isinstance(state, KeyedWindowState) or state.stream_time is None:
            return 0
        now, expired = state.stream_time, self.window.expired
        gone = [(key, start, end, in_store) for key, sessions in state.windows.items()
                for start, (end, in_store) in sessions.items() if expired(end, now)]
        for key, start, end, in_store in gone:
            self._remove(part, state, key, start, end, in_store)
        return len(gone)

    def stored(self, part: TablePartition, writes: Mapping[Any, Any]) -> None:
        """A checkpoint wrote `writes` to the store: the sessions still live as written are now there."""
        state = part.windows
        if not isinstance(state, KeyedWindowState):
            return
        for window_key_, value in writes.items():
            if value is DELETED:
                continue
            key, start, end = window_key_
            sessions = state.windows.get(key)
            if sessions is not None and sessions.get(start, (None,))[0] == end:
                sessions[start] = (end, True)

    def __repr__(self) -> str:
        return f"<SessionTable {self.name!r} {self.window}>"
