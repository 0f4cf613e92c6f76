"""Versioned tables: each key's values through time, Kafka Streams' versioned key-value store (KIP-889).

    prices = app.Table("prices", value_type=float).versioned(history=3600)

    @app.agent(price_updates)
    async def keep(stream):
        async for update in stream:
            prices[update.symbol] = update.price      # a version from this event's time on

    prices.as_of("ACME", at)         # the value valid at `at` (seconds or a datetime), or None
    prices.versions("ACME", a, b)    # every Version valid at some time in [a, b], oldest first
    prices["ACME"]                   # the latest value

A write is a version of its key valid from its event's time (the topic's or the table's `timestamp=`
extractor, else the record's timestamp) until the key's next version; `del prices[key]` is a version that
says the key has no value from then on. An update that arrives out of order (older than the key's latest
version) is placed in the key's history, not made its latest. The table's stream time is the newest
version time written to the partition (the store's observed stream time in Kafka Streams): every time no
older than stream time minus the history is answered exactly; an update older than that is late (counted,
reported, sent to the late topic if asked for, not stored), as late events of windows are; a version no
longer valid at that time is removed, from the store and (a tombstone) from the changelog. The latest
version of a key is kept whatever its age, unless it is a deletion.

Stored as a windowed table's keys are (engine.tables.keys): (key, version time) -> the value, one byte
before it saying whether it is a value or a deletion (engine.tables.versions); the changelog holds the same
records, so a restore or a standby rebuilds exactly the versions. Each partition keeps an index of its keys'
version times in memory (rebuilt from the store when the partition is taken on, as join buffers are), and a
heap of the versions that a newer one ended, by the time they end: what expires next is found without
looking at the others.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import heappop, heappush
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.errors import ConfigError
from engine.tables.event_time import EventTimeTable
from engine.tables.joins import join_tables
from engine.tables.keys import META_PREFIX, STREAM_TIME_KEY, key_prefix
from engine.tables.partition import MISSING, KeyedWindowState
from engine.tables.versions import (
    DELETED_VERSION,
    DELETION,
    OPEN_MS,
    Version,
    VersionTimes,
    at_ms,
    seconds_of,
    stored_times,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    from engine.stores.base import StoreView
    from engine.tables.base import BaseTable
    from engine.tables.declarer import Declarer
    from engine.tables.event_time import Timestamp
    from engine.tables.joins import How
    from engine.tables.partition import Closed, TablePartition, WindowState
    from engine.topics import Topic
    from engine.windows import History

class VersionedTable(EventTimeTable):
    """The versioned face of a table (`Table.versioned`): what agents write and read, and the checkpoint's
    steps on each partition (engine.tables.partition.Windowing)."""

    kind_name = "versioned table"
    late_means = "older than its history, not stored"
    kept_by = "a history"

    def __init__(
        self,
        table: BaseTable,
        history: History,
        *,
        timestamp: Timestamp | None = None,
        late_topic: Topic | None = None,
        clock: Callable[[], float] = wall_time,
    ) -> None:
        super().__init__(table, history, timestamp=timestamp, late_topic=late_topic, clock=clock)
        self.history = history

    # -- the partition's index ----------------------------------------------------------------------

    def _new_state(self) -> WindowState:
        return KeyedWindowState()

    def _load_state(self, part: TablePartition) -> WindowState:
        """Stream time, and each key's version times (with whether each is a deletion) from the store;
        then the versions that a newer one ended, on the expiry heap."""
        state = KeyedWindowState()
        raw = part.store.get(STREAM_TIME_KEY)
        if raw is not None:
            state.stream_time = state.recorded_time = int(raw.split()[0])
        decode = self.table.key_codec.decode
        for raw_key, raw_value in part.store.items():
            if raw_key.startswith(META_PREFIX):
                continue
            key, at = decode(raw_key)
            times = state.windows.get(key)
            if times is None:
                times = state.windows[key] = VersionTimes()
            times[at] = (int(raw_value == DELETION), True)
            if state.stream_time is None or at > state.stream_time:
                state.stream_time = at
        for key, times in state.windows.items():
            assert isinstance(times, VersionTimes)
            ordered = times.ordered
            for at, after in pairwise(ordered):
                self._ends(state, key, at, after)
            if times[ordered[-1]][0]:
                self._ends(state, key, ordered[-1], ordered[-1])
        state.seen_time = state.stream_time
        return state

    def _index(self, state: WindowState, stored: Any) -> None:
        raise AssertionError("a versioned table loads its index itself")  # (not EventTimeTable's scan)

    @staticmethod
    def _ends(state: KeyedWindowState, key: Any, at: int, end: int) -> None:
        """The version of `key` at `at` is valid until `end`: it expires once stream time minus the history
        reaches `end` (a deletion ends where it starts: once no time it answers for is kept)."""
        state.sequence += 1
        heappush(state.due, (end, state.sequence, (key, at)))

    def state(self, part: TablePartition) -> KeyedWindowState:
        state = part.windows or self._state(part)
        assert isinstance(state, KeyedWindowState)
        return state

    # -- writes -------------------------------------------------------------------------------------

    def __setitem__(self, key: Any, value: Any) -> None:
        """A version of `key` valid from the current event's time (None: a deletion, as Kafka Streams reads
        a null put)."""
        self._put(key, DELETED_VERSION if value is None else value)

    def __delitem__(self, key: Any) -> None:
        """A version saying `key` has no value from the current event's time on."""
        self._put(key, DELETED_VERSION)

    def _put(self, key: Any, value: Any) -> None:
        event = self.require_event()
        at = self._valid_time(event)
        part = self.table.route_write(key, event)[0]
        state = self.state(part)
        stream_time = state.stream_time
        if stream_time is not None and at < stream_time - self.history.retention_ms:
            self._late(part, event, at, stream_time, stream_time - self.history.retention_ms - at)
            return
        self.put(part, state, key, at, value)

    def put(self, part: TablePartition, state: KeyedWindowState, key: Any, at: int, value: Any) -> None:
        """Write a version (not late: the caller saw to it). A version at a time the key already has
        replaces it."""
        times = state.windows.get(key)
        known = None if times is None else times.get(at)
        # (a version removed since the last checkpoint but in the store still: its tombstone is pending)
        in_store = known[1] if known is not None else part.deleting((key, at))
        self.index(state, key, at, value is DELETED_VERSION, in_store)
        part.buffer[key, at] = value

    def index(self, state: KeyedWindowState, key: Any, at: int, deletion: bool, in_store: bool = True
              ) -> None:
        """Put a version of `key` at `at` in the partition's index, its stream time and expiry heap."""
        times = state.windows.get(key)
        if times is None:
            times = state.windows[key] = VersionTimes()
        assert isinstance(times, VersionTimes)
        times[at] = (int(deletion), in_store)
        if state.stream_time is None or at > state.stream_time:
            state.stream_time = at
        before = times.before(at)
        if before is not None:
            self._ends(state, key, before, at)
        after = times.after(at)  # (an update out of order)
        if after is not None or deletion:
            self._ends(state, key, at, at if after is None else after)

    # -- reads --------------------------------------------------------------------------------------

    def _version_at(self, part: TablePartition, state: KeyedWindowState, key: Any, at: int | None
                    ) -> tuple[int, Any] | None:
        """(valid from, value) of the version of `key` valid at `at` (None: the latest), or None if none
        is (no version yet, a deletion, older than the history)."""
        start = self._start_at(_times(state, key), state.stream_time, at)
        if start is None:
            return None
        return start, self._value(part, key, start)

    def _start_at(self, times: VersionTimes, stream_time: int | None, at: int | None) -> int | None:
        """The time of the version valid at `at` (None: the latest) among `times`, or None if none is."""
        if not times:
            return None
        latest = times.latest()
        if at is not None and stream_time is not None and at < stream_time - self.history.retention_ms:
            # Older than the history: only the latest version still answers, if it began by then (Kafka
            # Streams' rule: the latest version of a key never expires).
            return None if latest > at or times[latest][0] else latest
        start = latest if at is None else times.at_or_before(at)
        return None if start is None or times[start][0] else start

    def lookup(self, key: Any, *, at: int | None = None, since: int | None = None, until: int | None = None,
               store: StoreView | None = None) -> tuple[bool, Any]:
        """What a query asks (engine.web.queries), from the partition active here or from `store` (a
        standby's, or one opened offline: as its changelog has it): with `since` or `until` (ms), (found,
        the versions valid in that range); else (found, the value valid at `at` ms, or the latest)."""
        if store is None:
            part, state = self._read(key)
            times = _times(state, key)
            stream_time = state.stream_time
            value: Callable[[int], Any] = lambda at_: self._value(part, key, at_)  # noqa: E731
        else:
            values = self._stored_versions(store, key)
            times = stored_times(values)
            recorded = store.get(STREAM_TIME_KEY)
            stream_time = None if recorded is None else int(recorded.split()[0])
            value = values.__getitem__
        if since is not None or until is not None:
            versions = self._versions(times, stream_time, since, until, value)
            return bool(versions), versions
        start = self._start_at(times, stream_time, at)
        return (False, None) if start is None else (True, value(start))

    def _stored_versions(self, store: StoreView, key: Any) -> dict[int, Any]:
        """Every version of `key` in `store`, by time (deletions as DELETED_VERSION)."""
        inner = self.table.plain_key_codec.encode(key)
        if inner is None:
            raise ConfigError(f"versioned table {self.name!r}: a key cannot be None")
        low, high = key_prefix(inner)
        decode_key, decode = self.table.key_codec.decode, self.table.value_codec.decode
        return {decode_key(raw)[1]: decode(raw_value) for raw, raw_value in store.items(low, high)}

    def _value(self, part: TablePartition, key: Any, at: int) -> Any:
        value = part.get((key, at), self.table.locate((key, at))[0])
        assert value is not MISSING, (key, at)
        assert value is not DELETED_VERSION, (key, at)
        return value

    def _read(self, key: Any) -> tuple[TablePartition, KeyedWindowState]:
        part, _ = self.table.route_read(key)
        return part, self.state(part)

    def __getitem__(self, key: Any) -> Any:
        """The latest value of `key` (KeyError if it has none, or was deleted last; the table's default
        is not used: a made-up value has no time)."""
        found = self._version_at(*self._read(key), key, None)
        if found is None:
            raise KeyError(key)
        return found[1]

    def get(self, key: Any, default: Any = None) -> Any:
        found = self._version_at(*self._read(key), key, None)
        return default if found is None else found[1]

    def __contains__(self, key: object) -> bool:
        return self._version_at(*self._read(key), key, None) is not None

    def find(self, key: Any) -> tuple[bool, Any]:
        """(True, the latest value) or (False, None): a stream-table join's look-up."""
        found = self._version_at(*self._read(key), key, None)
        return (False, None) if found is None else (True, found[1])

    def latest_change(self, version: tuple[Any, float], value: Any) -> tuple[bool, Any, Any]:
        """Whether a record of this table's changes, ((key, its time in seconds), `value`) as they decode
        (VersionChangeCodec), changed the key's latest value; the key, and the value it says (None: deleted).
        It did unless the key has a newer version now: an update out of order (older than the key's latest)
        is not a change, as Kafka Streams forwards none to a table-table join, nor a version a newer one
        replaced since its record was written. (The removal of an expired version is one only if it was the
        key's latest, a deletion: saying again that the key has no value.)"""
        key, seconds = version
        if self._newer_than(key, at_ms(seconds)):
            return False, key, None
        return True, key, value

    def _newer_than(self, key: Any, at: int) -> bool:
        """Whether `key` has a version newer than `at` now."""
        times = _times(self._read(key)[1], key)
        return bool(times) and times.latest() > at

    def join(self, other: Any, *, name: str | None = None) -> BaseTable:
        """The table of (this key's latest value, other row) for the keys both have (engine.tables.joins):
        an update out of order joins nothing, as in Kafka Streams' joins of versioned tables."""
        return self._joined(other, "inner", name)

    def left_join(self, other: Any, *, name: str | None = None) -> BaseTable:
        """The table of (this key's latest value, other row or None) for every key of this table."""
        return self._joined(other, "left", name)

    def outer_join(self, other: Any, *, name: str | None = None) -> BaseTable:
        """The table of (this key's latest value or None, other row or None) for every key of either."""
        return self._joined(other, "outer", name)

    async def query(self, key: Any, *, at: float | int | datetime | None = None,
                    since: float | int | datetime | None = None,
                    until: float | int | datetime | None = None) -> Any:
        """What `as_of` (with `at`), `versions` (with `since` or `until`) or the latest value (neither) give,
        wherever in the app the key lives: read here when its partition is active on this worker, else asked
        of its owner over HTTP (BaseTable.query). KeyError when no value is valid then (a range without
        versions is an empty list)."""
        times: dict[str, str] = {}
        for name, when in (("as_of", at), ("from", since), ("until", until)):
            if when is not None:
                times["to" if name == "until" else name] = str(at_ms(when, name) / 1000)
        try:
            return await self.table.query(key, times)
        except KeyError:
            if since is None and until is None:
                raise
            return []

    def _joined(self, other: Any, how: How, name: str | None) -> BaseTable:
        declarer: Declarer | None = getattr(self.table, "declared_by", None)  # (engine.tables.table.Table's)
        if declarer is None:
            raise ConfigError(f"table {self.name!r} was not declared with app.Table: it cannot be joined")
        return join_tables(declarer, self.table, other, how, name)

    def find_at(self, key: Any, at_ms_: int) -> tuple[bool, Any]:
        """(True, the value valid at `at_ms_`) or (False, None): an event-time join's look-up."""
        found = self._version_at(*self._read(key), key, at_ms_)
        return (False, None) if found is None else (True, found[1])

    def as_of(self, key: Any, at: float | int | datetime) -> Any:
        """The value of `key` valid at `at` (seconds or a datetime), or None: no version then, a deletion,
        or a time older than the table's stream time minus its history (unless the key's latest version
        began by then: it never expires)."""
        when = at_ms(at)
        found = self._version_at(*self._read(key), key, when)
        return None if found is None else found[1]

    def versions(self, key: Any, since: float | int | datetime | None = None,
                 until: float | int | datetime | None = None) -> list[Version]:
        """Every version of `key` valid at some time from `since` to `until` (seconds or datetimes, both
        included; None: unbounded), oldest first, deletions left out; none valid only before the table's
        stream time minus its history."""
        low = None if since is None else at_ms(since, "since")
        high = None if until is None else at_ms(until, "until")
        part, state = self._read(key)
        return self._versions(_times(state, key), state.stream_time, low, high,
                              lambda at: self._value(part, key, at))

    def _versions(self, times: VersionTimes, stream_time: int | None, since: int | None,
                  until: int | None, value: Callable[[int], Any]) -> list[Version]:
        horizon = None if stream_time is None else stream_time - self.history.retention_ms
        low = since if horizon is None or (since is not None and since > horizon) else horizon
        ordered = times.ordered
        first = 0 if low is None else max(bisect_right(ordered, low) - 1, 0)  # (the version valid at low)
        found = []
        for index in range(first, len(ordered)):
            start = ordered[index]
            if until is not None and start > until:
                break
            end = ordered[index + 1] if index + 1 < len(ordered) else OPEN_MS
            if times[start][0] or (low is not None and end <= low):
                continue
            found.append(Version(value(start), seconds_of(start),
                                 None if end == OPEN_MS else seconds_of(end)))
        return found

    # -- the checkpoint's steps (engine.tables.partition.Windowing) -----------------------------------

    def advance(self, part: TablePartition, processed: int | None) -> None:
        """Record the partition's stream time for the store when writes moved it (a versioned table's moves
        with the versions written, not with the events its task processed: Kafka Streams' rule)."""
        if part.windows is not None:
            self._record_stream_time(part, part.windows)

    def clock_work_at(self, part: TablePartition) -> float | None:
        return None  # (nothing happens to a versioned table with the clock alone)

    def close_windows(self, part: TablePartition) -> list[Closed]:
        return []

    def expire(self, part: TablePartition) -> int:
        """Remove the versions no longer valid at stream time minus the history."""
        state = part.windows
        if not isinstance(state, KeyedWindowState) or state.stream_time is None:
            return 0
        expired = self.expired(state)
        for key, at in expired:
            state.drop(part, key, at)
        return len(expired)

    def expired(self, state: KeyedWindowState) -> list[tuple[Any, int]]:
        """The (key, time) of each version no longer valid at the partition's stream time minus the
        history, in the order they expire (still in the index: the caller removes them)."""
        if state.stream_time is None:
            return []
        horizon = state.stream_time - self.history.retention_ms
        due = state.due
        found: dict[tuple[Any, int], None] = {}
        while due and due[0][0] <= horizon:
            _, _, (key, at) = heappop(due)
            times = state.windows.get(key)
            known = None if times is None else times.get(at)
            if known is None:
                continue  # (already removed: an entry for an end that a later write moved)
            assert isinstance(times, VersionTimes)
            end = times.after(at)
            if end is None and known[0]:
                end = at  # (the latest version, a deletion: it ends where it starts)
            if end is not None and end <= horizon:
                found[key, at] = None  # (a version may be due twice: its end was pushed again)
        return list(found)

    def stored(self, part: TablePartition, writes: Mapping[Any, Any]) -> None:
        state = part.windows
        if not isinstance(state, KeyedWindowState):
            return
        for key, at in writes:
            times = state.windows.get(key)
            if times is not None and at in times:
                times[at] = (times[at][0], True)

    def windows_ms(self, key: Any, standby: StoreView | None = None) -> list[tuple[int, int, Any]]:
        """(valid from ms, valid to ms or OPEN_MS, value) of every version of `key` kept, oldest first,
        deletions left out: from its partition active here, or from a `standby` store (as its changelog
        has it)."""
        if standby is None:
            part, state = self._read(key)
            return self._spans(_times(state, key), lambda at: self._value(part, key, at))
        values = self._stored_versions(standby, key)
        return self._spans(stored_times(values), values.__getitem__)

    @staticmethod
    def _spans(times: VersionTimes, value: Callable[[int], Any]) -> list[tuple[int, int, Any]]:
        ordered = times.ordered
        return [(start, ordered[index + 1] if index + 1 < len(ordered) else OPEN_MS, value(start))
                for index, start in enumerate(ordered) if not times[start][0]]


_NO_TIMES = VersionTimes()  # (a key without versions: never written to)


def _times(state: KeyedWindowState, key: Any) -> VersionTimes:
    """The version times of `key` in a partition's index (none: empty)."""
    times = state.windows.get(key)
    if times is None:
        return _NO_TIMES
    assert isinstance(times, VersionTimes)
    return times
