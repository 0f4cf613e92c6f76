"""What session and sliding-window tables share (engine.tables.sessions, engine.tables.sliding): windows that
events make, not the clock, so each partition keeps every key's live windows in memory (found per event
without reading the store; rebuilt from the store when the partition is taken on), and final results
decided per event, as Kafka Streams' `suppress(untilWindowCloses(...))` decides them.

Final results: a written window is emitted, with its value then and the largest event time of its events
as its timestamp (a session's end; a sliding window's newest event time, kept for its algorithm), as soon
as stream time reaches its close, or at once if it already has; a window gone before that (merged away,
grown into a new session) is not. Whether a window is emitted depends on the order of events (an event may
merge a session away just as stream time reaches its close; a window at exactly its close can still be
updated, and is emitted again), never on when checkpoints happen: the windows waiting for their close are a
heap, looked at as stream time moves, and the emitted records wait in the partition for the next checkpoint,
which sends them with the offsets of the events that made them. After a restart, the windows whose close
stream time had reached were emitted; the others wait again.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.errors import ConfigError
from engine.streams.current import current_event
from engine.tables.event_time import EventTimeTable
from engine.tables.partition import EventWindowState, KeyedWindowState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from engine.events import Event
    from engine.tables.base import BaseTable
    from engine.tables.event_time import Timestamp
    from engine.tables.partition import Closed, TablePartition, WindowState
    from engine.topics import Topic
    from engine.windows import WindowKind


class KeyedWindowsTable(EventTimeTable):
    """A table of windows made by events, each aggregated with `add(aggregate, value)` from `initial()`."""

    def __init__(
        self,
        table: BaseTable,
        window: WindowKind,
        *,
        initial: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        timestamp: Timestamp | None = None,
        late_topic: Topic | None = None,
        clock: Callable[[], float] = wall_time,
        close_idle_after: float | None = None,
    ) -> None:
        super().__init__(table, window, timestamp=timestamp, late_topic=late_topic, clock=clock,
                         close_idle_after=close_idle_after)
        self.initial, self.add = initial, add

    def _new_state(self) -> WindowState:
        return KeyedWindowState()

    def _next_due_ms(self, state: WindowState) -> int | None:
        """The next close waiting (the due heap); with none but windows alive, stream time itself (their
        expiry is not indexed by time: rounds go on until they expire); no window: none."""
        assert isinstance(state, EventWindowState)
        if state.due:
            return state.due[0][0]
        return state.stream_time if next(iter(self._live(state)), None) is not None else None

    def _load_state(self, part: TablePartition) -> WindowState:
        """(Then queue the windows whose close stream time has not reached: the others were emitted.)"""
        state = super()._load_state(part)
        assert isinstance(state, EventWindowState)
        if self.closed_topic is not None:
            now = state.stream_time
            for key, start, bound in self._live(state):
                window_key_ = self._window_key(key, start, bound)
                closes_at = self._closes_at(window_key_)
                if now is None or closes_at > now:
                    self._await_close(state, window_key_, closes_at)
        return state

    # -- updates ------------------------------------------------------------------------------------

    def update(self, key: Any, value: Any) -> bool:
        """Add the current event's `value` to the windows of `key` (`apply` in the partition the key
        writes to); False if late."""
        event = current_event() or self.require_event()
        return self.apply(self.table.route_write(key, event)[0], event, key, value)

    def apply(self, part: TablePartition, event: Event, key: Any, value: Any) -> bool:
        """`update` in `part`, routed by the caller (a fused pipeline routes a partition's run of events
        once, engine.fused)."""
        raise NotImplementedError

    # -- what each kind says ------------------------------------------------------------------------

    def _live(self, state: EventWindowState) -> Iterator[tuple[Any, int, int]]:
        """(key, start, bound) of every live window of the partition (`bound`: what the kind keeps beside
        its start: a session's end, a sliding window's newest event time)."""
        assert isinstance(state, KeyedWindowState)
        for key, windows in state.windows.items():
            for start, (bound, _) in windows.items():
                yield key, start, bound

    def _bound(self, state: EventWindowState, key: Any, start: int) -> int | None:
        """The bound of the live window of `key` at `start`, or None if there is none."""
        assert isinstance(state, KeyedWindowState)
        entry = state.windows.get(key, {}).get(start)
        return None if entry is None else entry[0]

    def _window_key(self, key: Any, start: int, bound: int) -> tuple[Any, ...]:
        """The table key of a window of the index (`bound`: what the kind keeps beside its start)."""
        raise NotImplementedError

    def _closes_at(self, window_key_: tuple[Any, ...]) -> int:
        """The stream time at which a window is final."""
        raise NotImplementedError

    def _latest(self, state: EventWindowState, window_key_: tuple[Any, ...]) -> int:
        """The largest event time of a live window's events: its final record's timestamp."""
        raise NotImplementedError

    # -- final results ------------------------------------------------------------------------------

    def _written(self, part: TablePartition, state: EventWindowState, window_key_: tuple[Any, ...],
                 new: bool, stream_time: int) -> None:
        """A window was written: emit it final now if stream time reached its close, else (if `new`, not
        already waiting) queue it."""
        if self.closed_topic is None:
            return
        closes_at = self._closes_at(window_key_)
        if closes_at <= stream_time:
            self._emit_final(part, window_key_, self._latest(state, window_key_))
        elif new:
            self._await_close(state, window_key_, closes_at)

    @staticmethod
    def _await_close(state: EventWindowState, window_key_: tuple[Any, ...], closes_at: int) -> None:
        state.sequence += 1
        heappush(state.due, (closes_at, state.sequence, window_key_))

    def _close_due(self, part: TablePartition, state: EventWindowState) -> None:
        """Emit every window waiting for a close that stream time has reached, unless it is gone (merged
        away, grown into another, expired)."""
        due, now = state.due, state.stream_time
        assert now is not None
        while due and due[0][0] <= now:
            _, _, window_key_ = heappop(due)
            key, start = window_key_[0], window_key_[1]
            bound = self._bound(state, key, start)
            if bound is not None and self._window_key(key, start, bound) == window_key_:
                self._emit_final(part, window_key_, self._latest(state, window_key_))

    def close_windows(self, part: TablePartition) -> list[Closed]:
        """The final windows since the last checkpoint, as (store key, value) records in the order they
        closed, with those that the checkpoint's own advance of stream time (idleness, events that wrote
        no window) closes."""
        state = part.windows
        if isinstance(state, EventWindowState) and state.stream_time is not None and self.closed_topic:
            self._close_due(part, state)
        return part.take_closes()

    # -- the mapping face ---------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        raise ConfigError(f"table {self.name!r} holds windows that its pipeline's aggregation updates; read "
                          "them with windows(key)")
