"""Exactly-once producers: one transaction per task (partition number), so a reassignment fences for real.

Why one transactional producer per task, and not one per worker: a worker frozen past its session timeout
(SIGSTOP, a long GC pause, an agent blocking the loop) wakes up with an open transaction holding stale table
writes and outputs, and the source offsets it would commit. aiokafka's `send_offsets_to_transaction` carries
no group generation (no KIP-447), so the broker cannot refuse that commit on the grounds that the partitions
moved, and one transactional id per worker is not fenced by a reassignment. A transactional id per input
partition number, `<app>-task-<n>`, is (Kafka Streams' original exactly-once design): the new owner of task n
calls `init_transactions` with that id before it reads a committed offset or a changelog record, which bumps
the id's epoch, aborts whatever the old owner left open, and makes every later commit of the old owner fail
with ProducerFenced. The old owner then drops the task as lost. The price is one producer per owned partition
number, and one commit per task at each checkpoint (issued concurrently).

Tasks are partition numbers, because tables are partitioned like the streams that write them: events of
partition n of every source topic, their table writes (changelog partition n), their closed windows and
everything agents send while processing them commit in task n's transaction, with the source offsets of
partition n. Each active task owns its producer (engine.tasks); under exactly-once agents send through
`EventProducer`, which routes a send made inside an event to its task's producer, and one made outside any
event (timers, asks from outside an agent) to the worker's own transactional producer
(`<data_dir>/<app>/worker-id`), committed at the same checkpoints.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import PartitionMigrated, TransactionAborted
from engine.streams.current import current_event

if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping, Sequence

    from engine.events import TP, Event, Headers
    from engine.transport.base import KeyedRecord, Producer, Transport

log = logging.getLogger(__name__)


def task_transactional_id(app_id: str, number: int) -> str:
    return f"{app_id}-task-{number}"


class HasProducer(Protocol):
    """What the router needs of a task: its producer (None before it started or after it stopped)."""

    producer: Producer | None


async def commit_transactions(commits: Mapping[int, tuple[Producer, Mapping[TP, int]]],
                              group_id: str) -> dict[int, BaseException]:
    """Commit each task's transaction with its partitions' offsets, concurrently (producers without
    transactions, memory://, only flush); returns the tasks that did not commit (the others did)."""
    numbers = sorted(commits)
    results = await asyncio.gather(*(_commit(*commits[n], group_id) for n in numbers), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
    return {n: r for n, r in zip(numbers, results, strict=True) if isinstance(r, BaseException)}


class EventProducer:
    """The Producer agents send with under exactly-once: a send made inside an event goes to its task's
    transaction, any other to the worker's own. `tasks` is the worker's map of active tasks (the task
    manager's, which keeps it current)."""

    def __init__(self, transport: Transport, worker_id: str, tasks: Mapping[int, HasProducer]) -> None:
        self._transport = transport
        self._worker_id = worker_id
        self.worker: Producer = transport.producer(worker_id)
        self.tasks = tasks
        # Clear while the worker's own transaction commits or its producer is replaced after a failed
        # commit: sends outside events wait for the next transaction instead of failing with the old one.
        self._worker_open = asyncio.Event()
        self._worker_open.set()

    async def start(self) -> None:
        await self.worker.start()

    async def stop(self) -> None:
        await self.worker.stop()

    @property
    def transactional(self) -> bool:
        """Whether it commits everything agents send (exactly-once on a broker with transactions)."""
        return self.worker.transactional

    def for_partition(self, number: int) -> Producer:
        task = self.tasks.get(number)
        producer = task.producer if task is not None else None
        if producer is None:
            raise PartitionMigrated(f"task {number} is not owned by this worker (any more)")
        return producer

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Coroutine[Any, Any, asyncio.Future[object]]:
        """The chosen producer's send (a plain function returning its awaitable: one frame less per send)."""
        event = current_event()
        if event is None:
            return self._send_outside(topic, key, value, headers=headers, partition=partition,
                                      timestamp_ms=timestamp_ms)
        return self._of_event(event).send(topic, key, value, headers=headers, partition=partition,
                                          timestamp_ms=timestamp_ms)

    def _of_event(self, event: Event) -> Producer:
        """The producer of the task `event` belongs to; PartitionMigrated if its partition moved."""
        if event.lease is not None and event.lease.ended:
            raise PartitionMigrated(f"{event.topic}[{event.partition}] moved while offset {event.offset} "
                                    "was processed; its new owner processes it")
        return self.for_partition(event.partition)

    async def _send_outside(self, topic: str, key: bytes | None, value: bytes | None,
                            **options: Any) -> asyncio.Future[object]:
        """Into the worker's own transaction, the one open once it can take sends: a send that met a
        transaction that failed to commit (never enqueued, so nothing is sent twice) goes into the next."""
        while True:
            await self._worker_open.wait()
            producer = self.worker
            try:
                return await producer.send(topic, key, value, **options)
            except TransactionAborted:
                if producer is self.worker and self._worker_open.is_set():
                    raise

    async def send_many(self, topic: str, records: Sequence[KeyedRecord]) -> None:
        """Into the current event's task's transaction, as `send` (the caller sends one partition's run of
        events at a time, the last of them current); outside events, the worker's own."""
        event = current_event()
        if event is None:
            await self._worker_open.wait()
            await self.worker.send_many(topic, records)
            return
        await self._of_event(event).send_many(topic, records)

    async def send_batch(self, topic: str, partition: int,
                         records: Sequence[tuple[bytes | None, bytes | None]],
                         timestamps: Sequence[int] | None = None) -> asyncio.Future[int]:
        """Into task `partition`'s transaction."""
        return await self.for_partition(partition).send_batch(topic, partition, records, timestamps)

    async def flush(self) -> None:
        producers = [self.worker, *(t.producer for t in self.tasks.values() if t.producer is not None)]
        await asyncio.gather(*(p.flush() for p in producers))

    async def commit_transaction(self, offsets: Mapping[TP, int], group_id: str) -> None:
        """Commit the worker's own transaction (timers, sends outside events; it holds no offsets). One that
        failed is replaced, its sends lost with a warning: the tasks' commits do not depend on it. Sends
        made meanwhile go into the next transaction."""
        self._worker_open.clear()
        try:
            await _commit(self.worker, {}, group_id)
        except Exception as exc:
            log.warning("the worker's own transaction (timers, sends outside events) did not commit "
                        "(%s); its sends are lost, a new transaction starts", exc)
            failed, self.worker = self.worker, self._transport.producer(self._worker_id)
            await failed.stop()
            await self.worker.start()
        finally:
            self._worker_open.set()


async def _commit(producer: Producer, offsets: Mapping[TP, int], group_id: str) -> None:
    if producer.transactional:
        await producer.commit_transaction(offsets, group_id)
    else:
        await producer.flush()
