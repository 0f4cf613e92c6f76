"""A sliding-window partition's state in memory (engine.tables.sliding): each key's live windows in start
order (`KeyWindows`), and Kafka Streams' handling of an event earlier than `size` after the epoch
(`EarlyWindows`, its processEarly)."""

from __future__ import annotations

import copy
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, Any

from engine.tables.partition import MISSING, EventWindowState

if TYPE_CHECKING:
    from engine.tables.partition import TablePartition
    from engine.tables.sliding import SlidingTable


# Aggregates no function can change in place: shared between windows as they are.
_IMMUTABLE = frozenset({int, float, bool, str, bytes, type(None)})


def own(aggregate: Any) -> Any:
    """A window's own copy of another window's aggregate (a new window starts from one): an aggregate that
    `add` changes in place (a list appended to) would otherwise be shared, and an event added to one window
    would be in both (Kafka Streams' windows are serialized: none shares another's)."""
    return aggregate if type(aggregate) in _IMMUTABLE else copy.deepcopy(aggregate)


class KeyWindows:
    """One key's live windows in start order, as parallel lists (no object per window: between two
    checkpoints a partition holds hundreds of thousands of windows, and objects the garbage collector
    tracks made its passes a large part of the per-event time): each window's start (bisected), its
    aggregate (MISSING until first read, for a window the store had when the partition was taken on), the
    time of its newest event (Kafka Streams' ValueAndTimestamp: together), whether the store has it
    (expiring one it never had needs no tombstone), and whether it changed since it was last put in the
    partition's buffer."""

    __slots__ = ("changed", "newest", "starts", "stored", "values")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.values: list[Any] = []
        self.newest: list[int] = []
        self.stored: list[bool] = []
        self.changed: list[bool] = []

    def __len__(self) -> int:
        return len(self.starts)

    def find(self, start: int) -> int | None:
        """The index of the window at `start`, or None."""
        starts = self.starts
        at = bisect_left(starts, start)
        return at if at < len(starts) and starts[at] == start else None

    def insert(self, at: int, start: int, value: Any, newest: int, stored: bool = False) -> None:
        """A new window (changed), or one the store has (`stored`: not changed)."""
        self.starts.insert(at, start)
        self.values.insert(at, value)
        self.newest.insert(at, newest)
        self.stored.insert(at, stored)
        self.changed.insert(at, not stored)

    def cut(self, upto: int) -> None:
        """Forget the first `upto` windows."""
        del self.starts[:upto], self.values[:upto], self.newest[:upto]
        del self.stored[:upto], self.changed[:upto]


class SlidingState(EventWindowState):
    """A sliding-window partition's live windows: each key's, in start order, and the keys with windows
    changed since they were last put in the buffer. Between two checkpoints, windows past the retention stay
    until expiry; an event never sees them (`visible_from`)."""

    __slots__ = ("changed", "keys")

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[Any, KeyWindows] = {}
        self.changed: set[Any] = set()


class EarlyWindows:
    """Kafka Streams' processEarly, for an event less than `size` after the epoch: its window would start
    before 0, so it goes into the window [0, size] instead."""

    def __init__(self, table: SlidingTable, part: TablePartition, state: SlidingState, windows: KeyWindows,
                 key: Any, value: Any, ts: int, close_time: int, stream_time: int, visible_from: int) -> None:
        self.table, self.part, self.state, self.windows = table, part, state, windows
        self.key, self.value, self.ts = key, value, ts
        self.close_time, self.stream_time, self.visible_from = close_time, stream_time, visible_from

    def _update(self, start: int, aggregate: Any, newest: int) -> None:
        """updateWindowAndForward: add the event to a window still open (else it is skipped)."""
        table = self.table
        if start + table.window.size_ms >= self.close_time:
            table.put_window(self.part, self.state, self.windows, self.key, start,
                             table.add(aggregate, self.value), max(self.ts, newest), self.stream_time)

    def run(self) -> None:
        ts, table = self.ts, self.table
        combined: tuple[Any, int] | None = None
        right: tuple[Any, int] | None = None
        right_made = False
        previous: int | None = None
        windows = self.windows
        low, high = bisect_left(windows.starts, self.visible_from), bisect_right(windows.starts, ts + 1)
        for start in windows.starts[low:high]:
            at = windows.find(start)  # (an update before may have made a window below)
            assert at is not None
            aggregate = windows.values[at]
            if aggregate is MISSING:
                aggregate = table.stored_value(self.part, windows, at, self.key)
            newest = windows.newest[at]
            if start == 0:
                combined = (aggregate, newest)
                if newest < ts:
                    previous = newest
            elif start <= ts:
                right = (own(aggregate), newest)  # (as it is before the event)
                self._update(start, aggregate, newest)
            elif start == ts + 1:
                right_made = True
        if right is None and combined is not None and combined[1] > ts:
            right = (own(combined[0]), combined[1])
        if not right_made and right is not None and right[1] > ts:
            table.put_window(self.part, self.state, self.windows, self.key, ts + 1, *right, self.stream_time)
        if previous is not None and self.windows.find(previous + 1) is None:
            self._update(previous + 1, table.initial(), ts)
        self._update(0, *(combined if combined is not None else (table.initial(), ts)))
