"""The conductor: one consumer for the worker; it fetches, decodes and hands events to agents.

Everything else about a partition lives with its task (engine.tasks: leases, tables, producer, its part of
each checkpoint, the timestamp order of its inputs), which the task manager creates and closes as the group
assigns, revokes and loses partitions; the conductor reads the leases to know what is dispatched, and drops
what is queued for a partition the task manager lets go of.

Dispatch: each fetched batch of a partition is decoded once per reading topic's codecs and handed to the
mailbox of the agent instance that owns the partition, only while the partition's lease is dispatching
(records of a partition this worker no longer owns are never dispatched). The fetch loop waits for an agent
for at most PARK_AFTER: when a mailbox stays full longer, the batch is parked and only that partition is
paused until the mailbox has room again, so a stuck agent holds back its own partitions and no others
(per-partition backpressure; memory stays bounded by the mailbox size plus one batch per parked partition).
Why wait at all: aiokafka drops what it prefetched for a partition when it is paused and fetches it again
after the resume, so pausing on every momentarily full mailbox cost a busy worker CPU on every event
(benchmarks/passthrough.py; the figure is in benchmarks/README.md), while a full mailbox usually has room
again well within PARK_AFTER.

Offsets (the at-least-once rule): every dispatched record is tracked by its partition's lease and acked by
each agent that received it; only the contiguous prefix of finished records is committed.

A task whose inputs go in timestamp order (a table's source topic, a stream-stream join's streams, or topics
from which several agents use one table among them) chooses its next records itself (engine.tasks.release):
the fetch loop gives it its fetched batches and asks it to release them; the conductor is its `Delivery`:
the lag of an empty input, the hand-over of its streams' runs (consecutive runs for one mailbox decoded a
partition at a time and handed over together, a run that cannot be gathered dispatched alone), whether a
batch of it is parked (and, once that batch is handed over, asking the task to go on), and the background
tasks it waits in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import repeat
from typing import TYPE_CHECKING, Any

from agents import MailboxClosed, Service
from engine.activity import Activity
from engine.codecs import SKIP
from engine.errors import DecodeError, SchemasNotCached
from engine.events import TP, Event, RawRecord
from engine.schemas.codecs import fetch_schemas
from engine.tasks.inputs import InputPlan
from engine.tasks.poison import PoisonRecords
from engine.tasks.release import Ordering
from engine.topics import decode_error, event_time_ms

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from agents import Mailbox
    from engine.processing.runner import AgentRunner
    from engine.streams.quiesce import Quiesce
    from engine.tasks.active import ActiveTask
    from engine.tasks.leases import Lease, Leases
    from engine.tasks.pauses import Pauses
    from engine.tasks.release import Run
    from engine.topics import Topic
    from engine.transport.base import Admin, Consumer, TopicSpec

    _Target = tuple[Lease, Topic, AgentRunner, Mailbox[Event]]  # where a partition's runs are gathered

log = logging.getLogger(__name__)

ORDERED_POLL = 0.5  # seconds at most a fetch waits while a task's ordered release waits for time to pass

BACKPRESSURE = "backpressure"
PARK_AFTER = 0.05  # seconds the fetch loop waits for room in a full mailbox before parking the batch
# Seconds without an answer to a fetch of a partition that is fetched from (not paused) after which the stall
# watch counts it as waiting: a fetch is answered within fetch_max_wait (0.5 s) even when nothing is new.
FETCH_UNANSWERED = 15.0
Parked = list[tuple["Mailbox[Event]", list[Event]]]


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
        worker's (engine.activity), told of every batch fetched."""
        super().__init__("conductor")
        self.activity = activity if activity is not None else Activity()
        self.tasks: Mapping[int, ActiveTask] = tasks if tasks is not None else {}
        self.inputs = inputs if inputs is not None else InputPlan()
        # Source topics of tables: applied by their tasks in timestamp order, never handed to agents.
        self.table_sources = self.inputs.table_sources
        self.consumer = consumer
        self.leases = leases
        self.pauses = pauses
        self.quiesce = quiesce
        self.poison = poison if poison is not None else PoisonRecords()
        self._plan = plan  # how the topology creates a topic an agent starts reading at run time
        self._max_poll_records = max_poll_records
        self._admin_factory = admin_factory
        self.routes: dict[str, list[tuple[Topic, AgentRunner]]] = {}
        self.consumed: dict[str, int] = {}  # records fetched and dispatched, per topic (for /metrics)
        # Topics whose events write windowed tables: their batches advance stream time (filled by the tables
        # at their first write from a topic).
        self.timed_topics: set[str] = timed_topics if timed_topics is not None else set()
        self._parked: dict[TP, Parked] = {}
        # What the tasks whose inputs go in timestamp order release them with (engine.tasks.release).
        self._ordering = Ordering(self, pauses, max_poll_records, quiesce, self.inputs.serial)
        self._fetcher: asyncio.Task[None] | None = None
        self._subscribed = False

    # -- wiring -------------------------------------------------------------------------------------

    def add_route(self, topic: Topic, runner: AgentRunner) -> None:
        self.routes.setdefault(topic.name, []).append((topic, runner))
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
        return sorted({*self.routes, *self.table_sources})

    def runners(self) -> list[AgentRunner]:
        return list({id(r): r for rs in self.routes.values() for _, r in rs}.values())

    def fetching(self) -> bool:
        """Whether a partition of this worker is fetched by a fetcher that can stop being answered (the
        transport says when it was last answered): then the stall watch keeps looking while nothing
        happens, since a fetcher that stops makes nothing happen."""
        return any(self.consumer.fetched_at(tp) is not None for tp in self.leases.current)

    def busy_events(self) -> list[tuple[str, Event]]:
        """(agent, event) of every agent instance inside an event now."""
        return [(runner.agent.name, event) for runner in self.runners() for event in runner.current_events()]

    def waiting_at(self, event: Event) -> list[str] | None:
        """Where the agent instance inside `event` waits now (AgentRunner.waiting_at)."""
        for runner in self.runners():
            found = runner.waiting_at(event)
            if found is not None:
                return found
        return None

    async def task_states(self) -> dict[int, tuple[object, bool, str]]:
        """For the stall watch (engine.monitors.watchdog), per ready task: a token that changes whenever the
        task moves (records acked or handed over), whether work waits for it (records buffered, in flight,
        or on the broker not fetched yet), and where each of its partitions stands and why it may wait."""
        states: dict[int, tuple[object, bool, str]] = {}
        quiesce = self.quiesce
        now = time.time()
        fetching = self.consumer.assignment()
        for number, task in sorted(self.tasks.items()):
            if not task.ready or task.closed:
                continue
            inputs = task.inputs
            moved, waiting, parts = [], False, []
            for tp, lease in sorted(task.leases.items()):
                buffered = inputs.buffered(tp) if inputs is not None and tp in inputs.inputs else 0
                lag = await self.consumer.lag(tp)
                paused = sorted(self.pauses.reasons(tp)) + (["parked"] if tp in self._parked else [])
                # A partition fetched from (not paused) whose fetches the broker stopped answering: its lag
                # is as of its last answer, and may read 0 however much waits on the broker.
                fetched = self.consumer.fetched_at(tp)
                unanswered = None if fetched is None or paused else now - fetched
                stale = unanswered is not None and unanswered > FETCH_UNANSWERED
                # A partition of a ready task that the consumer does not fetch: nothing of it comes, and no
                # lag says that anything waits.
                unfetched = tp not in fetching
                waiting = waiting or bool(buffered or lease.in_flight or lag or stale or unfetched)
                moved.append((lease.position, lease.in_flight, buffered))
                parts.append(f"{tp.topic}[{tp.partition}] at {lease.position}, {lease.in_flight} in flight, "
                             f"{buffered} buffered, lag {'unknown' if lag is None else lag}"
                             + (f", paused ({', '.join(paused)})" if paused else "")
                             + (f", no fetch answered for {unanswered:.0f} s" if stale else "")
                             + (", not in the consumer's assignment" if unfetched else ""))
            if inputs is not None:
                parts.append(f"timestamp order: {task.release.state.value}")
            if quiesce is not None and quiesce.closed:
                parts.append("agents quiesced for a checkpoint")
            states[number] = (tuple(moved), waiting, "; ".join(parts))
        return states

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
        routes = self.routes
        leases = self.leases.current
        max_records = self._max_poll_records
        quiesce = self.quiesce
        buried = self.poison.buried  # partitions with a poison record (engine.tasks.poison): usually none
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
                if not topic_routes:
                    continue
                if buried and tp in buried:
                    records = await self._set_aside(topic_routes, records, lease)
                if len(topic_routes) == 1:
                    topic, runner = topic_routes[0]
                    await self._dispatch_one(topic, runner, records, lease)
                else:
                    await self._dispatch_many(topic_routes, records, lease)
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

    async def _dispatch(self, records: list[RawRecord], lease: Lease) -> None:
        topic_routes = self.routes.get(lease.tp[0])
        if not topic_routes:
            return
        if self.poison.buried and lease.tp in self.poison.buried:
            records = await self._set_aside(topic_routes, records, lease)
        if len(topic_routes) == 1:
            topic, runner = topic_routes[0]
            await self._dispatch_one(topic, runner, records, lease)
        else:
            await self._dispatch_many(topic_routes, records, lease)

    # -- the delivery of a task's runs in timestamp order (engine.tasks.release.Delivery) -----------------

    async def lag(self, tp: TP) -> int | None:
        return await self.consumer.lag(tp)

    def handover(self, leases: Mapping[TP, Lease]) -> _Handover:
        return _Handover(self, leases)

    def parked(self, tps: Collection[TP]) -> bool:
        parked = self._parked
        return bool(parked) and any(tp in parked for tp in tps)

    def _target(self, leases: Mapping[TP, Lease], tp: TP) -> _Target | None:
        """The one mailbox a partition's records go to, if its runs can be gathered (a stream with one agent
        reading it, no poison record set aside); None for the others (table sources, several agents)."""
        lease = leases.get(tp)
        routes = self.routes.get(tp.topic) if tp.topic not in self.table_sources else None
        buried = self.poison.buried
        if lease is None or routes is None or len(routes) != 1 or (buried and tp in buried):
            return None
        topic, runner = routes[0]
        return lease, topic, runner, runner.mailbox(topic.name, tp.partition)

    async def _hand_over(self, gathered: _Gathered) -> None:
        """Decode the gathered runs, each partition's in one call, and deliver them in their order."""
        if gathered.mailbox is None:
            return
        parts, order, mailbox, first = gathered.take()
        if len(parts) == 1:
            topic, runner, records, lease = parts[0]
            events = await self._events(topic, runner, records, lease)
        else:
            events = []
            for topic, runner, records, lease in parts:
                events += await self._events(topic, runner, records, lease)
            position = {id(record): at for at, record in enumerate(order)}
            events.sort(key=lambda event: position[id(event.record)])
        if events:
            await self._deliver(first, mailbox, events)

    async def _dispatch_one(self, topic: Topic, runner: AgentRunner, records: list[RawRecord],
                            lease: Lease) -> None:
        """A batch for one agent, decoded in one call per codec (no Python call per record); a batch with a
        record that does not decode goes one record at a time, the bad ones to the agent's error policy."""
        events = await self._events(topic, runner, records, lease)
        if events:
            await self._deliver(lease, runner.mailbox(topic.name, lease.tp.partition), events)

    async def _events(self, topic: Topic, runner: AgentRunner, records: list[RawRecord],
                      lease: Lease) -> list[Event]:
        """`records` decoded into events for `runner`, tracked on their lease (counted as received)."""
        key_codec = topic.key_codec
        try:
            keys = key_codec.decode_many([r.key for r in records])
            skipped = getattr(key_codec, "skips", False) and any(key is SKIP for key in keys)
            values = topic.value_codec.decode_many([r.value for r, key in zip(records, keys, strict=True)
                                                    if key is not SKIP] if skipped else
                                                   [r.value for r in records])
        except SchemasNotCached as missing:  # (a schema id met for the first time: asked once, then again)
            await fetch_schemas(missing, f"{lease.tp.topic}[{lease.tp.partition}]")
            return await self._events(topic, runner, records, lease)
        except DecodeError:
            events = await self._decode_each(topic, runner, records, lease)
        else:
            lease.track_many([r.offset for r in records])
            if skipped:  # engine's own records (their values not decoded): acked, never events
                events = []
                decoded = iter(values)
                for record, key in zip(records, keys, strict=True):
                    if key is SKIP:
                        lease.ack(record.offset)
                    else:
                        events.append(Event(lease.tp, record, key, next(decoded), lease))
            else:
                tp, count = lease.tp, len(records)
                events = list(map(Event, repeat(tp, count), records, keys, values, repeat(lease, count)))
        if events and lease.tp[0] in self.timed_topics:
            self._observe(lease, topic, events)
        runner.received += len(events)
        return events

    @staticmethod
    async def _decode_each(topic: Topic, runner: AgentRunner, records: list[RawRecord],
                           lease: Lease) -> list[Event]:
        decode_key = None if topic.key_codec.name == "raw" else topic.key_codec.decode
        decode_value = topic.value_codec.decode
        events: list[Event] = []
        for record in records:
            try:
                key, value = await _decoded(lease.tp, record, decode_key, decode_value)
            except DecodeError as exc:
                lease.track(record.offset)
                await runner.handle_error(lease.tp, record, decode_error(lease.tp, record, exc))
                lease.ack(record.offset)
                continue
            lease.track(record.offset)
            if key is SKIP:
                lease.ack(record.offset)
                continue
            events.append(Event(lease.tp, record, key, value, lease))
        return events

    async def _dispatch_many(self, topic_routes: list[tuple[Topic, AgentRunner]], records: list[RawRecord],
                             lease: Lease) -> None:
        """Several agents read this topic: each gets the record decoded by its own Topic's codecs."""
        partition = lease.tp.partition
        outgoing: dict[int, tuple[AgentRunner, Mailbox[Event], list[Event], Topic]] = {}
        for record in records:
            decoded: dict[int, tuple[Any, Any] | DecodeError] = {}
            for topic, _ in topic_routes:
                if id(topic) not in decoded:
                    while True:
                        try:
                            decoded[id(topic)] = topic.decode(lease.tp, record)
                        except SchemasNotCached as missing:
                            await fetch_schemas(missing, f"{lease.tp.topic}[{lease.tp.partition}]")
                            continue
                        except DecodeError as exc:
                            decoded[id(topic)] = exc
                        break
            if any(not isinstance(found, DecodeError) and found[0] is SKIP for found in decoded.values()):
                lease.track(record.offset)  # engine's own record: for no agent
                lease.ack(record.offset)
                continue
            receivers = sum(1 for t, _ in topic_routes if not isinstance(decoded[id(t)], DecodeError))
            lease.track(record.offset, shares=max(receivers, 1))
            for topic, runner in topic_routes:
                outcome = decoded[id(topic)]
                if isinstance(outcome, DecodeError):
                    await runner.handle_error(lease.tp, record, outcome)
                else:
                    mailbox = runner.mailbox(topic.name, partition)
                    outgoing.setdefault(id(mailbox), (runner, mailbox, [], topic))[2].append(
                        Event(lease.tp, record, outcome[0], outcome[1], lease))
            if receivers == 0:
                lease.ack(record.offset)
        if outgoing and lease.tp[0] in self.timed_topics:
            for _, _, events, topic in outgoing.values():  # (each agent's events timed by its own Topic)
                self._observe(lease, topic, events)
        for runner, mailbox, events, _ in outgoing.values():
            runner.received += len(events)
            await self._deliver(lease, mailbox, events)

    async def _set_aside(self, topic_routes: list[tuple[Topic, AgentRunner]], records: list[RawRecord],
                         lease: Lease) -> list[RawRecord]:
        """Dead-letter the poison records of a batch (by the error policy of the agent they blocked);
        returns the others."""
        kept = []
        for record in records:
            verdict = self.poison.verdict(lease.tp, record.offset)
            if verdict is None:
                kept.append(record)
                continue
            agent, error = verdict
            runner = next((r for _, r in topic_routes if r.agent.name == agent), topic_routes[0][1])
            lease.track(record.offset)
            await runner.handle_error(lease.tp, record, error)
            lease.ack(record.offset)
        return kept

    @staticmethod
    def _observe(lease: Lease, topic: Topic, events: list[Event]) -> None:
        """Stream time for windowed tables these events write: per batch, only for their topics. Each event's
        time (extracted from its value, or its record's) is kept on it, so the windowed table does not work
        it out again."""
        extract = topic.timestamp
        high = -1
        if extract is None:
            for event in events:
                at = event.time_ms = event.record.timestamp
                if at > high:
                    high = at
        else:
            for event in events:
                at = event.time_ms = event_time_ms(extract, event)
                if at > high:
                    high = at
        lease.observe(events[-1].record.offset, high)

    async def _deliver(self, lease: Lease, mailbox: Mailbox[Event], events: list[Event]) -> None:
        """Hand `events` over (waiting up to PARK_AFTER for room), or park them and pause their partition
        until the mailbox has room."""
        tp = lease.tp
        if not lease.dispatching:
            lease.abandoned += len(events)
            return
        parked = self._parked.get(tp)
        if parked is not None:
            parked.append((mailbox, events))  # behind what is already parked: order is kept
            return
        if mailbox.full():
            try:
                async with asyncio.timeout(PARK_AFTER):
                    await mailbox.room()
            except TimeoutError:
                parked = self._parked[tp] = [(mailbox, events)]
                self.pauses.hold([tp], BACKPRESSURE)
                self.spawn(self._unpark(lease, parked), f"unpark:{tp.topic}[{tp.partition}]")
                return
            except MailboxClosed:
                lease.abandoned += len(events)
                return
            if not lease.dispatching:
                lease.abandoned += len(events)  # revoked while we waited: never handed over
                return
        if mailbox.closed:  # its agent stopped (the worker stops): never handed over, never acked
            lease.abandoned += len(events)
            return
        mailbox.put_many_nowait(events)

    async def _unpark(self, lease: Lease, parked: Parked) -> None:
        tp = lease.tp
        try:
            while parked:
                mailbox, events = parked[0]
                try:
                    await mailbox.room()
                except MailboxClosed:
                    return
                if not parked or not lease.dispatching:
                    return  # dropped meanwhile (revoked or lost)
                parked.pop(0)
                mailbox.put_many_nowait(events)
        finally:
            parked.clear()
            if self._parked.get(tp) is parked:
                del self._parked[tp]
            if lease.dispatching:
                self.pauses.release([tp], BACKPRESSURE)
            task = self.tasks.get(tp.partition)
            if task is not None and task.inputs is not None:
                task.release.unparked(self._ordering)  # its release stopped for this batch

    def drop_queued(self, tps: Collection[TP]) -> dict[TP, int]:
        """Drop the events of `tps` that no agent has taken yet (parked or in mailboxes); counts per TP."""
        dropped: dict[TP, int] = dict.fromkeys(tps, 0)
        for tp in tps:
            parked = self._parked.pop(tp, None)
            if parked:
                dropped[tp] += sum(len(events) for _, events in parked)
                parked.clear()

        def drop(event: Event) -> bool:
            tp = event.tp
            if tp in dropped:
                dropped[tp] += 1
                return True
            return False

        for runner in self.runners():
            for mailbox in runner.all_mailboxes():
                mailbox.purge(drop)
        return dropped


class _Gathered:
    """Runs of records for one mailbox, gathered in their order to be handed over together: per input
    partition its records (decoded together), and the order of all of them."""

    __slots__ = ("first", "mailbox", "order", "parts")

    def __init__(self) -> None:
        self.parts: dict[TP, tuple[Topic, AgentRunner, list[RawRecord], Lease]] = {}
        self.order: list[RawRecord] = []
        self.mailbox: Mailbox[Event] | None = None
        self.first: Lease | None = None

    def add(self, records: list[RawRecord], lease: Lease, topic: Topic, runner: AgentRunner,
            mailbox: Mailbox[Event]) -> None:
        part = self.parts.get(lease.tp)
        if part is None:
            self.parts[lease.tp] = (topic, runner, records, lease)  # (a run's list is the release's own)
        else:
            part[2].extend(records)
        if self.mailbox is None:
            self.mailbox, self.first = mailbox, lease
        self.order += records

    def take(self) -> tuple[list[tuple[Topic, AgentRunner, list[RawRecord], Lease]], list[RawRecord],
                            Mailbox[Event], Lease]:
        """What was gathered (its parts, their records' order, the mailbox, the first run's lease), and start
        afresh."""
        assert self.mailbox is not None
        assert self.first is not None
        taken = (list(self.parts.values()), self.order, self.mailbox, self.first)
        self.parts, self.order, self.mailbox, self.first = {}, [], None, None
        return taken


class _Handover:
    """One pass of a task's release handing its streams' runs over (engine.tasks.release.Handover): runs for
    one mailbox gathered across calls, decoded and handed over together."""

    __slots__ = ("_conductor", "_gathered", "_leases", "_targets")

    def __init__(self, conductor: Conductor, leases: Mapping[TP, Lease]) -> None:
        self._conductor = conductor
        self._leases = leases
        self._gathered = _Gathered()
        self._targets: dict[TP, _Target | None] = {}  # where each partition's runs are gathered (None: not)

    async def deliver(self, runs: Sequence[Run], start: int) -> int:
        conductor, leases, gathered, targets = self._conductor, self._leases, self._gathered, self._targets
        parked, sources, limit = conductor._parked, conductor.table_sources, conductor._max_poll_records
        if start == 0:
            targets.clear()  # (looked up once per choice of runs)
        for index in range(start, len(runs)):
            if parked and conductor.parked(leases):
                return index  # a batch of the task waits for room: nothing of the task may overtake it
            tp, records = runs[index]
            target = targets[tp] if tp in targets else targets.setdefault(tp, conductor._target(leases, tp))
            if target is not None:
                if not target[0].dispatching:
                    continue  # revoked meanwhile: never handed over
                if gathered.mailbox is not None and gathered.mailbox is not target[3]:
                    await conductor._hand_over(gathered)
                gathered.add(records, *target)
                if len(gathered.order) >= limit:
                    await conductor._hand_over(gathered)
                continue
            if tp.topic in sources:
                return index  # a table's run: the task applies it
            lease = leases.get(tp)
            if lease is None or not lease.dispatching:
                continue  # revoked meanwhile: never handed over
            await conductor._hand_over(gathered)
            await conductor._dispatch(records, lease)
        return len(runs)

    async def flush(self) -> None:
        await self._conductor._hand_over(self._gathered)

    async def applied(self, records: list[RawRecord], lease: Lease) -> bool:
        conductor = self._conductor
        if not conductor.routes.get(lease.tp.topic):
            return False
        await conductor._dispatch(records, lease)
        return True


async def _decoded(tp: TP, record: RawRecord, decode_key: Callable[[bytes | None], Any] | None,
                   decode_value: Callable[[bytes | None], Any]) -> tuple[Any, Any]:
    """One record's key and value, the schemas it names fetched first if they were not yet."""
    while True:
        try:
            key = record.key if decode_key is None else decode_key(record.key)
            return key, None if key is SKIP else decode_value(record.value)  # (engine's own: no value)
        except SchemasNotCached as missing:
            await fetch_schemas(missing, f"{tp.topic}[{tp.partition}]")
