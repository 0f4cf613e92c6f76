"""App: a registry of topics, agents and timers. It does no I/O; a worker is built from it.

    app = engine.App("wordcount", broker="kafka://localhost:9092")
    lines = app.topic("lines", value_type=str)

    @app.agent(lines, concurrency=2)
    async def split(stream): ...
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from engine.agent import Agent, Sink
from engine.errors import ConfigError
from engine.settings_load import load_settings
from engine.topics import Topic

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from engine.pipelines import Pipeline
    from engine.settings import ErrorPolicy, Settings
    from engine.streams.stream import AgentFun
    from engine.tables.base import BaseTable
from engine.tables.global_table import GlobalTable as _GlobalTable
from engine.tables.source_table import SourceTable as _SourceTable
from engine.tables.table import Table as _Table
from engine.tables.windowed import EventTimeTable
from engine.targets import ALL, Target, lake_target


@dataclass(frozen=True)
class Timer:
    name: str
    interval: timedelta
    fun: Callable[[], Awaitable[None]]
    on_leader: bool = False  # runs only on the group's leader: the worker that owns task 0
    cron: str | None = None  # a crontab's schedule (then `interval` is unused)
    timezone: tzinfo | None = None  # the crontab's time zone (None: local time)
    # Ticks at the multiples of `interval` on the wall clock (since the epoch), so that every worker's ticks
    # coincide (an export round's), instead of every `interval` from the worker's start.
    aligned: bool = False


@dataclass(frozen=True)
class ScheduledExport:
    """An export declared with `app.export`: the worker runs it as a timer aligned on the wall clock
    (engine.export.schedule)."""

    table: BaseTable | None  # None: every table that is not global
    target: Target
    every: timedelta

    @property
    def what(self) -> str:
        return ALL if self.table is None else self.table.name

    @property
    def name(self) -> str:
        return f"export:{self.what}:{self.target}"


class App:
    def __init__(self, id: str, **settings: Any) -> None:
        self.id = id
        self._given = dict(settings)
        load_settings(id, self._given, environ={})  # a bad argument fails here, naming it
        self.topics: dict[str, Topic] = {}
        self.agents: dict[str, Agent] = {}
        self.timers: dict[str, Timer] = {}
        self.tables: dict[str, BaseTable] = {}
        self.exports: dict[str, ScheduledExport] = {}

    def settings(self, overrides: Mapping[str, Any] | None = None) -> Settings:
        """The validated settings: App arguments < ENGINE_* environment < `overrides`."""
        return load_settings(self.id, self._given, overrides)

    def topic(self, name: str, **options: Any) -> Topic:
        """Declare a topic (see Topic for options); the same name twice gives the same topic."""
        existing = self.topics.get(name)
        if existing is not None:
            if options and (
                options.get("key_type", existing.key_type) is not existing.key_type
                or options.get("value_type", existing.value_type) is not existing.value_type
            ):
                raise ConfigError(f"topic {name!r} is already declared with other types")
            return existing
        topic = self.topics[name] = Topic(name, **options)
        return topic

    def agent(
        self,
        channel: Topic | str | None = None,
        *,
        name: str | None = None,
        concurrency: int = 1,
        sink: Sequence[Sink] = (),
        on_error: ErrorPolicy | None = None,
    ) -> Callable[[AgentFun], Agent]:
        """Declare an agent reading `channel` (a topic, a topic name, or its own `<app>-<name>` topic)."""

        def register(fun: AgentFun) -> Agent:
            agent_name = name or fun.__name__
            if agent_name in self.agents:
                raise ConfigError(f"agent {agent_name!r} is declared twice; pass name= to tell them apart")
            if isinstance(channel, Topic):
                topic = channel
                self.topics.setdefault(topic.name, topic)
            else:
                topic = self.topic(channel or f"{self.id}-{agent_name}")
            agent = Agent(fun, name=agent_name, channel=topic, concurrency=concurrency,
                          sink=sink, on_error=on_error)
            self.agents[agent_name] = agent
            return agent

        return register

    def Table(  # reads as a constructor, like the type it makes
        self,
        name: str,
        *,
        default: Callable[[], Any] | None = None,
        key_type: type | None = None,
        value_type: type | None = None,
        partitions: int | None = None,
        store: str | None = None,
        source_topic: Topic | str | None = None,
        **options: Any,
    ) -> _Table:
        """Declare a table, partitioned like the stream that writes it, with a compacted changelog
        `<app>-<name>-changelog` (or, with `source_topic`, over that existing compacted topic)."""
        return self._table(name, default=default, key_type=key_type, value_type=value_type,
                           partitions=partitions, store=store, source_topic=source_topic,
                           **options)

    def stream(self, topic: Topic | str) -> Pipeline:
        """A declarative pipeline over `topic` (engine.pipelines): steps (`filter`, `map`, `group_by`), a
        window (`tumbling`, `hopping`), then an aggregation (`count`, `sum`, `reduce`, `aggregate`) that
        returns the table it maintains."""
        from engine.pipelines import Pipeline

        source = self.topic(topic) if isinstance(topic, str) else topic
        self.topics.setdefault(source.name, source)
        return Pipeline(self, source)

    def GlobalTable(self, name: str, *, source_topic: Topic | str | None = None,
                    **options: Any) -> _GlobalTable:
        """Like Table, but every worker holds the whole table (all partitions): reference data for joins."""
        if name in self.tables:
            raise ConfigError(f"table {name!r} is declared twice")
        source = self._source(source_topic)
        table = self.tables[name] = _GlobalTable(name, app_id=self.id, source_topic=source, **options)
        return table

    def _table(self, name: str, *, source_topic: Topic | str | None = None, **options: Any) -> _Table:
        if name in self.tables:
            raise ConfigError(f"table {name!r} is declared twice")
        source = self._source(source_topic)
        table = (_Table(name, app_id=self.id, **options) if source is None
                 else _SourceTable(name, app_id=self.id, source_topic=source, **options))
        table.declared_by = self
        self.tables[name] = table
        return table

    def _source(self, source_topic: Topic | str | None) -> Topic | None:
        source = self.topic(source_topic) if isinstance(source_topic, str) else source_topic
        if source is not None:
            self.topics.setdefault(source.name, source)
        return source

    def timer(self, interval: float | timedelta, *, name: str | None = None, on_leader: bool = False
              ) -> Callable[[Callable[[], Awaitable[None]]], Callable[[], Awaitable[None]]]:
        """Run an async function every `interval` (seconds or timedelta) while the worker runs; with
        `on_leader=True`, only on the one worker of the group that owns task 0 (partition 0 of the topics
        the app reads), so that with N workers each tick runs once; when that worker leaves, the worker
        given task 0 next takes over at its next tick."""
        every = interval if isinstance(interval, timedelta) else timedelta(seconds=interval)
        if every <= timedelta(0):
            raise ConfigError(f"timer interval must be positive, not {interval!r}")

        def register(fun: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
            timer_name = name or fun.__name__
            self.timers[timer_name] = Timer(timer_name, every, fun, on_leader)
            return fun

        return register

    def crontab(self, expression: str, *, timezone: str | tzinfo | None = None, on_leader: bool = False,
                name: str | None = None
                ) -> Callable[[Callable[[], Awaitable[None]]], Callable[[], Awaitable[None]]]:
        """Run an async function at the times a cron expression names ('*/5 * * * *': every five minutes),
        in `timezone` (an IANA name such as 'Europe/Paris'; None: the machine's local time), on every worker
        or, with `on_leader=True`, on the group's leader only (see `timer`)."""
        from engine import schedule  # croniter, imported by apps that use it

        schedule.check(expression)
        zone = schedule.zone(timezone)

        def register(fun: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
            timer_name = name or fun.__name__
            self.timers[timer_name] = Timer(timer_name, timedelta(0), fun, on_leader, expression, zone)
            return fun

        return register

    def export(self, what: BaseTable | EventTimeTable | str, target: str, *, every: float | timedelta
               ) -> None:
        """Export a table (or "all": every table, from one checkpoint) to the lake table `target`
        (`delta:PATH` or `iceberg:NAMESPACE.TABLE`) at every multiple of `every` seconds on the wall clock,
        from every worker, each exporting the partitions it owns. Each tick is a round whose version holds
        every partition (engine.export.rounds; an Iceberg table on an object store: each worker's
        partitions, a version of their own). A failed round is logged and the next one catches up.
        Declared here and checked now (a bad target fails at declaration); the worker runs it."""
        interval = every if isinstance(every, timedelta) else timedelta(seconds=every)
        if interval <= timedelta(0):
            raise ConfigError(f"export interval must be positive, not {every!r}")
        where = lake_target(target, "app.export")
        if isinstance(what, str) and what != ALL:
            raise ConfigError(f"app.export takes a table or {ALL!r}, not {what!r}")
        table = None if isinstance(what, str) else (what.table if isinstance(what, EventTimeTable) else what)
        export = ScheduledExport(table, where, interval)
        if export.name in self.exports:
            raise ConfigError(f"app {self.id!r} already exports {export.what} to {target}")
        self.exports[export.name] = export

    def __repr__(self) -> str:
        return f"<App {self.id!r}: {len(self.topics)} topics, {len(self.agents)} agents>"
