"""The dispatcher: a partition's fetched records decoded for the agents that read its topic and handed to
their mailboxes, with per-partition backpressure.

Each batch is decoded once per reading topic's codecs (one call per codec, no Python call per record; a batch
with a record that does not decode goes one record at a time, the bad ones to the agent's error policy) and
handed to the mailbox of the agent instance that owns the partition, only while the partition's lease is
dispatching (records of a partition this worker no longer owns are never dispatched). Every dispatched
record is tracked by its lease and acked by each agent that received it (the at-least-once rule: only the
contiguous prefix of finished records is committed).

Backpressure: a full mailbox is waited for at most PARK_AFTER; when it stays full longer, the batch is parked
and only its partition is paused until the mailbox has room again, so a stuck agent holds back its own
partitions and no others (memory stays bounded by the mailbox size plus one batch per parked partition).
Why wait at all: aiokafka drops what it prefetched for a partition when it is paused and fetches it again
after the resume, so pausing on every momentarily full mailbox costs a busy worker CPU on every event
(benchmarks/passthrough.py), while a full mailbox usually has room again well within PARK_AFTER.
"""

from __future__ import annotations

import asyncio
from itertools import repeat
from typing import TYPE_CHECKING, Any

from agents import MailboxClosed
from engine.codecs import SKIP
from engine.errors import DecodeError, SchemasNotCached
from engine.events import TP, Event, RawRecord
from engine.schemas.codecs import fetch_schemas
from engine.topics import decode_error, event_time_ms

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Coroutine, Mapping

    from agents import Mailbox
    from engine.processing.runner import AgentRunner
    from engine.tasks.leases import Lease
    from engine.tasks.pauses import Pauses
    from engine.tasks.poison import PoisonRecords
    from engine.topics import Topic

    Routes = list[tuple[Topic, AgentRunner]]  # the agents reading one topic, each with its Topic
    Target = tuple[Lease, Topic, AgentRunner, Mailbox[Event]]  # where a partition's runs are gathered

BACKPRESSURE = "backpressure"  # the Pauses reason of a partition whose batch is parked
PARK_AFTER = 0.05  # seconds a delivery waits for room in a full mailbox before parking the batch
Parked = list[tuple["Mailbox[Event]", list[Event]]]


class Dispatcher:
    """The agents' routes and the hand-over of decoded events to their mailboxes."""

    def __init__(self, pauses: Pauses, poison: PoisonRecords, *, timed_topics: set[str],
                 table_sources: frozenset[str],
                 spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]],
                 unparked: Callable[[TP], None]) -> None:
        """`timed_topics`: topics whose events write windowed tables (their batches advance stream time,
        filled by the tables at their first write from a topic); `table_sources`: topics applied by their
        tasks, never handed to agents as they come; `spawn`: runs a background task owned by the fetching
        service; `unparked(tp)`: told once a parked batch of `tp` is handed over."""
        self.pauses = pauses
        self.poison = poison
        self.timed_topics = timed_topics
        self.table_sources = table_sources
        self.routes: dict[str, Routes] = {}
        self._spawn = spawn
        self._unparked = unparked
        self._parked: dict[TP, Parked] = {}

    def add_route(self, topic: Topic, runner: AgentRunner) -> None:
        self.routes.setdefault(topic.name, []).append((topic, runner))

    def runners(self) -> list[AgentRunner]:
        return list({id(r): r for rs in self.routes.values() for _, r in rs}.values())

    def parked(self, tps: Collection[TP]) -> bool:
        """Whether a batch of one of `tps` waits for room in a mailbox."""
        parked = self._parked
        return bool(parked) and any(tp in parked for tp in tps)

    def target(self, leases: Mapping[TP, Lease], tp: TP) -> Target | None:
        """The one mailbox a partition's records go to, if its runs can be gathered (a stream with one agent
        reading it, no poison record set aside); None for the others (table sources, several agents)."""
        lease = leases.get(tp)
        routes = self.routes.get(tp.topic) if tp.topic not in self.table_sources else None
        buried = self.poison.buried
        if lease is None or routes is None or len(routes) != 1 or (buried and tp in buried):
            return None
        topic, runner = routes[0]
        return lease, topic, runner, runner.mailbox(topic.name, tp.partition)

    async def dispatch(self, records: list[RawRecord], lease: Lease, routes: Routes | None = None) -> None:
        """A batch of `lease`'s partition to the agents reading its topic (`routes`, if the caller has them
        at hand), its poison records set aside first."""
        if routes is None:
            routes = self.routes.get(lease.tp[0])
            if not routes:
                return
        buried = self.poison.buried
        if buried and lease.tp in buried:
            records = await self._set_aside(routes, records, lease)
        if len(routes) == 1:
            topic, runner = routes[0]
            events = await self.events(topic, runner, records, lease)
            if events:
                await self.deliver(lease, runner.mailbox(topic.name, lease.tp.partition), events)
        else:
            await self._dispatch_many(routes, records, lease)

    async def events(self, topic: Topic, runner: AgentRunner, records: list[RawRecord],
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
            return await self.events(topic, runner, records, lease)
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
            _observe(lease, topic, events)
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

    async def _dispatch_many(self, routes: Routes, records: list[RawRecord], lease: Lease) -> None:
        """Several agents read this topic: each gets the record decoded by its own Topic's codecs."""
        partition = lease.tp.partition
        outgoing: dict[int, tuple[AgentRunner, Mailbox[Event], list[Event], Topic]] = {}
        for record in records:
            decoded: dict[int, tuple[Any, Any] | DecodeError] = {}
            for topic, _ in routes:
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
            receivers = sum(1 for t, _ in routes if not isinstance(decoded[id(t)], DecodeError))
            lease.track(record.offset, shares=max(receivers, 1))
            for topic, runner in routes:
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
                _observe(lease, topic, events)
        for runner, mailbox, events, _ in outgoing.values():
            runner.received += len(events)
            await self.deliver(lease, mailbox, events)

    async def _set_aside(self, routes: Routes, records: list[RawRecord], lease: Lease) -> list[RawRecord]:
        """Dead-letter the poison records of a batch (by the error policy of the agent they blocked);
        returns the others."""
        kept = []
        for record in records:
            verdict = self.poison.verdict(lease.tp, record.offset)
            if verdict is None:
                kept.append(record)
                continue
            agent, error = verdict
            runner = next((r for _, r in routes if r.agent.name == agent), routes[0][1])
            lease.track(record.offset)
            await runner.handle_error(lease.tp, record, error)
            lease.ack(record.offset)
        return kept

    async def deliver(self, lease: Lease, mailbox: Mailbox[Event], events: list[Event]) -> None:
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
                self._spawn(self._unpark(lease, parked), f"unpark:{tp.topic}[{tp.partition}]")
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
            self._unparked(tp)

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


def _observe(lease: Lease, topic: Topic, events: list[Event]) -> None:
    """Stream time for windowed tables these events write: per batch, only for their topics. Each event's
    time (extracted from its value, or its record's) is kept on it, so the windowed table does not work it
    out again."""
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


async def _decoded(tp: TP, record: RawRecord, decode_key: Callable[[bytes | None], Any] | None,
                   decode_value: Callable[[bytes | None], Any]) -> tuple[Any, Any]:
    """One record's key and value, the schemas it names fetched first if they were not yet."""
    while True:
        try:
            key = record.key if decode_key is None else decode_key(record.key)
            return key, None if key is SKIP else decode_value(record.value)  # (engine's own: no value)
        except SchemasNotCached as missing:
            await fetch_schemas(missing, f"{tp.topic}[{tp.partition}]")
