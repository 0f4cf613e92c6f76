"""The values that flow through engine: raw records from a transport and the decoded events agents see."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from engine.offsets import OffsetTracker

Headers = Sequence[tuple[str, bytes]]


class TP(NamedTuple):
    """A topic partition."""

    topic: str
    partition: int


class RawRecord(Protocol):
    """A record as fetched, before decoding. aiokafka's ConsumerRecord fits as it is: no copy per record."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers: ...


class Event:
    """A decoded record on its way through agents.

    Each agent that receives the record gets its own Event and acks it once; the partition's tracker counts
    the acks of a record several agents share (see OffsetTracker.track).
    """

    __slots__ = ("_tracker", "key", "record", "value")

    def __init__(self, record: RawRecord, key: Any, value: Any, tracker: OffsetTracker | None) -> None:
        self.record = record
        self.key = key
        self.value = value
        self._tracker = tracker

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def partition(self) -> int:
        return self.record.partition

    @property
    def offset(self) -> int:
        return self.record.offset

    @property
    def headers(self) -> Headers:
        return self.record.headers

    @property
    def timestamp(self) -> datetime:
        return datetime.fromtimestamp(self.record.timestamp / 1000, tz=UTC)

    def header(self, name: str) -> bytes | None:
        for key, value in self.record.headers:
            if key == name:
                return value
        return None

    def ack(self) -> None:
        """Mark this event processed by its agent."""
        if self._tracker is not None:
            self._tracker.ack(self.record.offset)

    def __repr__(self) -> str:
        return (
            f"<Event {self.topic}[{self.partition}]@{self.offset} key={self.key!r} "
            f"value={self.value!r}>"
        )
