"""Window maths: pure and clock-free. Times are in seconds (int or float) at the edges and exact integer
milliseconds inside, so that 0.1 + 0.2 never decides which window an event falls in.

    TumblingWindow(10).ranges(25)     == [WindowRange(20, 30)]
    HoppingWindow(10, 5).ranges(12)   == [WindowRange(5, 15), WindowRange(10, 20)]

Tumbling and hopping windows are half-open, [start, end); sessions (SessionWindow) span their first to their
last event, both included. A window may still change while stream time (the largest event time
seen) is before `end + grace`; after that it is closed. It is deleted once stream time passes
`end + expires` (`expires` defaults to the larger of the size and the grace).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from engine.errors import ConfigError

Seconds = float | int | timedelta


def to_ms(value: Seconds, name: str) -> int:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise ConfigError(f"window {name} must be seconds or a timedelta, not {value!r}")
    return round(seconds * 1000)


@dataclass(frozen=True, order=True)
class WindowRange:
    """[start, end) in seconds."""

    start: float
    end: float

    @classmethod
    def from_ms(cls, start_ms: int, end_ms: int) -> WindowRange:
        return cls(_seconds(start_ms), _seconds(end_ms))


def _seconds(ms: int) -> float:
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


class WindowKind(Protocol):
    """What every kind of window tells the rest of engine (exports, the CLI): its parameters."""

    @property
    def grace_ms(self) -> int: ...

    def spec(self) -> dict[str, int]:
        """The window's parameters in ms, as exports record them (size_ms, step_ms, grace_ms, expires_ms;
        gap_ms for sessions, retention_ms for sliding windows)."""


class Window(WindowKind, Protocol):
    """What a windowed table needs of a kind of window of fixed size (tumbling and hopping): which windows
    an event time falls in, and when a window closes and expires. Exact ms. (Session windows have no
    fixed size, and their own table: engine.tables.sessions.)"""

    @property
    def size_ms(self) -> int: ...

    @property
    def closes_after_ms(self) -> int:
        """A window closes once stream time reaches its start plus this (its end plus grace)."""

    @property
    def expires_ms(self) -> int:
        """A window expires once stream time reaches its end plus this."""

    def starts_ms(self, ts_ms: int) -> list[int]:
        """The start of every window containing `ts_ms`, oldest first; none starts before the epoch."""

    def open_starts_ms(self, ts_ms: int, stream_time_ms: int) -> list[int]:
        """`starts_ms(ts_ms)` without the windows already closed at `stream_time_ms`: those an event at
        `ts_ms` updates (one call per event: the windowed update's hot path)."""

    def current_start_ms(self, ts_ms: int) -> int:
        """The start of the newest window containing `ts_ms`."""

    def closed(self, start_ms: int, stream_time_ms: int) -> bool:
        """Whether the window starting at `start_ms` is final at `stream_time_ms` (its end plus grace)."""

    def expired(self, start_ms: int, stream_time_ms: int) -> bool:
        """Whether the window starting at `start_ms` may be deleted at `stream_time_ms`."""


@dataclass(frozen=True)
class HoppingWindow:
    """Windows of `size`, starting every `step` (a tumbling window is a hopping one with step == size)."""

    size: Seconds
    step: Seconds
    expires: Seconds | None = None
    grace: Seconds = 0
    # Exact milliseconds, derived once in __post_init__ (the window maths runs per event).
    size_ms: int = field(init=False, repr=False, compare=False)
    step_ms: int = field(init=False, repr=False, compare=False)
    grace_ms: int = field(init=False, repr=False, compare=False)
    expires_ms: int = field(init=False, repr=False, compare=False)
    # A window is final (closed) once stream time reaches its start plus this: its end plus grace.
    closes_after_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size, step, grace = to_ms(self.size, "size"), to_ms(self.step, "step"), to_ms(self.grace, "grace")
        if size <= 0:
            raise ConfigError(f"window size must be positive, not {self.size!r}")
        if step <= 0 or step > size:
            raise ConfigError(f"window step must be positive and at most the size, not {self.step!r}")
        if grace < 0:
            raise ConfigError(f"window grace must not be negative, not {self.grace!r}")
        expires = max(size, grace) if self.expires is None else to_ms(self.expires, "expires")
        if expires < grace:
            raise ConfigError("window expires must be at least its grace, or late events would "
                              "update windows already deleted")
        for name, value in (("size_ms", size), ("step_ms", step), ("grace_ms", grace),
                            ("expires_ms", expires), ("closes_after_ms", size + grace)):
            object.__setattr__(self, name, value)  # a frozen dataclass sets derived fields this way

    # -- milliseconds (what tables use) -------------------------------------------------------------

    def spec(self) -> dict[str, int]:
        return {"size_ms": self.size_ms, "step_ms": self.step_ms, "grace_ms": self.grace_ms,
                "expires_ms": self.expires_ms}

    def starts_ms(self, ts_ms: int) -> list[int]:
        """Starts of every window containing `ts_ms`, oldest first. No window starts before the epoch (as in
        Kafka Streams' TimeWindows), so a time near 0 is in fewer hopping windows."""
        size, step = self.size_ms, self.step_ms
        last = ts_ms - ts_ms % step
        first = max(0, last - ((size - 1) // step) * step)
        return [s for s in range(first, last + 1, step) if s <= ts_ms < s + size]

    def current_start_ms(self, ts_ms: int) -> int:
        """The newest window containing `ts_ms` (the one that started last)."""
        return ts_ms - ts_ms % self.step_ms

    def open_starts_ms(self, ts_ms: int, stream_time_ms: int) -> list[int]:
        closes_after = self.closes_after_ms
        return [start for start in self.starts_ms(ts_ms) if stream_time_ms < start + closes_after]

    def closed(self, start_ms: int, stream_time_ms: int) -> bool:
        """Whether the window can no longer change: stream time reached its end plus grace."""
        return stream_time_ms >= start_ms + self.closes_after_ms

    def expired(self, start_ms: int, stream_time_ms: int) -> bool:
        return stream_time_ms >= start_ms + self.size_ms + self.expires_ms

    # -- seconds (what people use) ------------------------------------------------------------------

    def ranges(self, ts: float) -> list[WindowRange]:
        ts_ms = to_ms(ts, "timestamp")
        return [WindowRange.from_ms(s, s + self.size_ms) for s in self.starts_ms(ts_ms)]

    def current(self, ts: float) -> WindowRange:
        start = self.current_start_ms(to_ms(ts, "timestamp"))
        return WindowRange.from_ms(start, start + self.size_ms)


class TumblingWindow(HoppingWindow):
    """Back-to-back windows of `size`."""

    def __init__(self, size: Seconds, expires: Seconds | None = None, grace: Seconds = 0) -> None:
        super().__init__(size, size, expires, grace)

    def starts_ms(self, ts_ms: int) -> list[int]:
        """The one window containing `ts_ms` (what every windowed update asks: no range to filter)."""
        if ts_ms < 0:
            return super().starts_ms(ts_ms)
        return [ts_ms - ts_ms % self.size_ms]

    def open_starts_ms(self, ts_ms: int, stream_time_ms: int) -> list[int]:
        """The one window, if still open (no list of starts built and filtered)."""
        if ts_ms < 0:
            return super().open_starts_ms(ts_ms, stream_time_ms)
        start = ts_ms - ts_ms % self.size_ms
        return [start] if stream_time_ms < start + self.closes_after_ms else []


@dataclass(frozen=True)
class SessionWindow:
    """Sessions per key: events less than `gap` apart (event time) are one session, whose window runs from its
    first event's time to its last's; an event within `gap` of two sessions merges them. Kafka Streams'
    `SessionWindows.ofInactivityGapAndGrace(gap, grace)`.

    As in Kafka Streams with `suppress(untilWindowCloses(...))`: an event is late when the session it would
    make ends before stream time minus gap minus grace; a session is emitted final once stream time reaches
    its end plus gap plus grace, or at once if it is written then. A session is gone once stream time
    reaches its end plus gap plus `expires` (default: the grace, so a final session is gone for the next
    event: Kafka Streams' default session store retention, gap plus grace). With a longer `expires`, a
    final session can still be merged into a newer one by an event that bridges the two (that event's own
    session is not late): then the merged session is emitted final in its turn.
    """

    gap: Seconds
    grace: Seconds = 0
    expires: Seconds | None = None
    gap_ms: int = field(init=False, repr=False, compare=False)
    grace_ms: int = field(init=False, repr=False, compare=False)
    expires_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        gap, grace = to_ms(self.gap, "gap"), to_ms(self.grace, "grace")
        if gap <= 0:
            raise ConfigError(f"session gap must be positive, not {self.gap!r}")
        if grace < 0:
            raise ConfigError(f"window grace must not be negative, not {self.grace!r}")
        expires = grace if self.expires is None else to_ms(self.expires, "expires")
        if expires < grace:
            raise ConfigError("window expires must be at least its grace, or sessions would be gone before "
                              "they are final")
        for name, value in (("gap_ms", gap), ("grace_ms", grace), ("expires_ms", expires)):
            object.__setattr__(self, name, value)  # a frozen dataclass sets derived fields this way

    def spec(self) -> dict[str, int]:
        return {"gap_ms": self.gap_ms, "grace_ms": self.grace_ms, "expires_ms": self.expires_ms}

    def late(self, end_ms: int, stream_time_ms: int) -> bool:
        """Whether a session ending at `end_ms` can no longer be made or changed at `stream_time_ms`."""
        return end_ms + self.gap_ms + self.grace_ms < stream_time_ms

    def closes_at(self, end_ms: int) -> int:
        """The stream time at which a session ending at `end_ms` is emitted final."""
        return end_ms + self.gap_ms + self.grace_ms

    def expired(self, end_ms: int, stream_time_ms: int) -> bool:
        return end_ms + self.gap_ms + self.expires_ms <= stream_time_ms


@dataclass(frozen=True)
class SlidingWindow:
    """Windows of `size` that slide with the events: Kafka Streams'
    `SlidingWindows.ofTimeDifferenceAndGrace(size, grace)`. Two events are in a window together when their
    times are at most `size` apart; the windows that exist are those where events are: each event's own
    window [t - size, t], and the one just after it, [t + 1, t + 1 + size], when a later event falls in it;
    both ends included, no empty window.

    A window takes updates while its end is at least stream time minus grace, and is emitted final once
    stream time reaches its end plus grace (at once if updated then); an event whose window after it would
    end before stream time minus grace is late. The windows of a key are kept for 2 * size + grace of stream
    time (Kafka Streams' default retention): what later events need to make theirs.
    """

    size: Seconds
    grace: Seconds = 0
    size_ms: int = field(init=False, repr=False, compare=False)
    grace_ms: int = field(init=False, repr=False, compare=False)
    retention_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size, grace = to_ms(self.size, "size"), to_ms(self.grace, "grace")
        if size <= 0:
            raise ConfigError(f"window size must be positive, not {self.size!r}")
        if grace < 0:
            raise ConfigError(f"window grace must not be negative, not {self.grace!r}")
        for name, value in (("size_ms", size), ("grace_ms", grace), ("retention_ms", 2 * size + grace)):
            object.__setattr__(self, name, value)  # a frozen dataclass sets derived fields this way

    def spec(self) -> dict[str, int]:
        return {"size_ms": self.size_ms, "grace_ms": self.grace_ms, "retention_ms": self.retention_ms}


@dataclass(frozen=True)
class JoinWindows:
    """How far apart in event time two records of a stream-stream join may be: Kafka Streams'
    `JoinWindows.ofTimeDifferenceAndGrace(within, grace)`. A record joins every record of the other stream
    with its key whose time is at most `within` before or after its own. A left (outer) join's record with no
    partner is emitted alone once stream time passes its time plus `within` plus `grace`, when no partner
    can come any more. Each stream's records are kept for 2 * within + grace of their stream's time (Kafka
    Streams' join window store retention): a record later than that finds none of them."""

    within: Seconds
    grace: Seconds = 0
    within_ms: int = field(init=False, repr=False, compare=False)
    grace_ms: int = field(init=False, repr=False, compare=False)
    retention_ms: int = field(init=False, repr=False, compare=False)
    size_ms: int = field(init=False, repr=False, compare=False)  # a buffered record's window: its own time

    def __post_init__(self) -> None:
        within, grace = to_ms(self.within, "within"), to_ms(self.grace, "grace")
        if within < 0:
            raise ConfigError(f"join within must not be negative, not {self.within!r}")
        if grace < 0:
            raise ConfigError(f"join grace must not be negative, not {self.grace!r}")
        for name, value in (("within_ms", within), ("grace_ms", grace), ("retention_ms", 2 * within + grace),
                            ("size_ms", 0)):
            object.__setattr__(self, name, value)  # a frozen dataclass sets derived fields this way

    def spec(self) -> dict[str, int]:
        return {"within_ms": self.within_ms, "grace_ms": self.grace_ms, "retention_ms": self.retention_ms}


@dataclass(frozen=True)
class History:
    """How long a versioned table (engine.tables.versioned) keeps the versions a key had: Kafka Streams'
    versioned store's history retention. A version is answered as of any time no older than the table's
    stream time (the newest version time written) minus `retention`; an update older than that is late,
    and a version no longer valid at that time is removed. The key's latest version is kept whatever its age
    (unless it is a deletion)."""

    retention: Seconds
    retention_ms: int = field(init=False, repr=False, compare=False)
    grace_ms: int = field(init=False, repr=False, compare=False)  # what keeps late updates: the retention

    def __post_init__(self) -> None:
        retention = to_ms(self.retention, "history")
        if retention <= 0:
            raise ConfigError(f"a versioned table's history must be positive, not {self.retention!r}")
        object.__setattr__(self, "retention_ms", retention)
        object.__setattr__(self, "grace_ms", retention)

    def spec(self) -> dict[str, int]:
        return {"history_ms": self.retention_ms}
