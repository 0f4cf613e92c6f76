"""Tables: dict-like state, partitioned like the stream that writes it, backed by a compacted changelog
`<app>-<name>-changelog`; `tumbling(...)`/`hopping(...)` make it windowed (engine.tables.windowed), a
pipeline's `session(...)` a table of sessions (engine.tables.sessions), `sliding(...)` one of sliding windows
(engine.tables.sliding).

    counts = app.Table("word-counts", default=int, key_type=str)
    views = app.Table("views", default=int).hopping(size=600, step=60, expires=3600)
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError, KeyNotInPartition, PartitionNotLocal, PartitionNotReady, TableError
from engine.tables.base import BaseTable
from engine.tables.fk_joins import join_by_foreign_key
from engine.tables.grace_joins import GraceBuffer
from engine.tables.joins import How, join_tables
from engine.tables.keys import VersionedChangelogKeyCodec, WindowedChangelogKeyCodec, WindowKeyCodec
from engine.tables.sessions import SessionTable
from engine.tables.sliding import SlidingTable
from engine.tables.stream_joins import JoinBuffer, PendingBuffer
from engine.tables.versioned import VersionedTable
from engine.tables.versioned_source import VersionedSourceTable
from engine.tables.versions import VersionChangeCodec, VersionValueCodec
from engine.tables.windowed import WindowedTable
from engine.topics import Topic
from engine.windows import (
    History,
    HoppingWindow,
    Seconds,
    SessionWindow,
    SlidingWindow,
    TumblingWindow,
    to_ms,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.tables.declarer import Declarer
    from engine.tables.event_time import Timestamp
    from engine.windows import JoinWindows, Window, WindowKind

__all__ = ["KeyNotInPartition", "PartitionNotLocal", "PartitionNotReady", "Table", "TableError"]


class Table(BaseTable):
    """A table partitioned like the stream that writes it, with its own compacted changelog."""

    declared_by: Declarer | None = None  # the app that declared it (set by App.Table): joins declare there

    # -- joins with another table (engine.tables.joins) ---------------------------------------------

    def join(self, other: BaseTable, *, name: str | None = None,
             foreign_key: Callable[[Any], Any] | None = None) -> BaseTable:
        """The table of (this row, other row) for the keys both have; with `foreign_key`, of (row, the other
        row `foreign_key(row)` names) for each row whose other row exists (engine.tables.fk_joins)."""
        if foreign_key is not None:
            return self._join_by_foreign_key(other, foreign_key, "inner", name)
        return self._join(other, "inner", name)

    def left_join(self, other: BaseTable, *, name: str | None = None,
                  foreign_key: Callable[[Any], Any] | None = None) -> BaseTable:
        """The table of (this row, other row or None) for every key of this table; with `foreign_key`, of
        (row, the other row `foreign_key(row)` names, or None) for every row."""
        if foreign_key is not None:
            return self._join_by_foreign_key(other, foreign_key, "left", name)
        return self._join(other, "left", name)

    def _join_by_foreign_key(self, other: BaseTable, foreign_key: Callable[[Any], Any], how: str,
                             name: str | None) -> BaseTable:
        if self.declared_by is None:
            raise ConfigError(f"table {self.name!r} was not declared with app.Table: it cannot be joined")
        return join_by_foreign_key(self.declared_by, self, other, foreign_key, how, name)

    def outer_join(self, other: BaseTable, *, name: str | None = None) -> BaseTable:
        """The table of (this row or None, other row or None) for every key of either table."""
        return self._join(other, "outer", name)

    def _join(self, other: BaseTable, how: How, name: str | None) -> BaseTable:
        if self.declared_by is None:
            raise ConfigError(f"table {self.name!r} was not declared with app.Table: it cannot be joined")
        return join_tables(self.declared_by, self, other, how, name)

    # -- windows ------------------------------------------------------------------------------------

    def tumbling(
        self,
        size: Seconds,
        *,
        expires: Seconds | None = None,
        grace: Seconds = 0,
        timestamp: Timestamp | None = None,
        late_topic: bool = False,
        close_idle_after: Seconds | None = None,
    ) -> WindowedTable:
        """Make this a table of back-to-back windows of `size` (see engine.tables.windowed)."""
        return self.windowed_by(TumblingWindow(size, expires, grace), timestamp=timestamp,
                                late_topic=late_topic, close_idle_after=close_idle_after)

    def hopping(
        self,
        size: Seconds,
        step: Seconds,
        *,
        expires: Seconds | None = None,
        grace: Seconds = 0,
        timestamp: Timestamp | None = None,
        late_topic: bool = False,
        close_idle_after: Seconds | None = None,
    ) -> WindowedTable:
        """Make this a table of windows of `size` starting every `step`."""
        return self.windowed_by(HoppingWindow(size, step, expires, grace), timestamp=timestamp,
                                late_topic=late_topic, close_idle_after=close_idle_after)

    def windowed_by(self, window: Window, *, timestamp: Timestamp | None = None, late_topic: bool = False,
                    close_idle_after: Seconds | None = None) -> WindowedTable:
        """Make this a table of `window`'s windows (what `tumbling` and `hopping` make, and pipelines)."""
        late, idle = self._window_by(window, window.size_ms, late_topic, close_idle_after)
        windowed = WindowedTable(self, window, timestamp=timestamp, late_topic=late, close_idle_after=idle)
        self.windowed = windowed
        return windowed

    def session(
        self,
        gap: Seconds,
        *,
        initial: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any],
        grace: Seconds = 0,
        expires: Seconds | None = None,
        timestamp: Timestamp | None = None,
        late_topic: bool = False,
        close_idle_after: Seconds | None = None,
    ) -> SessionTable:
        """Make this a table of sessions: events less than `gap` apart (event time), Kafka Streams' session
        windows, each the aggregate of its events by `add(aggregate, value)` from `initial()`, two merged
        by `merge` when an event bridges them (the same arguments as a pipeline's `session(...)`)."""
        return self.sessions_by(SessionWindow(gap, grace, expires), initial=initial, add=add, merge=merge,
                                timestamp=timestamp, late_topic=late_topic, close_idle_after=close_idle_after)

    def sliding(
        self,
        size: Seconds,
        *,
        initial: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        grace: Seconds = 0,
        timestamp: Timestamp | None = None,
        late_topic: bool = False,
        close_idle_after: Seconds | None = None,
    ) -> SlidingTable:
        """Make this a table of sliding windows: events at most `size` apart (event time), Kafka Streams'
        sliding windows, each the aggregate of its events by `add(aggregate, value)` from `initial()` (the
        same arguments as a pipeline's `sliding(...)`)."""
        return self.sliding_by(SlidingWindow(size, grace), initial=initial, add=add, timestamp=timestamp,
                               late_topic=late_topic, close_idle_after=close_idle_after)

    def session_windowed(self, window: SessionWindow, **options: Any) -> SessionTable:
        """Deprecated: `session(gap, ...)`, or `sessions_by(window, ...)` with a SessionWindow."""
        warnings.warn("Table.session_windowed(window, ...) is deprecated: use Table.session(gap, grace=, "
                      "expires=, ...) or Table.sessions_by(window, ...)", DeprecationWarning, stacklevel=2)
        return self.sessions_by(window, **options)

    def sliding_windowed(self, window: SlidingWindow, **options: Any) -> SlidingTable:
        """Deprecated: `sliding(size, ...)`, or `sliding_by(window, ...)` with a SlidingWindow."""
        warnings.warn("Table.sliding_windowed(window, ...) is deprecated: use Table.sliding(size, grace=, "
                      "...) or Table.sliding_by(window, ...)", DeprecationWarning, stacklevel=2)
        return self.sliding_by(window, **options)

    def sessions_by(self, window: SessionWindow, *, initial: Callable[[], Any],
                    add: Callable[[Any, Any], Any], merge: Callable[[Any, Any], Any],
                    timestamp: Timestamp | None = None, late_topic: bool = False,
                    close_idle_after: Seconds | None = None) -> SessionTable:
        """Make this a table of `window`'s sessions (what `session` makes, and pipelines), as `windowed_by`
        is to `tumbling` and `hopping`."""
        late, idle = self._window_by(window, None, late_topic, close_idle_after)
        sessions = SessionTable(self, window, initial=initial, add=add, merge=merge, timestamp=timestamp,
                                late_topic=late, close_idle_after=idle)
        self.windowed = sessions
        return sessions

    def sliding_by(self, window: SlidingWindow, *, initial: Callable[[], Any],
                   add: Callable[[Any, Any], Any], timestamp: Timestamp | None = None,
                   late_topic: bool = False, close_idle_after: Seconds | None = None) -> SlidingTable:
        """Make this a table of `window`'s sliding windows (what `sliding` makes, and pipelines)."""
        late, idle = self._window_by(window, window.size_ms, late_topic, close_idle_after)
        sliding = SlidingTable(self, window, initial=initial, add=add, timestamp=timestamp, late_topic=late,
                               close_idle_after=idle)
        self.windowed = sliding
        return sliding

    def versioned(self, history: Seconds, *, timestamp: Timestamp | None = None,
                  late_topic: bool = False) -> VersionedTable:
        """Make this a table of each key's versions through time, kept for `history` of its stream time
        (engine.tables.versioned): written and read through what this returns (`as_of`, `versions`, the
        latest by key), joined with a stream on event time."""
        window = History(history)
        late, _ = self._window_by(window, None, late_topic, None)
        inner = self.row_codec
        self.value_codec = VersionValueCodec(inner)
        self._changelog_codecs(key=VersionedChangelogKeyCodec(self.plain_key_codec),
                               value=VersionChangeCodec(inner))
        face = VersionedTable if self.has_own_changelog else VersionedSourceTable
        versioned = face(self, window, timestamp=timestamp, late_topic=late)
        self.windowed = versioned
        return versioned

    def _changelog_codecs(self, **codecs: Any) -> None:
        """How the readers of this table's changelog decode it once its keys are windows or versions (a table
        over a source topic leaves that topic's codecs as they are: its records are others')."""
        self.changelog_topic.use_codecs(**codecs)

    def as_join_buffer(self, window: JoinWindows, *, pending: bool) -> JoinBuffer:
        """Make this a buffer of one stream's records of a stream-stream join (engine.tables.stream_joins):
        keys (key, event time), values the raw records' values at that time; `pending`: those of a left or
        outer join still without a partner."""
        self._window_by(window, window.size_ms, False, None)
        buffer = PendingBuffer(self, window) if pending else JoinBuffer(self, window)
        self.windowed = buffer
        return buffer

    def as_grace_buffer(self, window: JoinWindows) -> GraceBuffer:
        """Make this the buffer of a stream's events waiting for a versioned table's grace
        (engine.tables.grace_joins): keys (key, event time), values the raw records' values."""
        self._window_by(window, window.size_ms, False, None)
        buffer = GraceBuffer(self, window)
        self.windowed = buffer
        return buffer

    def _window_by(self, window: WindowKind, size_ms: int | None, late_topic: bool,
                   close_idle_after: Seconds | None) -> tuple[Topic | None, float | None]:
        """Key the table by window (`size_ms`: None where keys carry their end); its late topic, if asked
        for, and `close_idle_after` in seconds."""
        if self.window is not None:
            raise ConfigError(f"table {self.name!r} is already windowed")
        self.window = window
        self.key_codec = WindowKeyCodec(self.plain_key_codec)
        self._changelog_codecs(key=WindowedChangelogKeyCodec(self.plain_key_codec, size_ms))
        late = Topic(f"{self.app_id}-{self.name}-late", key_serializer="raw",
                     value_serializer="raw", internal=True) if late_topic else None
        idle = None if close_idle_after is None else to_ms(close_idle_after, "close_idle_after") / 1000
        return late, idle
