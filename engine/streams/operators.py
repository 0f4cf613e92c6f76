"""The operators every stream has (`filter`, `map`, `take`, `group_by`, `through`, joins with tables and
streams, `items`, `events`), and the streams they make (`DerivedStream`): each wraps the agent's root stream
(engine.streams.stream), whose current event it shares, and keeps its rule that an event is acked when the
next is pulled."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError
from engine.streams.context import TimedLookup
from engine.topics import event_time_ms

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from engine.events import Event
    from engine.streams.context import Lookup, RecordJoin
    from engine.streams.stream import Stream
    from engine.topics import Topic
    from engine.windows import Seconds


def _records_joined(root: Stream, joining: RecordJoin) -> DerivedStream:
    """The pairs a join that keeps records (a stream-stream join, a join with a versioned table's grace)
    makes of each record of the agent's own stream, each with its own key and time as the current event's."""

    async def gen() -> AsyncIterator[Any]:
        async for _ in root:
            event = root.current_event
            assert event is not None
            for key, left, right, time_ms, headers in joining.process(event):
                root.stands_for(key, time_ms, headers)
                yield left, right

    return DerivedStream(root, gen())


class Operators:
    """The operators every stream has; `root` is the stream that owns the current event."""

    root: Stream

    def __aiter__(self) -> AsyncIterator[Any]:
        raise NotImplementedError

    @property
    def current_event(self) -> Event | None:
        return self.root.current_event

    def filter(self, predicate: Callable[[Any], bool | Awaitable[bool]]) -> DerivedStream:
        is_async = inspect.iscoroutinefunction(predicate)

        async def gen() -> AsyncIterator[Any]:
            async for value in self:
                keep = await predicate(value) if is_async else predicate(value)  # type: ignore[misc]
                if keep:
                    yield value

        return DerivedStream(self.root, gen())

    def map(self, fun: Callable[[Any], Any]) -> DerivedStream:
        is_async = inspect.iscoroutinefunction(fun)

        async def gen() -> AsyncIterator[Any]:
            async for value in self:
                yield (await fun(value)) if is_async else fun(value)

        return DerivedStream(self.root, gen())

    def items(self) -> DerivedStream:
        """(key, value) pairs. (The root stream's own, without a generator between: Stream.items.)"""
        return DerivedStream(self.root, _Items(self.__aiter__(), self.root))

    def events(self) -> DerivedStream:
        """The Event objects (key, value, headers, timestamp, topic, partition, offset)."""
        return DerivedStream(self.root, _Events(self.__aiter__(), self.root))

    def enumerate(self, start: int = 0) -> DerivedStream:
        async def gen() -> AsyncIterator[Any]:
            index = start
            async for value in self:
                yield index, value
                index += 1

        return DerivedStream(self.root, gen())

    def join(self, other: Any, *, key: Callable[[Any], Any] | None = None,
             within: Seconds | None = None, grace: Seconds = 0) -> DerivedStream:
        """With a table: (value, table value) for events whose key (the event key, or `key(value)`) is in
        `table`; events with no match are skipped. With a topic (or `app.stream(topic)`), `within=` seconds:
        (value, other value) for each record of the other stream with the same key at most `within` apart in
        event time (engine.tables.stream_joins)."""
        if within is not None or _stream_of(other) is not None:
            return self._stream_join(other, within, grace, "inner")
        return self._join(other, key, grace, inner=True)

    def left_join(self, other: Any, *, key: Callable[[Any], Any] | None = None,
                  within: Seconds | None = None, grace: Seconds = 0) -> DerivedStream:
        """With a table: (value, table value or None) for every event. With a stream: as `join`, and
        (value, None) for a value with no partner, once none can come (after `within` + `grace`)."""
        if within is not None or _stream_of(other) is not None:
            return self._stream_join(other, within, grace, "left")
        return self._join(other, key, grace, inner=False)

    def outer_join(self, other: Any, *, within: Seconds, grace: Seconds = 0) -> DerivedStream:
        """With a stream: as `left_join`, and (None, other value) for an other value with no partner."""
        return self._stream_join(other, within, grace, "outer")

    def _stream_join(self, other: Any, within: Seconds | None, grace: Seconds, how: str) -> DerivedStream:
        root = self.root
        topic = _stream_of(other)
        if topic is None or within is None:
            raise ConfigError(f"a stream-stream join needs a topic (or app.stream(topic)) and within=, not "
                              f"{other!r} and within={within!r}")
        if self is not root or root.topic is None:
            raise ConfigError("join the agent's own stream with another stream before filter, map or other "
                              "steps: the other stream's records come into the agent's stream")
        return _records_joined(root, root.context.stream_join(root.topic, topic, within, grace, how))

    def _join(self, table: Lookup, key: Callable[[Any], Any] | None, grace: Seconds, *, inner: bool
              ) -> DerivedStream:
        root = self.root
        root.context.joined(root.topic, table)
        if isinstance(table, TimedLookup):
            if grace:
                return self._grace_join(table, key, grace, inner=inner)
            return self._join_as_of(table, key, inner=inner)
        if grace:
            raise ConfigError(f"a join with {table!r} cannot wait (grace=): only a versioned table's can "
                              "(table.versioned(history=...))")

        async def gen() -> AsyncIterator[Any]:
            async for value in self:
                if key is not None:
                    lookup = key(value)
                else:
                    event = root.current_event
                    lookup = event.key if event is not None else None
                found, other = table.find(lookup)
                if found or not inner:
                    yield value, other

        return DerivedStream(root, gen())

    def _grace_join(self, table: TimedLookup, key: Callable[[Any], Any] | None, grace: Seconds, *,
                    inner: bool) -> DerivedStream:
        """Each event joined with the table's value valid at its time once `grace` of stream time passed it
        (engine.tables.grace_joins): results come in the order of the events' times, each with its own key."""
        root = self.root
        if key is not None:
            raise ConfigError("a join with grace= waits by the event's own key: key= cannot be given")
        if self is not root or root.topic is None:
            raise ConfigError("join the agent's own stream with a table and grace= before filter, map or "
                              "other steps: the events wait as they were read")
        return _records_joined(root, root.context.grace_join(root.topic, table, grace,
                                                             "inner" if inner else "left"))

    def _join_as_of(self, table: TimedLookup, key: Callable[[Any], Any] | None, *, inner: bool
                    ) -> DerivedStream:
        """Each event joined with the table's value valid at the event's time (its topic's `timestamp=`
        extractor, else the record's timestamp): Kafka Streams' stream-table join with a versioned table."""
        root = self.root
        extract = root.topic.timestamp if root.topic is not None else None

        async def gen() -> AsyncIterator[Any]:
            async for value in self:
                event = root.current_event
                assert event is not None
                lookup = key(value) if key is not None else event.key
                if lookup is None or value is None:  # (joins nothing, as in Kafka Streams; a left join keeps
                    if not inner and value is not None:  # a value without a key)
                        yield value, None
                    continue
                at = event.time_ms if event.time_ms is not None else event_time_ms(extract, event)
                found, other = table.find_at(lookup, at)
                if found or not inner:
                    yield value, other

        return DerivedStream(root, gen())

    def take(self, n: int, within: float | timedelta) -> DerivedStream:
        """Lists of up to `n` values; a shorter list when `within` passed since its first value."""
        if n < 1:
            raise ValueError(f"take(n): n must be at least 1, not {n}")
        seconds = within.total_seconds() if isinstance(within, timedelta) else float(within)
        root = self.root
        upstream = self.__aiter__()

        async def gen() -> AsyncIterator[list[Any]]:
            pending: asyncio.Task[Any] | None = None
            try:
                while True:
                    root.release_held()
                    root.hold(True)
                    batch: list[Any] = []
                    deadline: float | None = None
                    while len(batch) < n:
                        if pending is None and deadline is None:
                            # A batch's first value has no deadline: awaited directly (no task, and no
                            # loop needed until there is one: the topology's declaration run has none).
                            try:
                                batch.append(await upstream.__anext__())
                            except StopAsyncIteration:
                                return
                            loop = asyncio.get_running_loop()
                            deadline = loop.time() + seconds
                            continue
                        if pending is None:
                            pending = asyncio.ensure_future(upstream.__anext__())
                        timeout = None if deadline is None else max(0.0, deadline - loop.time())
                        done, _ = await asyncio.wait({pending}, timeout=timeout)
                        if not done:
                            break
                        task, pending = pending, None
                        try:
                            batch.append(task.result())
                        except StopAsyncIteration:
                            if batch:
                                yield batch
                            return
                        if deadline is None:
                            deadline = loop.time() + seconds
                    yield batch
            finally:
                root.hold(False)
                if pending is not None:
                    pending.cancel()

        return DerivedStream(root, gen())

    def through(self, topic: Topic | str, *, key_type: type | None = None,
                value_type: type | None = None) -> Stream:
        """Send every value to `topic` (keeping its key) and continue from that topic; a name is the internal
        topic `<app>-<name>`, with the stream's key and value types unless `key_type`/`value_type` say."""
        if isinstance(topic, str):
            topic = self.root.context.repartition_topic(topic, self.root.topic, key_type, value_type)
        return self._forward(topic, None)

    def group_by(self, key: Callable[[Any], Any], *, name: str, key_type: type | None = None,
                 value_type: type | None = None) -> Stream:
        """Re-key by `key(value)` through the internal topic `<app>-<name>-repartition`, with the stream's
        key and value types unless `key_type`/`value_type` say (the key a table is written with should have
        the table's key type, so that both put a key in the same partition)."""
        target = self.root.context.repartition_topic(f"{name}-repartition", self.root.topic, key_type,
                                                     value_type)
        return self._forward(target, key)

    def _forward(self, topic: Topic, key: Callable[[Any], Any] | None) -> Stream:
        return self.root.downstream(topic, self.__aiter__(), key)


class _Items:
    """items() as a plain iterator: no async generator frame on the hottest path."""

    __slots__ = ("_root", "_upstream")

    def __init__(self, upstream: AsyncIterator[Any], root: Stream) -> None:
        self._upstream = upstream
        self._root = root

    def __aiter__(self) -> _Items:
        return self

    async def __anext__(self) -> tuple[Any, Any]:
        value = await self._upstream.__anext__()
        event = self._root.current_event
        return (event.key if event is not None else None), value


class _Events(_Items):
    async def __anext__(self) -> Any:
        await self._upstream.__anext__()
        return self._root.current_event


class DerivedStream(Operators):
    """A stream made by an operator: iterates its generator, shares the root's current event."""

    __slots__ = ("_iterator", "root")

    def __init__(self, root: Stream, iterator: AsyncIterator[Any]) -> None:
        self.root = root
        self._iterator = iterator

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterator


def _stream_of(other: Any) -> Topic | None:
    """The topic of a stream to join: a Topic, or a pipeline (`app.stream(topic)`) without steps."""
    from engine.topics import Topic

    if isinstance(other, Topic):
        return other
    topic, steps = getattr(other, "topic", None), getattr(other, "steps", None)
    if isinstance(topic, Topic) and steps is not None:
        if steps:
            raise ConfigError("join a stream of a topic as it is: app.stream(topic) without filter, map or "
                              "group_by")
        return topic
    return None
