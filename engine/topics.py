"""Topics: a name, key and value codecs, and a way to send once a worker attached its producer."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from engine.codecs import SKIP, Codec, CodecFormat, codec_for
from engine.errors import DecodeError, NotRunning
from engine.scope import PerWorker

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from engine.events import TP, Event, Headers, RawRecord
    from engine.settings import Settings
    from engine.transport.base import KeyedRecord, Producer


class Topic:
    """A Kafka topic as the app sees it. Declared on the App; usable for sending once a worker runs."""

    def __init__(
        self,
        name: str,
        *,
        key_type: type | None = None,
        value_type: type | None = None,
        key_serializer: str | CodecFormat | None = None,
        value_serializer: str | CodecFormat | None = None,
        partitions: int | None = None,
        replication: int | None = None,
        config: Mapping[str, str] | None = None,
        internal: bool = False,
        timestamp: Callable[[Any], Any] | None = None,
    ) -> None:
        self.name = name
        self.timestamp = timestamp  # event time from the value (seconds or datetime); default: record time
        self.key_type = key_type
        self.value_type = value_type
        self.key_codec: Codec = codec_for(key_type, key_serializer, topic=name, is_key=True)
        self._raw_key = self.key_codec.name == "raw"
        self.value_codec: Codec = codec_for(value_type, value_serializer, topic=name)
        self.partitions = partitions
        self.replication = replication
        self.config = dict(config or {})
        self.internal = internal
        self._producers: PerWorker[Producer] = PerWorker()
        self._producer: Producer | None = None  # the only worker's, or one that picks the current worker's
        self.sent = 0  # records sent by this process (every worker of it) through `send`, for /metrics

    def use_codecs(self, *, key: Codec | None = None, value: Codec | None = None) -> None:
        """Replace codecs chosen from the types (a windowed table keys its topics by (key, window))."""
        if key is not None:
            self.key_codec = key
            self._raw_key = key.name == "raw"
        if value is not None:
            self.value_codec = value

    def attach(self, producer: Producer | None, owner: object = None) -> None:
        """Called by a worker (`owner`): sends go through `producer` (None detaches it at shutdown). With
        several workers of the app in this process, a send goes through the producer of the worker the
        running code belongs to (engine.scope)."""
        if producer is None:
            self._producers.unbind(owner)
        else:
            self._producers.bind(owner, producer)
        only = self._producers.only()
        if only is not None or not len(self._producers):
            self._producer = only
        else:
            self._producer = _CurrentProducer(self._producers)  # type: ignore[assignment]  # sends only

    def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Awaitable[asyncio.Future[object]]:
        """Encode a record and return the awaitable that enqueues it; `await topic.send(...)` returns once
        it is enqueued, with a future that resolves when the broker acknowledged it. (A plain function
        returning the producer's coroutine: one coroutine frame less on the hottest path.)"""
        producer = self._producer
        if producer is None:
            raise NotRunning(
                f"topic {self.name!r} is not attached to a running worker; start one with "
                "`engine worker -A module:app` (or send from inside an agent or timer)"
            )
        self.sent += 1
        if not self._raw_key:  # `encode`, inlined: a call and a tuple less per send (the passthrough's path)
            key = self.key_codec.encode(key)
        elif key is not None and not isinstance(key, bytes):
            key = self.key_codec.encode(key)  # raises a clear EncodeError
        return producer.send(
            self.name, key, self.value_codec.encode(value), headers=headers, partition=partition,
            timestamp_ms=timestamp_ms,
        )

    def send_encoded(self, records: Sequence[KeyedRecord]) -> Awaitable[None]:
        """Return the awaitable that enqueues records already encoded with this topic's codecs (`encode`),
        each to its key's partition, as whole batches per partition (Producer.send_many): what a fused
        group_by forwards a fetched batch with."""
        producer = self._producer
        if producer is None:
            raise NotRunning(f"topic {self.name!r} is not attached to a running worker")
        self.sent += len(records)
        return producer.send_many(self.name, records)

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        """A record's key and value as this topic's codecs encode them (a raw key must be bytes)."""
        if not self._raw_key or (key is not None and not isinstance(key, bytes)):
            key = self.key_codec.encode(key)
        return key, self.value_codec.encode(value)

    def event_time_ms(self, event: Event) -> int:
        """The event time of an event read from this topic: its `timestamp=` extractor applied to the value
        (seconds or datetime), else the record's timestamp."""
        return event_time_ms(self.timestamp, event)

    def decode(self, tp: TP, record: RawRecord) -> tuple[Any, Any]:
        """A record of `tp` decoded (a DecodeError names the record)."""
        try:
            key = self.key_codec.decode(record.key)
            return key, None if key is SKIP else self.value_codec.decode(record.value)  # (engine's own)
        except DecodeError as exc:
            raise decode_error(tp, record, exc) from exc

    def __repr__(self) -> str:
        return f"<Topic {self.name!r}>"


def event_time_ms(extract: Callable[[Any], Any] | None, event: Event) -> int:
    """Event time in ms: `extract(value)` (seconds or datetime), or the record's timestamp."""
    if extract is None:
        return event.record.timestamp
    value = extract(event.value)
    if type(value) is int:  # whole seconds, the usual case: no float maths (per event of a windowed topic)
        return value * 1000
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    seconds: float = value
    return round(seconds * 1000)


def decode_error(tp: TP, record: RawRecord, error: DecodeError) -> DecodeError:
    """`error`, saying which record of `tp` it was about."""
    return DecodeError(f"{tp.topic}[{tp.partition}]@{record.offset}: cannot decode: {error}")


class _CurrentProducer:
    """A topic's producer while several workers of the app run in this process: the current worker's."""

    __slots__ = ("_producers",)

    def __init__(self, producers: PerWorker[Producer]) -> None:
        self._producers = producers

    def send(self, topic: str, key: bytes | None, value: bytes | None, **options: Any) -> Any:
        producer = self._producers.current()
        assert producer is not None
        return producer.send(topic, key, value, **options)

    def send_many(self, topic: str, records: Sequence[KeyedRecord]) -> Any:
        producer = self._producers.current()
        assert producer is not None
        return producer.send_many(topic, records)


def planned_partitions(topic: Topic, settings: Settings, like: int | None = None) -> int:
    """The partition count the worker creates `topic` with: its declared count, else `like` (the count of
    the topic it follows), else `topic_partitions`. (An existing topic keeps its own.)"""
    return topic.partitions or like or settings.topic_partitions
