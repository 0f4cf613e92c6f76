"""Per-partition back-pressure on fakes (no broker): a batch for a mailbox that stays full past PARK_AFTER is
parked and only its partition is paused; batches after it queue behind it in order; once the agent takes
events the parked ones go in, in order, and the partition resumes; a revoke drops what is parked."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Mailbox
from engine.events import TP, Event
from engine.fetch.conductor import Conductor
from engine.tasks.leases import Leases
from engine.tasks.pauses import Pauses

SLOW, OTHER = TP("in", 0), TP("in", 1)


class FakeConsumer:
    def __init__(self) -> None:
        self.paused: set[TP] = set()

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def pause(self, tps: Any) -> None:
        self.paused |= set(tps)

    def resume(self, tps: Any) -> None:
        self.paused -= set(tps)


class Record:
    def __init__(self, tp: TP, offset: int) -> None:
        self.topic, self.partition, self.offset = tp.topic, tp.partition, offset
        self.key = self.value = None
        self.timestamp = 0
        self.headers: list[Any] = []


def conductor() -> tuple[Conductor, FakeConsumer, Leases]:
    consumer = FakeConsumer()
    leases = Leases()
    leases.grant([SLOW, OTHER])
    return Conductor(consumer, leases=leases, pauses=Pauses(consumer),  # type: ignore[arg-type]
                     max_poll_records=10, admin_factory=lambda: None), consumer, leases  # type: ignore[arg-type,return-value]


def events(leases: Leases, tp: TP, offsets: range) -> list[Event]:
    lease = leases.current[tp]
    for offset in offsets:
        lease.track(offset)
    return [Event(tp, Record(tp, o), None, o, lease) for o in offsets]  # type: ignore[arg-type]


async def test_a_full_mailbox_parks_its_batch_and_pauses_only_its_partition_until_there_is_room():
    conduct, consumer, leases = conductor()
    await conduct.start()
    try:
        slow: Mailbox[Event] = Mailbox(maxsize=2)
        other: Mailbox[Event] = Mailbox(maxsize=100)
        await conduct._deliver(leases.current[SLOW], slow, events(leases, SLOW, range(0, 2)))  # fills it
        await conduct._deliver(leases.current[SLOW], slow, events(leases, SLOW, range(2, 4)))  # parked
        await conduct._deliver(leases.current[SLOW], slow, events(leases, SLOW, range(4, 6)))  # behind it
        await conduct._deliver(leases.current[OTHER], other, events(leases, OTHER, range(0, 3)))
        assert consumer.paused == {SLOW}, "only the slow partition is paused"
        assert len(other) == 3
        taken = []
        while len(taken) < 6:  # the agent takes its events: the parked ones go in, in order
            event = slow.get_nowait()
            if event is None:
                await asyncio.sleep(0.001)
                continue
            taken.append(event.offset)
        assert taken == list(range(6))
        for _ in range(100):
            if not consumer.paused:
                break
            await asyncio.sleep(0.001)
        assert consumer.paused == set(), "resumed once nothing is parked"
    finally:
        await conduct.stop()


async def test_a_revoke_drops_what_is_parked_and_what_waits_in_mailboxes():
    conduct, consumer, leases = conductor()
    await conduct.start()
    try:
        slow: Mailbox[Event] = Mailbox(maxsize=2)
        await conduct._deliver(leases.current[SLOW], slow, events(leases, SLOW, range(0, 2)))
        await conduct._deliver(leases.current[SLOW], slow, events(leases, SLOW, range(2, 5)))
        assert SLOW in consumer.paused
        leases.revoke([SLOW])
        assert conduct.drop_queued([SLOW]) == {SLOW: 3}, "the parked batch"
        assert conduct._parked == {}
    finally:
        await conduct.stop()
