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
partition n. Sends made outside any event (timers, asks from outside an agent) go to the worker's own
transactional producer (`<data_dir>/<app>/worker-id`), committed at the same checkpoints.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError, NotRunning, PartitionMigrated, ProducerFenced
from engine.streams import current_event

if TYPE_CHECKING:
    from collections.abc import Collection, Coroutine, Mapping, Sequence

    from engine.events import TP, Headers
    from engine.transport.base import Producer, Transport

log = logging.getLogger(__name__)


class TransactionsFailed(EngineError):
    """Some tasks' transactions did not commit (the others did); `failed` says which and why."""

    def __init__(self, failed: dict[int, BaseException]) -> None:
        super().__init__("transactions of tasks " + ", ".join(
            f"{n} ({type(e).__name__}: {e})" for n, e in sorted(failed.items())) + " did not commit")
        self.failed = failed

    @property
    def fenced(self) -> set[int]:
        return {n for n, e in self.failed.items() if isinstance(e, ProducerFenced)}


def task_transactional_id(app_id: str, number: int) -> str:
    return f"{app_id}-task-{number}"


class TaskProducers:
    """A Producer that routes each send to the transaction of the task it belongs to.

    With a `worker_id` (exactly-once) it is the worker's producer: sends made inside an event go to its
    task's transaction, the others to the worker's own. Without one (at-least-once), only the tables use it,
    through `for_partition`, for their changelogs."""

    def __init__(self, transport: Transport, app_id: str, worker_id: str | None) -> None:
        self._transport = transport
        self._app_id = app_id
        self._worker_id = worker_id
        self.worker = transport.producer(worker_id) if worker_id is not None else None
        self.tasks: dict[int, Producer] = {}

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.worker is not None:
            await self.worker.start()

    async def stop(self) -> None:
        await self.release(set(self.tasks))
        if self.worker is not None:
            await self.worker.stop()

    async def assign(self, numbers: Collection[int]) -> None:
        """Start (and so fence every earlier owner of) the transactions of tasks `numbers`."""
        new = sorted(n for n in numbers if n not in self.tasks)
        if not new:
            return
        producers = {n: self._transport.producer(task_transactional_id(self._app_id, n)) for n in new}
        results = await asyncio.gather(*(p.start() for p in producers.values()), return_exceptions=True)
        failure = None
        for (number, producer), result in zip(producers.items(), results, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
                await producer.stop()
            else:
                self.tasks[number] = producer
        if failure is not None:
            raise failure

    async def release(self, numbers: Collection[int]) -> None:
        """Stop the producers of tasks `numbers` (after their last commit, or after they were lost: an open
        transaction is aborted by the next owner's fencing)."""
        stopping = [self.tasks.pop(n) for n in numbers if n in self.tasks]
        await asyncio.gather(*(p.stop() for p in stopping), return_exceptions=True)

    # -- the Producer protocol ----------------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        """Whether it commits everything agents send (exactly-once on a broker with transactions)."""
        return self.worker is not None and self.worker.transactional

    def for_partition(self, number: int) -> Producer:
        producer = self.tasks.get(number)
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
        event = current_event.get()
        if event is None:
            if self.worker is None:
                raise NotRunning("sends outside an event need the exactly-once worker producer")
            producer = self.worker
        else:
            if event.lease is not None and event.lease.ended:
                raise PartitionMigrated(f"{event.topic}[{event.partition}] moved while offset {event.offset} "
                                        "was processed; its new owner processes it")
            producer = self.for_partition(event.partition)
        return producer.send(topic, key, value, headers=headers, partition=partition,
                             timestamp_ms=timestamp_ms)

    async def send_batch(self, topic: str, partition: int,
                         records: Sequence[tuple[bytes | None, bytes | None]]) -> asyncio.Future[int]:
        """Into task `partition`'s transaction (the batches of a checkpoint belong to their partition's)."""
        return await self.for_partition(partition).send_batch(topic, partition, records)

    async def flush(self) -> None:
        producers = [*self.tasks.values(), *([self.worker] if self.worker is not None else [])]
        await asyncio.gather(*(p.flush() for p in producers))

    async def commit_transaction(self, offsets: Mapping[TP, int], group_id: str,
                                 held: Collection[int] = ()) -> None:
        """Commit every task's transaction with its partitions' offsets, and the worker's, concurrently
        (producers without transactions, memory://, only flush); the transactions of the tasks `held` stay
        open. Raises TransactionsFailed naming the tasks that did not commit (the others did)."""
        by_task: dict[int, dict[TP, int]] = {n: {} for n in self.tasks if n not in held}
        for tp, offset in offsets.items():
            if tp.partition not in held:
                by_task.setdefault(tp.partition, {})[tp] = offset
        missing = {n for n in by_task if n not in self.tasks}
        if missing:
            raise TransactionsFailed(dict.fromkeys(missing, PartitionMigrated("no producer for the task")))
        numbers = sorted(by_task)
        commits = [_commit(self.tasks[n], by_task[n], group_id) for n in numbers]
        # The worker's own transaction commits alongside the tasks' (nothing orders them: it holds no
        # offsets), not after them: one round of broker round trips per checkpoint, not two.
        worker = self.worker
        if worker is not None:
            commits.append(_commit(worker, {}, group_id))
        results = await asyncio.gather(*commits, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
        worker_result = results.pop() if worker is not None else None  # the worker's is last
        if worker is not None and isinstance(worker_result, Exception):
            log.warning("the worker's own transaction (timers, sends outside events) did not commit "
                        "(%s); its sends are lost, a new transaction starts", worker_result)
            await worker.stop()
            self.worker = self._transport.producer(self._worker_id)
            await self.worker.start()
        failed = {n: r for n, r in zip(numbers, results, strict=True) if isinstance(r, BaseException)}
        if failed:
            raise TransactionsFailed(failed)


async def _commit(producer: Producer, offsets: Mapping[TP, int], group_id: str) -> None:
    if producer.transactional:
        await producer.commit_transaction(offsets, group_id)
    else:
        await producer.flush()
