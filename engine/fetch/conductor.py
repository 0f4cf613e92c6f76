"""The conductor: one consumer for the worker; it fetches, decodes and hands events to agents. That is all.

Everything else about a partition lives with its task (engine.tasks: leases, tables, producer, its part of
each checkpoint), which the task manager creates and closes as the group assigns, revokes and loses
partitions; the conductor only reads the leases to know what is dispatched, and drops what is queued for a
partition the task manager lets go of.

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

Tables over a source topic: that topic's partitions are inputs of their tasks like the streams'. A task with
such an input releases its batches in timestamp order (engine.tasks.inputs); a run of the table's records is
applied to its store once every event of the task dispatched before it was processed, so each event sees
the table as of its own time, over a backlog as live. A stream-stream join's two streams are released the
same way; while a batch of such a task is parked, nothing else of the task is released (an agent reading
both streams would otherwise get the other's next batch first), and its release resumes once the parked
batch is handed over.
"""

from __future__ import annotations

import asyncio
import logging
from itertools import repeat
from typing import TYPE_CHECKING, Any

from agents import MailboxClosed, Service
from engine.codecs import SKIP
from engine.errors import DecodeError
from engine.events import TP, Event, RawRecord
from engine.tasks.poison import PoisonRecords
from engine.topics import decode_error, event_time_ms

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from agents import Mailbox
    from engine.processing.runner import AgentRunner
    from engine.streams.quiesce import Quiesce
    from engine.tasks.active import ActiveTask
    from engine.tasks.inputs import TaskInputs
    from engine.tasks.leases import Lease, Leases
    from engine.tasks.pauses import Pauses
    from engine.topics import Topic
    from engine.transport.base import Admin, Consumer, TopicSpec

    _Target = tuple[Lease, Topic, AgentRunner, Mailbox[Event]]  # where a partition's runs are gathered

    ApplySource = Callable[[int, list[RawRecord]], bool]

log = logging.getLogger(__name__)

BACKPRESSURE = "backpressure"
ORDERING = "ordering"  # a task's input held back while it has this many times max_poll_records buffered
ORDERING_BUFFERS = 4
FETCH_WAIT_WARNING = 30.0  # seconds a task's inputs wait for an empty input's records before a warning
PARK_AFTER = 0.05  # seconds the fetch loop waits for room in a full mailbox before parking the batch
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
        table_sources: Mapping[str, ApplySource] | None = None,
        ordered_topics: Collection[str] = (),
    ) -> None:
        super().__init__("conductor")
        self.tasks: Mapping[int, ActiveTask] = tasks if tasks is not None else {}
        # Source topics of tables: applied in their tasks' timestamp order, never handed to agents.
        self.table_sources: dict[str, ApplySource] = dict(table_sources or {})
        # Stream-stream joins' streams: handed to their agent in their tasks' timestamp order too.
        self.ordered_topics = frozenset(ordered_topics)
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
        self.consumer.subscribe(self._topics())

    def _topics(self) -> list[str]:
        return sorted({*self.routes, *self.table_sources})

    def runners(self) -> list[AgentRunner]:
        return list({id(r): r for rs in self.routes.values() for _, r in rs}.values())

    def busy_events(self) -> list[tuple[str, Event]]:
        """(agent, event) of every agent instance inside an event now."""
        return [(runner.agent.name, event) for runner in self.runners() for event in runner.current_events()]

    async def task_states(self) -> dict[int, tuple[object, bool, str]]:
        """For the stall watch (engine.monitors.watchdog), per ready task: a token that changes whenever the
        task moves (records acked or handed over), whether work waits for it (records buffered, in flight,
        or on the broker not fetched yet), and where each of its partitions stands and why it may wait."""
        states: dict[int, tuple[object, bool, str]] = {}
        quiesce = self.quiesce
        for number, task in sorted(self.tasks.items()):
            if not task.ready or task.closed:
                continue
            inputs = task.inputs
            moved, waiting, parts = [], False, []
            for tp, lease in sorted(task.leases.items()):
                buffered = inputs.buffered(tp) if inputs is not None and tp in inputs.inputs else 0
                lag = await self.consumer.lag(tp)
                waiting = waiting or bool(buffered or lease.in_flight or lag)
                moved.append((lease.position, lease.in_flight, buffered))
                paused = sorted(self.pauses.reasons(tp)) + (["parked"] if tp in self._parked else [])
                parts.append(f"{tp.topic}[{tp.partition}] at {lease.position}, {lease.in_flight} in flight, "
                             f"{buffered} buffered, lag {'unknown' if lag is None else lag}"
                             + (f", paused ({', '.join(paused)})" if paused else ""))
            if inputs is not None:
                parts.append(f"timestamp order: releasing {task.releasing}, waiting {task.waiting}")
            if quiesce is not None and quiesce.closed:
                parts.append("agents quiesced for a checkpoint")
            states[number] = (tuple(moved), waiting, "; ".join(parts))
        return states

    # -- lifecycle ----------------------------------------------------------------------------------

    async def on_start(self) -> None:
        # Subscribe once, before the first fetch, to everything the agents read: their pipelines included,
        # as the topology declared them (the worker created every topic of it before this).
        topics = self._topics()
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
        ordered = bool(self.table_sources or self.ordered_topics)
        tasks = self.tasks
        consumed = self.consumed
        while True:
            batches = await consumer.getmany(0.5, max_records)
            if quiesce is not None and quiesce.closed:
                await quiesce.wait_open()  # a checkpoint is waiting for agents to be idle
            for tp, records in batches.items():
                lease = leases.get(tp)  # (aiokafka's TopicPartition is a tuple equal to our TP)
                if lease is None or not lease.dispatching:
                    continue  # not ours (any more): never dispatched
                consumed[tp[0]] = consumed.get(tp[0], 0) + len(records)
                if ordered and (task := tasks.get(tp[1])) is not None and task.inputs is not None \
                        and lease.tp in task.inputs.inputs:  # (a topic subscribed later goes as it comes)
                    self._buffer(task, lease.tp, records)
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
                    # (Not while it is set up: its partitions are paused and their positions not sought
                    # yet, and asking their lag would wait for a position only the set-up gives.)
                    if task.inputs is not None and not task.releasing and task.ready:
                        await self._release(task)

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

    # -- a task's inputs in timestamp order (engine.tasks.inputs) ---------------------------------------

    def _buffer(self, task: ActiveTask, tp: TP, records: list[RawRecord]) -> None:
        inputs = task.inputs
        assert inputs is not None
        inputs.add(tp, records)
        if inputs.buffered(tp) > self._max_poll_records * ORDERING_BUFFERS:
            self.pauses.hold([tp], ORDERING)  # bounded memory while the task's other inputs lag

    async def _release(self, task: ActiveTask) -> None:
        """Hand the task's buffered records to agents and its tables in timestamp order, for as long as the
        order is known; a table run waits (in a task of its own) until the events before it are processed."""
        inputs = task.inputs
        assert inputs is not None
        consumer = self.consumer
        loop = asyncio.get_running_loop()
        task.releasing = True
        # Consecutive runs for the same mailbox (a stream-stream join's two streams, merged into one agent's
        # stream) are handed over together, in their order, each partition's records decoded in one call:
        # interleaved by time, runs are of one or two records, and a decode and a hand-over each cost more
        # than the records.
        gathered = _Gathered()
        try:
            while not task.closed:
                empty = inputs.empty()
                lags = {tp: await consumer.lag(tp) for tp in empty} if empty else {}
                now = loop.time()
                runs = inputs.next_runs(lags, now, self._max_poll_records)
                if not runs:
                    if overdue := inputs.overdue(now, FETCH_WAIT_WARNING):
                        log.warning("task %d: its inputs, processed in timestamp order, have waited %.0f s "
                                    "for records not fetched yet of %s; they go on once those are fetched",
                                    task.number, FETCH_WAIT_WARNING, ", ".join(
                                        f"{tp.topic}[{tp.partition}] ({lags.get(tp)} on the broker)"
                                        for tp in overdue))
                    break
                if not await self._release_runs(task, runs, gathered):
                    break
            await self._hand_over(gathered)  # (every way out of the loop but an exception)
        finally:
            task.releasing = task.waiting

    async def _release_runs(self, task: ActiveTask, runs: list[tuple[TP, list[RawRecord]]],
                            gathered: _Gathered) -> bool:
        """Release `runs` (in their order); False if the task must stop releasing (what is left of them is
        put back first)."""
        inputs = task.inputs
        assert inputs is not None
        sources, limit = self.table_sources, self._max_poll_records
        for tp in {tp for tp, _ in runs}:
            if inputs.buffered(tp) <= limit:
                self.pauses.release([tp], ORDERING)
        mailboxes: dict[TP, _Target | None] = {}  # where each partition's runs are gathered (None: not)
        for index, (tp, records) in enumerate(runs):
            if self._parked and any(input_tp in self._parked for input_tp in task.leases):
                # A batch of this task waits for room in a mailbox: nothing of the task may overtake it (an
                # agent reading two of its inputs would get them out of order). The fetch loop releases the
                # task again once it is delivered.
                _unread(inputs, runs[index:])
                return False
            target = mailboxes[tp] if tp in mailboxes else mailboxes.setdefault(tp, self._target(task, tp))
            if target is not None:
                if not target[0].dispatching:
                    continue  # revoked meanwhile: never applied
                if gathered.mailbox is not None and gathered.mailbox is not target[3]:
                    await self._hand_over(gathered)
                gathered.add(records, *target)
                if len(gathered.order) >= limit:
                    await self._hand_over(gathered)
                continue
            lease = task.leases.get(tp)
            if lease is None or not lease.dispatching:
                continue  # revoked meanwhile: never applied
            await self._hand_over(gathered)
            if tp.topic not in sources:
                await self._dispatch(records, lease)
                continue
            if any(other.in_flight for at, other in task.leases.items() if at.topic not in sources):
                _unread(inputs, runs[index:])
                task.waiting = True
                self.spawn(self._release_after_in_flight(task), f"ordering:{task.number}")
                return False  # released (and this table run applied) once the events before it are done
            for record in records:
                lease.track(record.offset)
            if sources[tp.topic](task.number, records):
                for record in records:
                    lease.ack(record.offset)
        return True

    def _target(self, task: ActiveTask, tp: TP) -> _Target | None:
        """The one mailbox a partition's records go to, if its runs can be gathered (a stream with one agent
        reading it, no poison record set aside); None for the others (table sources, several agents)."""
        lease = task.leases.get(tp)
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

    async def _release_after_in_flight(self, task: ActiveTask) -> None:
        task.releasing = True
        try:
            sources = self.table_sources
            for tp, lease in list(task.leases.items()):
                if tp.topic not in sources:
                    await lease.drained()
            if self.quiesce is not None and self.quiesce.closed:
                await self.quiesce.wait_open()
        finally:
            task.waiting = task.releasing = False
        if not task.closed:
            await self._release(task)

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
            values = topic.value_codec.decode_many([r.value for r in records])
        except DecodeError:
            events = await self._decode_each(topic, runner, records, lease)
        else:
            lease.track_many([r.offset for r in records])
            if getattr(key_codec, "skips", False) and any(key is SKIP for key in keys):
                events = []
                for record, key, value in zip(records, keys, values, strict=True):
                    if key is SKIP:
                        lease.ack(record.offset)  # engine's own record: never an event
                    else:
                        events.append(Event(record, key, value, lease))
            else:
                events = list(map(Event, records, keys, values, repeat(lease, len(records))))
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
                key = record.key if decode_key is None else decode_key(record.key)
                value = decode_value(record.value)
            except DecodeError as exc:
                lease.track(record.offset)
                await runner.handle_error(record, decode_error(record, exc))
                lease.ack(record.offset)
                continue
            lease.track(record.offset)
            if key is SKIP:
                lease.ack(record.offset)
                continue
            events.append(Event(record, key, value, lease))
        return events

    async def _dispatch_many(self, topic_routes: list[tuple[Topic, AgentRunner]], records: list[RawRecord],
                             lease: Lease) -> None:
        """Several agents read this topic: each gets the record decoded by its own Topic's codecs."""
        partition = lease.tp.partition
        outgoing: dict[int, tuple[AgentRunner, Mailbox[Event], list[Event]]] = {}
        for record in records:
            decoded: dict[int, tuple[Any, Any] | DecodeError] = {}
            for topic, _ in topic_routes:
                if id(topic) not in decoded:
                    try:
                        decoded[id(topic)] = topic.decode(record)
                    except DecodeError as exc:
                        decoded[id(topic)] = exc
            if any(not isinstance(found, DecodeError) and found[0] is SKIP for found in decoded.values()):
                lease.track(record.offset)  # engine's own record: for no agent
                lease.ack(record.offset)
                continue
            receivers = sum(1 for t, _ in topic_routes if not isinstance(decoded[id(t)], DecodeError))
            lease.track(record.offset, shares=max(receivers, 1))
            for topic, runner in topic_routes:
                outcome = decoded[id(topic)]
                if isinstance(outcome, DecodeError):
                    await runner.handle_error(record, outcome)
                else:
                    mailbox = runner.mailbox(topic.name, partition)
                    outgoing.setdefault(id(mailbox), (runner, mailbox, []))[2].append(
                        Event(record, outcome[0], outcome[1], lease))
            if receivers == 0:
                lease.ack(record.offset)
        if outgoing and lease.tp[0] in self.timed_topics:
            handed = [event for _, _, events in outgoing.values() for event in events]
            self._observe(lease, topic_routes[0][0], handed)
        for runner, mailbox, events in outgoing.values():
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
            await runner.handle_error(record, error)
            lease.ack(record.offset)
        return kept

    @staticmethod
    def _observe(lease: Lease, topic: Topic, events: list[Event]) -> None:
        """Stream time for windowed tables these events write: per batch, only for their topics. An event
        time extracted from the value is kept on the event, so the windowed table does not extract again."""
        extract = topic.timestamp
        if extract is None:
            high = max(event.record.timestamp for event in events)
        else:
            high = -1
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
            if task is not None and task.inputs is not None and task.ready and not task.releasing \
                    and not task.closed:
                self.spawn(self._release(task), f"ordering:{task.number}")  # it stopped for this batch

    def drop_queued(self, tps: Collection[TP]) -> dict[TP, int]:
        """Drop the events of `tps` that no agent has taken yet (parked or in mailboxes); counts per TP."""
        dropped: dict[TP, int] = dict.fromkeys(tps, 0)
        for tp in tps:
            parked = self._parked.pop(tp, None)
            if parked:
                dropped[tp] += sum(len(events) for _, events in parked)
                parked.clear()

        def drop(event: Event) -> bool:
            tp = TP(event.record.topic, event.record.partition)
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


def _unread(inputs: TaskInputs, runs: list[tuple[TP, list[RawRecord]]]) -> None:
    """Put runs taken but not released back in front of their buffers, as they were."""
    for tp, records in reversed(runs):
        inputs.unread(tp, records)
