"""What a join or a pipeline declares its internal tables, topics and agents through: the app
(engine.app.App is the one). Typed here, below the app, so that the tables and the pipelines, which the app
builds, do not import it back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.streams.stream import AgentFun
    from engine.tables.base import BaseTable
    from engine.tables.table import Table
    from engine.topics import Topic


class Declarer(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def tables(self) -> Mapping[str, BaseTable]: ...

    def topic(self, name: str, **options: Any) -> Topic: ...

    def Table(self, name: str, **options: Any) -> Table: ...

    def agent(self, channel: Topic | str | None = None, *, name: str | None = None
              ) -> Callable[[AgentFun], object]: ...
