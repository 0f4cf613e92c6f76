"""`agent.ask`: the request, the reply, and the wait for it.

Every worker reads all partitions of `<app>-replies` (outside the group, from the end) and completes the
future waiting for each correlation id; replies for other workers are skipped.

Requests and replies are sent by a producer outside transactions, under both guarantees. Under
exactly-once, a request sent in the asker's transaction would be invisible (read_committed) until that
transaction commits, which waits for the asker to finish its event, which waits for the reply: every ask
from an agent took the checkpoint's pause timeout (seconds). Sent outside, the request is seen at once, the
reply too, and the checkpoint lets the replier run while an asker waits (engine.streams.quiesce). The asking
and the answering events stay exactly-once in their own effects (table writes, sends, offsets); the request is
at-least-once: an asker that fails before its commit asks again when its event is processed again, so an
answering agent with side effects should be idempotent per request (docs/exactly-once.md says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from agents import Service
from engine.agent import CORRELATION_ID, REPLY_TO
from engine.codecs import loads
from engine.events import TP
from engine.streams.current import current_event

if TYPE_CHECKING:
    from collections.abc import Iterator

    from engine.streams.quiesce import Quiesce
    from engine.topics import Topic
    from engine.transport.base import Producer, Transport

log = logging.getLogger(__name__)


class ReplyService(Service):
    def __init__(self, transport: Transport, topic: str, producer: Producer, quiesce: Quiesce | None
                 ) -> None:
        """`quiesce`: the checkpoints' gate (exactly-once), which an ask from inside an event holds open."""
        super().__init__("replies")
        self.topic = topic
        self.partitions = 1  # set by the worker from the broker before this starts
        self.consumer = transport.consumer(group_id=None)
        self.producer = producer  # not transactional (see above); started and stopped by the worker
        self.quiesce = quiesce
        self._waiting: dict[str, asyncio.Future[Any]] = {}

    async def request(self, channel: Topic, key: Any, value: Any, correlation_id: str) -> None:
        key_bytes, value_bytes = channel.encode(key, value)
        headers = [(REPLY_TO, self.topic.encode()), (CORRELATION_ID, correlation_id.encode())]
        await self.producer.send(channel.name, key_bytes, value_bytes, headers=headers)

    async def reply(self, reply_to: str, correlation_id: bytes, value: bytes | None) -> None:
        await self.producer.send(reply_to, None, value, headers=[(CORRELATION_ID, correlation_id)])

    @contextlib.contextmanager
    def asking(self) -> Iterator[None]:
        """Around an ask's wait: an ask from inside an event holds exactly-once checkpoints' gate open."""
        quiesce = self.quiesce if current_event() is not None else None
        if quiesce is not None:
            quiesce.ask_started()
        try:
            yield
        finally:
            if quiesce is not None:
                quiesce.ask_finished()

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
            batches = await self.consumer.getmany(None, 1000)  # (nothing else to do meanwhile)
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
