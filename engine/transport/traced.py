"""A producer that writes the trace context current where a record is sent into its headers (engine.tracing):
what agents, timers and asks send with when the worker's `tracing` setting is on. Without it the worker
uses its producers as they are, so a send pays nothing for tracing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine, Mapping, Sequence

    from engine.events import TP, Headers
    from engine.transport.base import KeyedRecord, Producer


class Injector(Protocol):
    """What stamps headers (engine.tracing.Tracing)."""

    def inject(self, headers: Headers | None) -> Headers | None:
        """`headers` with the current trace context in place of any they carry."""


class TracedProducer:
    """`producer`, each record it sends carrying the current trace context. Starting, stopping, flushing and
    committing are the wrapped producer's: the worker starts and stops that one."""

    __slots__ = ("_producer", "_tracing")

    def __init__(self, producer: Producer, tracing: Injector) -> None:
        self._producer = producer
        self._tracing = tracing

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, headers: Headers | None = None,
             partition: int | None = None, timestamp_ms: int | None = None,
             ) -> Coroutine[Any, Any, asyncio.Future[object]]:
        """(A plain function returning the wrapped producer's awaitable: the context is read here, in the
        sender's task, and no coroutine frame is added.)"""
        return self._producer.send(topic, key, value, headers=self._tracing.inject(headers),
                                   partition=partition, timestamp_ms=timestamp_ms)

    async def send_batch(self, topic: str, partition: int,
                         records: Sequence[tuple[bytes | None, bytes | None]],
                         timestamps: Sequence[int] | None = None) -> asyncio.Future[int]:
        return await self._producer.send_batch(topic, partition, records, timestamps)

    async def send_many(self, topic: str, records: Sequence[KeyedRecord]) -> None:
        inject = self._tracing.inject
        await self._producer.send_many(topic, [(key, value, inject(headers) or (), at)
                                               for key, value, headers, at in records])

    async def flush(self) -> None:
        await self._producer.flush()

    def for_partition(self, number: int) -> Producer:
        return TracedProducer(self._producer.for_partition(number), self._tracing)

    @property
    def transactional(self) -> bool:
        return self._producer.transactional

    async def commit_transaction(self, offsets: Mapping[TP, int], group_id: str) -> None:
        await self._producer.commit_transaction(offsets, group_id)
