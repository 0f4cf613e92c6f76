"""The values that flow through engine: raw records from a transport and the decoded events agents see."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

Headers = Sequence[tuple[str, bytes]]


class TP(NamedTuple):
    """A topic partition."""

    topic: str
    partition: int


class EventLease(Protocol):
    """What an event needs of the assignment it was fetched under (engine.tasks.leases.Lease is one): whether
    it is still dispatched and whether it ended, and where to ack its record (or a run of records at once:
    engine.tasks.offsets.OffsetTracker.ack_run)."""

    dispatching: bool
    ended: bool

    def ack(self, offset: int) -> None: ...

    def ack_run(self, first: int, last: int, count: int) -> bool: ...


class RawRecord(Protocol):
    """A record as fetched, before decoding. It does not say its topic and partition: it comes in its
    partition's batch, and what it becomes (an `Event`) carries that `TP`. So the record aiokafka's batch
    parser makes fits as it is (engine.transport.aiokafka_private_fetch.bare_records): no second object per
    record."""

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


class Restamped:
    """A record with another timestamp, and maybe other headers (a join result's: engine.streams.stream
    .Stream.stands_for)."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(self, record: RawRecord, timestamp: int, headers: Headers | None = None) -> None:
        self.offset, self.key, self.value = record.offset, record.key, record.value
        self.headers = record.headers if headers is None else headers
        self.timestamp = timestamp


class Event:
    """A decoded record on its way through agents.

    Each agent that receives the record gets its own Event and acks it once; the partition's lease (its
    offset tracker) counts the acks of a record several agents share (see OffsetTracker.track). An event whose
    lease ended belongs to a partition this worker no longer owns (engine.tasks.leases): it is never applied.
    """

    __slots__ = ("key", "lease", "record", "time_ms", "tp", "value")

    def __init__(self, tp: TP, record: RawRecord, key: Any, value: Any, lease: EventLease | None) -> None:
        self.tp = tp
        self.record = record
        self.key = key
        self.value = value
        self.lease = lease
        # The topic's `timestamp=` extractor applied, once, where stream time needs it
        # (engine.fetch.conductor): windowed tables reuse it instead of extracting again. None: not computed.
        self.time_ms: int | None = None

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def partition(self) -> int:
        return self.tp.partition

    @property
    def offset(self) -> int:
        return self.record.offset

    @property
    def headers(self) -> Headers:
        """A tuple on every transport (aiokafka's parser gives a list, shared by the events of every agent
        that reads the record: a copy here, made only where headers are read)."""
        return tuple(self.record.headers)

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
        if self.lease is not None:
            self.lease.ack(self.record.offset)

    def __repr__(self) -> str:
        return (
            f"<Event {self.topic}[{self.partition}]@{self.offset} key={self.key!r} "
            f"value={self.value!r}>"
        )


def describe(tps: Iterable[TP]) -> str:
    """Partitions as a person reads them, by topic: `clicks[0, 2], views[1]`."""
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{t}{sorted(p)}" for t, p in sorted(by_topic.items()))
