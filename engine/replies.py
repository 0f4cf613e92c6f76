"""Replies to `agent.ask`: every worker reads all partitions of `<app>-replies` (outside the group, from
the end) and completes the future waiting for each correlation id. Replies for other workers are skipped."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from agents import Service
from engine.agent import CORRELATION_ID
from engine.codecs import loads
from engine.events import TP

if TYPE_CHECKING:
    from engine.transport.base import Transport

log = logging.getLogger(__name__)


class ReplyService(Service):
    def __init__(self, transport: Transport, topic: str) -> None:
        super().__init__("replies")
        self.topic = topic
        self.partitions = 1  # set by the worker from the broker before this starts
        self.consumer = transport.consumer(group_id=None)
        self._waiting: dict[str, asyncio.Future[Any]] = {}

    def expect(self, correlation_id: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return future

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    async def on_start(self) -> None:
        await self.consumer.start()
        tps = [TP(self.topic, p) for p in range(self.partitions)]
        self.consumer.assign(tps)
        # Fixed end offsets, not "seek to end": a reply produced after this point is never skipped.
        for tp, (_, end) in (await self.consumer.offsets(tps)).items():
            self.consumer.seek(tp, end)
        self.spawn(self._read(), "read")

    async def on_stop(self) -> None:
        await self.consumer.stop()

    async def _read(self) -> None:
        while True:
            batches = await self.consumer.getmany(1.0, 1000)
            for records in batches.values():
                for record in records:
                    self._complete(record.headers, record.value)

    def _complete(self, headers: Any, value: bytes | None) -> None:
        correlation = next((v for k, v in headers if k == CORRELATION_ID), None)
        if correlation is None:
            return
        future = self._waiting.get(correlation.decode())
        if future is not None and not future.done():
            try:
                future.set_result(loads(value) if value is not None else None)
            except Exception as exc:
                future.set_exception(exc)
