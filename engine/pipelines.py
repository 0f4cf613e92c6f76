"""Declarative pipelines: a stream's steps, an optional window, and one aggregation, declared at module level
beside the agents; the aggregation returns the table it maintains.

    per_user = (app.stream(clicks).group_by(lambda c: c["user"], key_type=str)
                .tumbling(60, grace=5).count("clicks-per-user"))

    @app.agent(per_user.closed())
    async def report(finals):
        async for (user, window), n in finals.items(): ...

Nothing here runs events: the aggregation declares a table (`app.Table`, windowed by `tumbling`/`hopping`, of
sessions by `session`, of sliding windows by `sliding`) and an internal agent `<name>-aggregate` that
applies the steps (`filter`, `map`, `group_by` through `<app>-<name>-<n>-repartition`) and updates the table
as a hand-written agent would, a mailbox batch at a time (engine.fused; with the stream operators, event by
event, where that cannot be). So a pipeline's table has the same changelog, recovery, standbys, final
results and exactly-once as any other.

A pipeline is immutable: every step returns a new one, so one can be the start of several.
"""

from __future__ import annotations

import copy
import inspect
import operator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from engine.errors import ConfigError
from engine.fused import FixedWindowFold, Forwarder, PlainFold, WindowFold, run_fused
from engine.windows import HoppingWindow, SessionWindow, SlidingWindow, TumblingWindow, to_ms

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.fused import Fold
    from engine.streams.operators import DerivedStream
    from engine.streams.stream import Stream
    from engine.tables.declarer import Declarer
    from engine.tables.sessions import SessionTable
    from engine.tables.sliding import SlidingTable
    from engine.tables.table import Table
    from engine.tables.windowed import WindowedTable
    from engine.topics import Topic
    from engine.windows import Seconds, Window, WindowKind

    Update = Callable[[Any, Any, Any], None]  # (table, key, value)
    Combine = Callable[[Any, Any], Any]


# What a pipeline's aggregation returns: the table (Table; WindowedTable after tumbling or hopping,
# SessionTable after session, SlidingTable after sliding), so that an editor knows what `count` gave.
TableT = TypeVar("TableT")


@dataclass(frozen=True)
class _Step:
    kind: str  # "filter", "map", "group_by", "join" or "left_join"
    fun: Callable[[Any], Any] | None  # (a join's: its key= function, or None for the event's key)
    key_type: type | None = None
    value_type: type | None = None
    name: str | None = None  # a group_by's repartition topic: <app>-<name>-repartition
    table: Any = None  # a join's table
    grace: Seconds = 0  # a join's grace (a versioned table's)


@dataclass(frozen=True)
class Pipeline(Generic[TableT]):
    """`app.stream(topic)`: steps, then optionally a window, then an aggregation, which returns the table it
    maintains (typed: `TableT`)."""

    app: Declarer
    topic: Topic
    steps: tuple[_Step, ...] = ()
    window: WindowKind | None = None
    close_idle_after: Seconds | None = None
    late_topic: bool = False

    # -- steps --------------------------------------------------------------------------------------

    def filter(self, fun: Callable[[Any], bool]) -> Pipeline[TableT]:
        """Keep the values for which `fun(value)` is true."""
        return self._then(_Step("filter", fun))

    def map(self, fun: Callable[[Any], Any], *, value_type: type | None = None) -> Pipeline[TableT]:
        """Replace each value by `fun(value)` (of `value_type`, if a later `group_by` should check it)."""
        return self._then(_Step("map", fun, value_type=value_type))

    def group_by(self, key: Callable[[Any], Any], *, name: str | None = None, key_type: type | None = None,
                 value_type: type | None = None) -> Pipeline[TableT]:
        """Re-key each value by `key(value)` through a repartition topic, as `Stream.group_by` does (the same
        arguments): `<app>-<name>-repartition`, or without `name` `<app>-<aggregation>-<n>-repartition`; give
        `key_type` (as the table's keys will be), or keys keep the JSON codec, and `value_type` for the
        values' codec there (else the stream's)."""
        return self._then(_Step("group_by", key, key_type=key_type, value_type=value_type, name=name))

    def join(self, table: Any, *, key: Callable[[Any], Any] | None = None, grace: Seconds = 0
             ) -> Pipeline[TableT]:
        """Replace each value by (value, the table's value for its key), as `Stream.join` with a table does
        (events with no match are left out): a versioned table's value valid at the event's time, after
        waiting `grace` for the table's late updates if given (then as the pipeline's first step, and by the
        event's own key)."""
        return self._then(_Step("join", key, table=table, grace=grace))

    def left_join(self, table: Any, *, key: Callable[[Any], Any] | None = None, grace: Seconds = 0
                  ) -> Pipeline[TableT]:
        """As `join`, every event kept: (value, None) when the table has no value for it."""
        return self._then(_Step("left_join", key, table=table, grace=grace))

    def _then(self, step: _Step) -> Pipeline[TableT]:
        if self.window is not None:
            raise ConfigError("a pipeline's window comes after its steps (filter, map, group_by)")
        return replace(self, steps=(*self.steps, step))

    # -- windows ------------------------------------------------------------------------------------

    def tumbling(self, size: Seconds, *, grace: Seconds = 0, expires: Seconds | None = None,
                 close_idle_after: Seconds | None = None,
                 late_topic: bool = False) -> Pipeline[WindowedTable]:
        """Aggregate per key and back-to-back window of `size` (event time); `close_idle_after` and
        `late_topic` (late events to `<app>-<name>-late`) as the table's (engine.tables.windowed)."""
        return cast("Pipeline[WindowedTable]",
                    self._windowed(TumblingWindow(size, expires, grace), close_idle_after, late_topic))

    def hopping(self, size: Seconds, step: Seconds, *, grace: Seconds = 0, expires: Seconds | None = None,
                close_idle_after: Seconds | None = None, late_topic: bool = False) -> Pipeline[WindowedTable]:
        """Aggregate per key and window of `size` starting every `step` (event time)."""
        return cast("Pipeline[WindowedTable]",
                    self._windowed(HoppingWindow(size, step, expires, grace), close_idle_after, late_topic))

    def sliding(self, size: Seconds, *, grace: Seconds = 0,
                close_idle_after: Seconds | None = None, late_topic: bool = False) -> Pipeline[SlidingTable]:
        """Aggregate per key and sliding window: events at most `size` apart (event time), Kafka Streams'
        sliding windows (engine.tables.sliding)."""
        return cast("Pipeline[SlidingTable]",
                    self._windowed(SlidingWindow(size, grace), close_idle_after, late_topic))

    def session(self, gap: Seconds, *, grace: Seconds = 0, expires: Seconds | None = None,
                close_idle_after: Seconds | None = None, late_topic: bool = False) -> Pipeline[SessionTable]:
        """Aggregate per key and session: events less than `gap` apart (event time), Kafka Streams' session
        windows (engine.tables.sessions). `aggregate` needs a `merge` for two sessions' values."""
        return cast("Pipeline[SessionTable]",
                    self._windowed(SessionWindow(gap, grace, expires), close_idle_after, late_topic))

    def _windowed(self, window: WindowKind, close_idle_after: Seconds | None,
                  late_topic: bool) -> Pipeline[Any]:
        if self.window is not None:
            raise ConfigError("a pipeline has one window")
        for step in self.steps:
            waits = to_ms(step.grace, "grace") if step.kind in ("join", "left_join") else 0
            if waits > window.grace_ms:
                # A windowed table's stream time moves with every event its task processed, those a join
                # holds included: what the join releases later would be late for its windows.
                raise ConfigError(f"a window after a join with grace={waits / 1000:g} needs a grace of at "
                                  f"least as much (it has {window.grace_ms / 1000:g}): the events the join "
                                  "releases come that far behind the newest it read")
        return replace(self, window=window, close_idle_after=close_idle_after, late_topic=late_topic)

    # -- aggregations -------------------------------------------------------------------------------

    def count(self, name: str) -> TableT:
        """The number of values per key (and window)."""
        return self._aggregate(name, int, int, _add_one, operator.add, _count_one)

    def sum(self, name: str, fun: Callable[[Any], Any] | None = None) -> TableT:
        """The sum of `fun(value)` (the value itself if no `fun`) per key (and window)."""
        pick = fun or _same
        return self._aggregate(name, int, None, lambda table, key, value: _add(table, key, pick(value)),
                               operator.add, lambda total, value: total + pick(value))

    def reduce(self, name: str, fun: Callable[[Any, Any], Any]) -> TableT:
        """`fun(aggregate, value)` per key (and window), starting from the first value (None stands for
        "no value yet": `fun` is never given None as its aggregate). Two sessions merge by `fun` too, as in
        Kafka Streams."""
        windowed = self.window is not None

        def add(old: Any, value: Any) -> Any:
            return value if old is None else fun(old, value)

        def update(table: Any, key: Any, value: Any) -> None:
            _apply(table, key, lambda old: add(old, value), windowed)

        return self._aggregate(name, _none, None, update, add, add)

    def aggregate(self, name: str, initial: Any, fun: Callable[[Any, Any], Any], *,
                  merge: Callable[[Any, Any], Any] | None = None) -> TableT:
        """`fun(aggregate, value)` per key (and window), starting from `initial` (a value, copied for each
        key, or a function that makes one); `merge(aggregate, aggregate)` combines two sessions' (needed
        for sessions only)."""
        start = initial if callable(initial) else (lambda: copy.deepcopy(initial))
        windowed = self.window is not None
        if isinstance(self.window, SessionWindow) and merge is None:
            raise ConfigError(f"pipeline {name!r}: aggregating sessions needs merge=, to combine two "
                              "sessions' values when an event bridges them")

        def update(table: Any, key: Any, value: Any) -> None:
            _apply(table, key, lambda old: fun(old, value), windowed)

        return self._aggregate(name, start, None, update, merge or _no_merge, fun)

    def _aggregate(self, name: str, default: Callable[[], Any], value_type: type | None,
                   update: Update, merge: Combine, add: Combine) -> TableT:
        """Declare the table and its agent: `update(table, key, value)` writes a value into a table (plain or
        of fixed windows); a session table instead adds it with `add(aggregate, value)` and merges two
        sessions with `merge`."""
        key_type = self.topic.key_type
        for step in self.steps:
            if step.kind == "group_by":
                key_type = step.key_type
        table: Table = self.app.Table(name, default=default, key_type=key_type, value_type=value_type)
        target: Any = table
        fold: Fold = PlainFold(table, add)
        if isinstance(self.window, SessionWindow):
            target = table.sessions_by(self.window, initial=default, add=add, merge=merge,
                                       late_topic=self.late_topic, close_idle_after=self.close_idle_after)
            update, fold = _add_to_windows, WindowFold(target)
        elif isinstance(self.window, SlidingWindow):
            target = table.sliding_by(self.window, initial=default, add=add, late_topic=self.late_topic,
                                      close_idle_after=self.close_idle_after)
            update, fold = _add_to_windows, WindowFold(target)
        elif self.window is not None:
            target = table.windowed_by(cast("Window", self.window), late_topic=self.late_topic,
                                       close_idle_after=self.close_idle_after)
            fold = FixedWindowFold(target, add)
        steps = self.steps

        async def aggregate(stream: Stream) -> None:
            # Each run of filters and maps up to a group_by, and the last one with the aggregation, runs
            # fused (engine.fused) unless a function of it is a coroutine function or the worker traces (a
            # span per event is the stream operators').
            root = stream
            value_type = self.topic.value_type
            begun = 0  # where the current run of steps begins
            for number, step in enumerate(steps):
                if step.kind == "map":
                    value_type = step.value_type or object  # object: JSON of any type
                elif step.kind in ("join", "left_join"):
                    value_type = object  # (pairs)
                if step.kind != "group_by":
                    continue
                assert step.fun is not None  # (a group_by's key)
                value_type = step.value_type or value_type
                run, begun = steps[begun:number], number + 1
                through = step.name or f"{name}-{number}"
                if _fusable(root, run):
                    topic = root.context.repartition_topic(f"{through}-repartition", root.topic,
                                                           step.key_type, value_type)
                    root = root.forwarded_to(topic, Forwarder(root, _fused(run), step.fun, topic))
                else:
                    root = _operators(root, run).group_by(step.fun, name=through, key_type=step.key_type,
                                                          value_type=value_type)
            if _fusable(root, steps[begun:]):
                await run_fused(root, _fused(steps[begun:]), fold)
                return
            async for key, value in _operators(root, steps[begun:]).items():
                update(target, key, value)

        self.app.agent(self.topic, name=f"{name}-aggregate")(aggregate)
        return cast("TableT", target)


def _fusable(root: Stream, steps: tuple[_Step, ...]) -> bool:
    """Whether `steps` run fused (engine.fused: filters and maps of plain functions, not traced); a join
    runs as the stream operator."""
    return root.context.tracing is None and all(
        step.kind in ("filter", "map") and not inspect.iscoroutinefunction(step.fun) for step in steps)


def _fused(steps: tuple[_Step, ...]) -> tuple[tuple[bool, Callable[[Any], Any]], ...]:
    """Filters and maps as engine.fused takes them: (is a filter, its function)."""
    return tuple((step.kind == "filter", cast("Callable[[Any], Any]", step.fun)) for step in steps)


def _operators(root: Stream, steps: tuple[_Step, ...]) -> Stream | DerivedStream:
    """Filters, maps and joins as stream operators."""
    flow: Stream | DerivedStream = root
    for step in steps:
        if step.kind in ("join", "left_join"):
            joining = flow.join if step.kind == "join" else flow.left_join
            flow = joining(step.table, key=step.fun, grace=step.grace)
        else:
            fun = cast("Callable[[Any], Any]", step.fun)
            flow = flow.filter(fun) if step.kind == "filter" else flow.map(fun)
    return flow


def _same(value: Any) -> Any:
    return value


def _none() -> None:
    return None


def _count_one(count: int, _value: Any) -> int:
    return count + 1


def _no_merge(_one: Any, _other: Any) -> Any:
    raise AssertionError("only sessions merge aggregates")


def _add_to_windows(table: Any, key: Any, value: Any) -> None:
    table.update(key, value)


def _add_one(table: Any, key: Any, value: Any) -> None:
    table[key] += 1


def _add(table: Any, key: Any, amount: Any) -> None:
    table[key] += amount


def _apply(table: Any, key: Any, fun: Callable[[Any], Any], windowed: bool) -> None:
    """`table[key] = fun(table[key])`; on a windowed table, in every open window of the event's time."""
    if windowed:
        table[key].apply(fun)
    else:
        table[key] = fun(table[key])
