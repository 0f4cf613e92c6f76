"""The fetch's side of a task's timestamp-ordered release (engine.tasks.release): the `Delivery` a task's
release works with, and the `Handover` of one pass of it.

Consecutive runs for one mailbox are gathered across calls and decoded a partition at a time, then handed
over together in their order; a run that cannot be gathered (several agents read its topic, a poison record
set aside) is dispatched alone; a table's run stops the pass (the task applies it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence

    from agents import Mailbox
    from engine.events import TP, Event, RawRecord
    from engine.fetch.dispatch import Dispatcher, Target
    from engine.processing.runner import AgentRunner
    from engine.tasks.leases import Lease
    from engine.tasks.release import Run
    from engine.topics import Topic
    from engine.transport.base import Consumer


class FetchDelivery:
    """What a task's release needs of the fetching that fed it (engine.tasks.release.Delivery)."""

    __slots__ = ("_consumer", "_dispatcher", "_limit", "spawn")

    def __init__(self, consumer: Consumer, dispatcher: Dispatcher, limit: int,
                 spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]]) -> None:
        """`limit`: max_poll_records, how many records are gathered at most before a hand-over."""
        self._consumer = consumer
        self._dispatcher = dispatcher
        self._limit = limit
        self.spawn = spawn

    async def lag(self, tp: TP) -> int | None:
        return await self._consumer.lag(tp)

    def handover(self, leases: Mapping[TP, Lease]) -> RunsHandover:
        return RunsHandover(self._dispatcher, leases, self._limit)

    def parked(self, tps: Collection[TP]) -> bool:
        return self._dispatcher.parked(tps)


class Gathered:
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

    async def hand_over(self, dispatcher: Dispatcher) -> None:
        """Decode what was gathered, each partition's in one call, deliver it in its order, and start
        afresh."""
        mailbox, first = self.mailbox, self.first
        if mailbox is None or first is None:
            return
        parts, order = list(self.parts.values()), self.order
        self.parts, self.order, self.mailbox, self.first = {}, [], None, None
        if len(parts) == 1:
            topic, runner, records, lease = parts[0]
            events = await dispatcher.events(topic, runner, records, lease)
        else:
            events = []
            for topic, runner, records, lease in parts:
                events += await dispatcher.events(topic, runner, records, lease)
            position = {id(record): at for at, record in enumerate(order)}
            events.sort(key=lambda event: position[id(event.record)])
        if events:
            await dispatcher.deliver(first, mailbox, events)


class RunsHandover:
    """One pass of a task's release handing its streams' runs over (engine.tasks.release.Handover): runs for
    one mailbox gathered across calls, decoded and handed over together."""

    __slots__ = ("_dispatcher", "_gathered", "_leases", "_limit", "_targets")

    def __init__(self, dispatcher: Dispatcher, leases: Mapping[TP, Lease], limit: int) -> None:
        self._dispatcher = dispatcher
        self._leases = leases
        self._limit = limit
        self._gathered = Gathered()
        self._targets: dict[TP, Target | None] = {}  # where each partition's runs are gathered (None: not)

    async def deliver(self, runs: Sequence[Run], start: int) -> int:
        dispatcher, leases, gathered, targets = self._dispatcher, self._leases, self._gathered, self._targets
        sources, limit = dispatcher.table_sources, self._limit
        if start == 0:
            targets.clear()  # (looked up once per choice of runs)
        for index in range(start, len(runs)):
            if dispatcher.parked(leases):
                return index  # a batch of the task waits for room: nothing of the task may overtake it
            tp, records = runs[index]
            target = targets[tp] if tp in targets else targets.setdefault(tp, dispatcher.target(leases, tp))
            if target is not None:
                if not target[0].dispatching:
                    continue  # revoked meanwhile: never handed over
                if gathered.mailbox is not None and gathered.mailbox is not target[3]:
                    await gathered.hand_over(dispatcher)
                gathered.add(records, *target)
                if len(gathered.order) >= limit:
                    await gathered.hand_over(dispatcher)
                continue
            if tp.topic in sources:
                return index  # a table's run: the task applies it
            lease = leases.get(tp)
            if lease is None or not lease.dispatching:
                continue  # revoked meanwhile: never handed over
            await gathered.hand_over(dispatcher)
            await dispatcher.dispatch(records, lease)
        return len(runs)

    async def flush(self) -> None:
        await self._gathered.hand_over(self._dispatcher)

    async def applied(self, records: list[RawRecord], lease: Lease) -> bool:
        dispatcher = self._dispatcher
        if not dispatcher.routes.get(lease.tp.topic):
            return False
        await dispatcher.dispatch(records, lease)
        return True
