"""What a stream needs of the worker it runs in (`StreamContext`: the agent's declarations, joins, the
quiesce gate, timings, tracing) and of a table it joins (`Lookup`, `TimedLookup`), and what joins a record
(`RecordJoin`): typed here, below both, so that streams and the worker do not import each other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agents import Mailbox
    from engine.events import Event, Headers
    from engine.stats import Histogram
    from engine.streams.quiesce import Quiesce
    from engine.streams.stream import Stream
    from engine.topics import Topic
    from engine.tracing import AgentSpans
    from engine.windows import Seconds


class StreamContext(Protocol):
    """What a stream needs from the worker to re-route itself through a topic."""

    def subscribe(self, topic: Topic) -> Mailbox[Event]:
        """Deliver `topic`'s events for this agent instance into the returned mailbox."""

    def repartition_topic(self, name: str, like: Topic | None, key_type: type | None = None,
                          value_type: type | None = None) -> Topic:
        """The internal topic `<app>-<name>`: typed like `like` unless `key_type`/`value_type` say."""

    def opened(self, stream: Stream) -> None:
        """Track a root stream so the worker can release what it holds if the agent crashes."""

    def pulling(self) -> None:
        """The agent asked for its first event: every operator of its pipeline (group_by, through) is
        declared by now, so the worker knows every topic it must subscribe before it fetches."""

    def joined(self, topic: Topic | None, table: Lookup) -> None:
        """The stream of `topic` is joined with `table` (the topology checks they are co-partitioned)."""

    def stream_join(self, topic: Topic, other: Topic, within: Seconds, grace: Seconds,
                    how: str) -> RecordJoin:
        """The agent's stream of `topic` is joined with the stream of `other` (engine.tables.stream_joins):
        `other`'s events come into this stream too, in timestamp order; returns what joins each record."""

    def grace_join(self, topic: Topic, table: TimedLookup, grace: Seconds, how: str) -> RecordJoin:
        """The agent's stream of `topic` is joined with the versioned `table`, each event after waiting
        `grace` for the table's updates (engine.tables.grace_joins); returns what joins each record."""

    @property
    def agent_name(self) -> str:
        """The agent whose instance this is."""

    @property
    def quiesce(self) -> Quiesce | None:
        """The exactly-once checkpoint's gate between events (None: at-least-once, no pauses)."""

    @property
    def timings(self) -> Histogram | None:
        """Where the processing time of a sample of the events goes (None: not timed)."""

    @property
    def tracing(self) -> AgentSpans | None:
        """The spans of the agent's events (None: the worker does not trace)."""


class RecordJoin(Protocol):
    """A stream-stream join (engine.tables.stream_joins.StreamJoin): what a record of either stream makes."""

    def process(self, event: Event) -> list[tuple[Any, Any, Any, int, Headers | None]]:
        """(key, left value or None, right value or None, its event time in ms, its headers or None for the
        current record's) of each result, in order."""


class Lookup(Protocol):
    """What a join needs from a table."""

    def find(self, key: Any) -> tuple[bool, Any]:
        """(True, value) if `key` is in the table, else (False, None); a table's default is not used."""


@runtime_checkable
class TimedLookup(Lookup, Protocol):
    """A table that answers as of a time (a versioned table, engine.tables.versioned): a stream joined with it
    finds the value valid at each event's time, not the latest."""

    def find_at(self, key: Any, at_ms: int) -> tuple[bool, Any]:
        """(True, the value valid at `at_ms`) or (False, None)."""
