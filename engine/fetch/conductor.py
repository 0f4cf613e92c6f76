"""The conductor: one consumer for the worker; it fetches, and hands each batch to its task or its agents.

Everything else about a partition lives with its task (engine.tasks: leases, tables, producer, its part of
each checkpoint, the timestamp order of its inputs), which the task manager creates and closes as the group
assigns, revokes and loses partitions; the conductor reads the leases to know what is dispatched, and drops
what is queued for a partition the task manager lets go of.

A fetched batch of a partition whose lease is dispatching goes to the dispatcher (engine.fetch.dispatch:
decoded, handed to the agents' mailboxes, parked while a mailbox stays full), or, for a task whose inputs go
in timestamp order (a table's source topic, a stream-stream join's streams, or topics from which several
agents use one table among them), to the task's release, which chooses its next records itself
(engine.tasks.release) and hands them over through the fetch's `Delivery` (engine.fetch.handover).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from agents import Service
from engine.activity import Activity
from engine.fetch.dispatch import Dispatcher
from engine.fetch.handover import FetchDelivery
from engine.fetch.stalls import TaskState, task_states
from engine.tasks.inputs import InputPlan
from engine.tasks.poison import PoisonRecords
from engine.tasks.release import Ordering

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.events import TP
    from engine.processing.runner import AgentRunner
    from engine.streams.quiesce import Quiesce
    from engine.tasks.active import ActiveTask
    from engine.tasks.leases import Leases
    from engine.tasks.pauses import Pauses
    from engine.topics import Topic
    from engine.transport.base import Admin, Consumer, TopicSpec

log = logging.getLogger(__name__)

ORDERED_POLL = 0.5  # seconds at most a fetch waits while a task's ordered release waits for time to pass


class Conductor(Service):
    def __init__(
        self,
        consumer: Consumer,
        *,
        leases: Leases,
        pauses: Pauses,
        max_poll_records: int,
        admin_factory: Callable[[], Admin],
        quiesce: Quiesce | None = None,
        timed_topics: set[str] | None = None,
        plan: Callable[[Topic], TopicSpec] | None = None,
        poison: PoisonRecords | None = None,
        tasks: Mapping[int, ActiveTask] | None = None,
        inputs: InputPlan | None = None,
        activity: Activity | None = None,
    ) -> None:
        """`inputs`: which topics tasks take in timestamp order (engine.tasks.inputs); `activity`: the
        worker's (engine.activity), told of every batch fetched; `timed_topics`: topics whose events write
        windowed tables (engine.fetch.dispatch)."""
        super().__init__("conductor")
        self.activity = activity if activity is not None else Activity()
        self.tasks: Mapping[int, ActiveTask] = tasks if tasks is not None else {}
        self.inputs = inputs if inputs is not None else InputPlan()
        self.consumer = consumer
        self.leases = leases
        self.pauses = pauses
        self.quiesce = quiesce
        self.dispatcher = Dispatcher(
            pauses, poison if poison is not None else PoisonRecords(),
            timed_topics=timed_topics if timed_topics is not None else set(),
            table_sources=self.inputs.table_sources, spawn=self.spawn, unparked=self._unparked)
        self._plan = plan  # how the topology creates a topic an agent starts reading at run time
        self._max_poll_records = max_poll_records
        self._admin_factory = admin_factory
        self.consumed: dict[str, int] = {}  # records fetched and dispatched, per topic (for /metrics)
        # What the tasks whose inputs go in timestamp order release them with (engine.tasks.release).
        self._ordering = Ordering(FetchDelivery(consumer, self.dispatcher, max_poll_records, self.spawn),
                                  pauses, max_poll_records, quiesce, self.inputs.serial)
        self._fetcher: asyncio.Task[None] | None = None
        self._subscribed = False

    # -- wiring -------------------------------------------------------------------------------------

    def add_route(self, topic: Topic, runner: AgentRunner) -> None:
        self.dispatcher.add_route(topic, runner)
        if self._subscribed:  # a topic an agent reads only from now on: subscribed with the next rebalance
            self.spawn(self._subscribe_new(topic), f"subscribe:{topic.name}")

    async def _subscribe_new(self, topic: Topic) -> None:
        """A topic an agent reads only from now on (its pipeline was not declared before start): created as
        the topology plans it, so the broker never auto-creates it when a record is sent to it, then
        subscribed (with the next rebalance)."""
        if self._plan is not None:
            admin = self._admin_factory()
            try:
                await admin.create_topics([self._plan(topic)])
            finally:
                await admin.close()
        self.consumer.subscribe(self.subscribed_topics())

    def subscribed_topics(self) -> list[str]:
        """Every topic read through the group: the agents' and the tables' over a source topic."""
        return sorted({*self.dispatcher.routes, *self.inputs.table_sources})

    def fetching(self) -> bool:
        """Whether a partition of this worker is fetched by a fetcher that can stop being answered (the
        transport says when it was last answered): then the stall watch keeps looking while nothing
        happens, since a fetcher that stops makes nothing happen."""
        return any(self.consumer.fetched_at(tp) is not None for tp in self.leases.current)

    async def task_states(self) -> dict[int, TaskState]:
        """Where each ready task's partitions stand (engine.fetch.stalls)."""
        return await task_states(self.tasks, self.consumer, self.pauses, self.dispatcher.parked, self.quiesce)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def on_start(self) -> None:
        # Subscribe once, before the first fetch, to everything the agents read: their pipelines included,
        # as the topology declared them (the worker created every topic of it before this).
        topics = self.subscribed_topics()
        if topics:
            self.consumer.subscribe(topics)
        self._subscribed = True
        await self.consumer.start()
        if topics:
            self._fetcher = self.spawn(self._fetch_loop(), "fetch")

    def stop_fetching(self) -> None:
        if self._fetcher is not None:
            self._fetcher.cancel()

    async def on_stop(self) -> None:
        self.stop_fetching()
        await self.consumer.stop()  # leaves the group (the tasks closed after their final checkpoint)

    # -- the hot path -------------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        consumer = self.consumer
        dispatch = self.dispatcher.dispatch
        routes = self.dispatcher.routes
        leases = self.leases.current
        max_records = self._max_poll_records
        quiesce = self.quiesce
        # Tasks with a table's source topic or a stream-stream join's streams among their inputs.
        ordered = self.inputs.ordered
        ordering = self._ordering
        tasks = self.tasks
        consumed = self.consumed
        activity = self.activity
        while True:
            batches = await consumer.getmany(self._fetch_wait() if ordered else None, max_records)
            if batches:
                activity.signal()  # (records to process, then commit)
            if quiesce is not None and quiesce.closed:
                with consumer.waiting_on_worker():
                    await quiesce.wait_open()  # a checkpoint is waiting for agents to be idle
            for tp, records in batches.items():
                lease = leases.get(tp)  # (aiokafka's TopicPartition is a tuple equal to our TP)
                if lease is None or not lease.dispatching:
                    continue  # not ours (any more): never dispatched
                consumed[tp[0]] = consumed.get(tp[0], 0) + len(records)
                if ordered and (task := tasks.get(tp[1])) is not None and task.inputs is not None \
                        and lease.tp in task.inputs.inputs:  # (a topic subscribed later goes as it comes)
                    task.release.buffer(lease.tp, records, ordering)
                    continue
                topic_routes = routes.get(tp[0])
                if topic_routes:
                    await dispatch(records, lease, topic_routes)
            if ordered:
                for task in list(tasks.values()):
                    if task.inputs is not None and task.release.due:  # (no coroutine for the others)
                        await task.release.run(ordering)

    def _fetch_wait(self) -> float | None:
        """How long a fetch may wait for records: for as long as nothing changes (engine.transport.base),
        unless a task's timestamp-ordered release can go on by time alone before then (a caught-up input's
        max_task_idle ends): then until that moment, and one poll interval at most (a transport that cannot
        see every change looks again after it anyway)."""
        now = asyncio.get_running_loop().time()
        dues = [due for task in self.tasks.values()
                if task.inputs is not None and (due := task.release.due_at(now)) is not None]
        return min(min(dues) - now, ORDERED_POLL) if dues else None

    def _unparked(self, tp: TP) -> None:
        """A parked batch of `tp` was handed over: its task's release, stopped for it, goes on."""
        task = self.tasks.get(tp.partition)
        if task is not None and task.inputs is not None:
            task.release.unparked(self._ordering)
