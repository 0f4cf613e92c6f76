"""The processing guarantee: at-least-once or exactly-once, one strategy chosen once by the worker.

It decides everything that differs between the two, so that nothing else asks which one is in force:
- which producer agents send with (exactly-once: the tasks' transactions, engine.commit.transactions;
  at-least-once: a plain producer), and which one `ask` uses (always outside transactions,
  engine.processing.replies);
- whether checkpoints pause agents between events (exactly-once: the quiesce gate,
  engine.streams.quiesce), and which tasks a cut leaves out because one of their events is still in
  progress;
- how a checkpoint commits: at-least-once confirms the group membership, flushes what agents sent, commits
  the changelogs' transactions, then commits the offsets through the group; exactly-once commits each task's
  transaction with its offsets (on a transport without transactions, memory://, it flushes and commits the
  offsets through the group, like at-least-once, at a cut where agents are paused).

Changelogs are written in per-task transactions under both guarantees: a worker that lost its partitions
(frozen past its session timeout mid-flush) is fenced and its stale records are aborted, so at-least-once may
process an event twice, but never lets a stale value win.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from engine.commit.transactions import EventProducer, HasProducer, commit_transactions, task_transactional_id
from engine.errors import PartitionMigrated
from engine.streams.quiesce import Quiesce

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from engine.commit.cut import TaskCut
    from engine.events import TP, Event
    from engine.transport.base import Consumer, Producer, Transport

log = logging.getLogger(__name__)

class Guarantee(Protocol):
    name: str

    @property
    def quiesce(self) -> Quiesce | None:
        """The gate that pauses agents between events, if checkpoints need it."""

    @property
    def producer(self) -> Producer:
        """What agents send with."""

    @property
    def ask_producer(self) -> Producer:
        """What asks and replies travel on (never in a transaction)."""

    @property
    def task_producer(self) -> Callable[[int], Producer] | None:
        """A new producer for task n (its changelogs; under exactly-once every send of its events), if tasks
        need one."""

    @property
    def producers(self) -> list[Producer]:
        """Every producer to start and stop, each once."""

    @property
    def commits_empty_cuts(self) -> bool:
        """Whether a cut with no offsets and no table writes still commits (open transactions may hold
        sends of timers and agents)."""

    @property
    def commits_every_task(self) -> bool:
        """Whether a checkpoint asked for some partitions (a revoke) commits every task anyway: each task's
        transaction holds everything its events sent since its last commit."""

    @property
    def stores_follow_commits(self) -> bool:
        """Whether a store is written only once its writes and its task's input offsets committed in one
        transaction (exactly-once on Kafka): then a store must never reflect input past its task's committed
        offsets, and one that does is rebuilt at set-up (engine.tables.state). At-least-once writes stores
        before it commits offsets: a store ahead of them is what a crash leaves, and its events are
        processed again (at least once), its changelog ahead as much."""

    async def pause(self, timeout: float) -> Sequence[tuple[str, Event]]:
        """Before a cut: the events it goes on without (agent, event); their tasks stay out of it, each
        holding its transaction open."""

    def resume(self) -> None:
        """After a cut."""

    async def before_send(self, consumer: Consumer) -> None:
        """Before the cut's writes are sent."""

    async def commit(self, consumer: Consumer, cuts: Sequence[TaskCut],
                     failed: Mapping[int, BaseException]) -> dict[int, BaseException]:
        """Make the tasks' cuts durable but those `failed` already; returns every task that failed."""

    async def commit_offsets(self, consumer: Consumer, offsets: Mapping[TP, int]) -> None:
        """Commit what the transactions did not."""


class AtLeastOnce:
    """Offsets are committed once everything the events before them caused is durable."""

    name = "at_least_once"

    def __init__(self, transport: Transport, app_id: str, *, tables: bool) -> None:
        self.group_id = app_id
        self.quiesce: Quiesce | None = None
        self.producer: Producer = transport.producer(None)
        self.ask_producer: Producer = self.producer
        self.task_producer: Callable[[int], Producer] | None = (  # the changelogs' transactions
            (lambda n: transport.producer(task_transactional_id(app_id, n))) if tables else None)

    @property
    def producers(self) -> list[Producer]:
        return [self.producer]

    @property
    def commits_empty_cuts(self) -> bool:
        return False

    @property
    def commits_every_task(self) -> bool:
        return False

    @property
    def stores_follow_commits(self) -> bool:
        return False

    async def pause(self, timeout: float) -> Sequence[tuple[str, Event]]:
        return ()  # agents are not paused: every task is in the cut

    def resume(self) -> None:
        pass

    async def commit(self, consumer: Consumer, cuts: Sequence[TaskCut],
                     failed: Mapping[int, BaseException]) -> dict[int, BaseException]:
        """The cut's sends made durable: what agents sent, and the changelogs' transactions (its offsets are
        committed by `commit_offsets`, once the stores hold its writes)."""
        await self.producer.flush()  # DeliveryFailed propagates: never commit past a lost send
        commits: dict[int, tuple[Producer, Mapping[TP, int]]] = {
            cut.task.number: (cut.task.producer, {}) for cut in cuts
            if cut.task.producer is not None and cut.task.number not in failed}
        return {**failed, **await commit_transactions(commits, self.group_id)}

    async def before_send(self, consumer: Consumer) -> None:
        """A worker the group has moved on from must not flush: its partitions are another's."""
        await consumer.confirm_membership()

    async def commit_offsets(self, consumer: Consumer, offsets: Mapping[TP, int]) -> None:
        if offsets:
            await consumer.commit(offsets)


class ExactlyOnce:
    """Each task commits its events' outputs, table writes and offsets in one transaction, at a cut where
    none of its events is half done."""

    name = "exactly_once"

    def __init__(self, transport: Transport, app_id: str, worker_id: str, tasks: Mapping[int, HasProducer]
                 ) -> None:
        """`tasks`: the active tasks, whose producers take what agents send inside their events."""
        self.group_id = app_id
        self.events = EventProducer(transport, worker_id, tasks)
        self.producer: Producer = self.events  # agents' sends go to their event's task's transaction
        self.task_producer: Callable[[int], Producer] = (
            lambda n: transport.producer(task_transactional_id(app_id, n)))
        # Asks travel outside transactions (engine.processing.replies), on a producer of their own.
        self.ask_producer: Producer = transport.producer(None)
        self.quiesce: Quiesce = Quiesce()
        self._stuck: set[int] = set()  # ids of the events a cut went on without

    @property
    def producers(self) -> list[Producer]:
        return [self.events, self.ask_producer]

    @property
    def commits_empty_cuts(self) -> bool:
        return self.events.transactional

    @property
    def commits_every_task(self) -> bool:
        return True

    @property
    def stores_follow_commits(self) -> bool:
        return self.events.transactional

    async def pause(self, timeout: float) -> Sequence[tuple[str, Event]]:
        """Close the gate and wait (bounded, and not again for an event already found stuck) for agents to be
        between events; returns the events agents are still inside, whose tasks the cut leaves out: their
        transactions stay open (whatever the event sent so far is in there), the others commit."""
        quiesce = self.quiesce
        known = sum(1 for _, event in quiesce.events_inside() if id(event) in self._stuck)
        await quiesce.pause(timeout, stuck=known)
        inside = quiesce.events_inside()  # the gate is closed: no event starts meanwhile
        new = [(agent, event) for agent, event in inside if id(event) not in self._stuck]
        if new:
            log.warning("exactly-once checkpoint: agents inside an event (%s); their tasks' transactions "
                        "stay open until the events finish, the other tasks commit",
                        ", ".join(f"{agent} at {e.topic}[{e.partition}]@{e.offset}" for agent, e in new))
        self._stuck = {id(event) for _, event in inside}
        return inside

    def resume(self) -> None:
        self.quiesce.resume()

    async def before_send(self, consumer: Consumer) -> None:
        """Fencing guards the transactions: a worker the group moved on from fails its commits."""

    async def commit(self, consumer: Consumer, cuts: Sequence[TaskCut],
                     failed: Mapping[int, BaseException]) -> dict[int, BaseException]:
        """Each task's transaction with its offsets, and the worker's own (it holds no offsets, so nothing
        orders it after the tasks': one round of broker round trips per checkpoint, not two)."""
        with_offsets = self.events.transactional
        commits: dict[int, tuple[Producer, Mapping[TP, int]]] = {
            cut.task.number: (cut.task.producer, cut.committable() if with_offsets else {}) for cut in cuts
            if cut.task.producer is not None and cut.task.number not in failed}
        missing = {cut.task.number: PartitionMigrated(f"task {cut.task.number} has no producer")
                   for cut in cuts if cut.task.producer is None and cut.task.number not in failed}
        tasks, _ = await asyncio.gather(commit_transactions(commits, self.group_id),
                                        self.events.commit_transaction({}, self.group_id))
        return {**failed, **missing, **tasks}

    async def commit_offsets(self, consumer: Consumer, offsets: Mapping[TP, int]) -> None:
        if not self.events.transactional and offsets:  # memory://: no transactions to hold them
            await consumer.commit(offsets)


def choose(name: str, transport: Transport, app_id: str, *, tables: bool,
           worker_id: Callable[[], str], tasks: Mapping[int, HasProducer]) -> Guarantee:
    """The strategy for the `processing_guarantee` setting; `tasks`: the worker's active tasks."""
    if name == "exactly_once":
        return ExactlyOnce(transport, app_id, worker_id(), tasks)
    return AtLeastOnce(transport, app_id, tables=tables)
