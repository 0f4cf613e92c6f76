"""Per-partition back-pressure on fakes (no broker): a batch for a mailbox that stays full past PARK_AFTER is
parked and only its partition is paused; batches after it queue behind it in order; once the agent takes
events the parked ones go in, in order, and the partition resumes; a revoke drops what is parked. And what
the stall watch reads of a partition whose fetches went unanswered."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agents import Mailbox
from engine.events import TP, Event
from engine.fetch.conductor import Conductor
from engine.fetch.stalls import FETCH_UNANSWERED
from engine.tasks.active import ActiveTask
from engine.tasks.leases import Leases
from engine.tasks.pauses import Pauses
from tests.unit.engine.fake_consumer import FakeConsumer

SLOW, OTHER = TP("in", 0), TP("in", 1)


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
        deliver = conduct.dispatcher.deliver
        await deliver(leases.current[SLOW], slow, events(leases, SLOW, range(0, 2)))  # fills it
        await deliver(leases.current[SLOW], slow, events(leases, SLOW, range(2, 4)))  # parked
        await deliver(leases.current[SLOW], slow, events(leases, SLOW, range(4, 6)))  # behind it
        await deliver(leases.current[OTHER], other, events(leases, OTHER, range(0, 3)))
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
        await conduct.dispatcher.deliver(leases.current[SLOW], slow, events(leases, SLOW, range(0, 2)))
        await conduct.dispatcher.deliver(leases.current[SLOW], slow, events(leases, SLOW, range(2, 5)))
        assert SLOW in consumer.paused
        leases.revoke([SLOW])
        assert conduct.dispatcher.drop_queued([SLOW]) == {SLOW: 3}, "the parked batch"
        assert not conduct.dispatcher.parked([SLOW, OTHER]), "nothing parked is left"
    finally:
        await conduct.stop()


class AnsweringConsumer(FakeConsumer):
    """A consumer whose fetches of a partition were last answered at `answered[tp]` (time.time()), fetching
    the partitions `fetching`."""

    def __init__(self, answered: dict[TP, float]) -> None:
        super().__init__()
        self.answered = answered
        self.fetching = {SLOW, OTHER}

    def assignment(self) -> set[TP]:
        return set(self.fetching)

    async def lag(self, tp: TP) -> int | None:
        return 0  # as of the last answer: nothing new, however long ago that was

    def fetched_at(self, tp: TP) -> float | None:
        return self.answered.get(tp)


def ready_task_conductor(consumer: AnsweringConsumer) -> Conductor:
    """A conductor of one ready task reading SLOW and OTHER through `consumer`."""
    leases = Leases()
    task = ActiveTask(0)
    task.leases = {tp: lease for tp, lease in zip((SLOW, OTHER), leases.grant([SLOW, OTHER]), strict=True)}
    task.restoring()
    task.open()
    return Conductor(consumer, leases=leases, pauses=Pauses(consumer),  # type: ignore[arg-type]
                     max_poll_records=10, admin_factory=lambda: None,  # type: ignore[arg-type,return-value]
                     tasks={0: task})


async def test_a_partition_whose_fetches_went_unanswered_counts_as_waiting_for_the_stall_watch():
    """Lag is as of the last fetch answered: a fetcher that stopped asking shows no lag, like a partition
    with nothing new. Unanswered for longer than FETCH_UNANSWERED (and not paused), the partition counts as
    waiting, so that the stall watch names it if it does not move; a paused one does not."""
    now = time.time()
    consumer = AnsweringConsumer({SLOW: now - FETCH_UNANSWERED - 5, OTHER: now})
    conduct = ready_task_conductor(consumer)
    [state] = (await conduct.task_states()).values()
    waiting, where = state.waiting, state.where
    assert waiting
    assert "in[0] at None, 0 in flight, 0 buffered, lag 0, no fetch answered for 20 s" in where
    assert where.endswith("in[1] at None, 0 in flight, 0 buffered, lag 0")
    consumer.answered[SLOW] = now
    [state] = (await conduct.task_states()).values()
    waiting = state.waiting
    assert not waiting
    consumer.answered[SLOW] = now - 100
    conduct.pauses.hold([SLOW], "recovering")
    [state] = (await conduct.task_states()).values()
    waiting, where = state.waiting, state.where
    assert not waiting, where


async def test_a_ready_partition_the_consumer_does_not_fetch_counts_as_waiting_and_says_so():
    """A ready task's partition missing from the consumer's assignment never gets a record, and never shows a
    lag: it counts as waiting (the stall watch names it if it does not move), and its state says why."""
    now = time.time()
    consumer = AnsweringConsumer({SLOW: now, OTHER: now})
    conduct = ready_task_conductor(consumer)
    [state] = (await conduct.task_states()).values()
    waiting = state.waiting
    assert not waiting
    consumer.fetching = {OTHER}
    [state] = (await conduct.task_states()).values()
    waiting, where = state.waiting, state.where
    assert waiting
    assert "in[0] at None, 0 in flight, 0 buffered, lag 0, not in the consumer's assignment" in where
