"""A task choosing its next records and releasing them (engine.tasks.release), on fakes (no broker, no
conductor): runs go out in timestamp order across the task's inputs; a table's run waits until the events
handed over before it were processed (and the quiesce gate is open), then the release goes on; a parked batch
stops the release until it is handed over; an input with much buffered is held back until the task released
it down; a closed task releases nothing more."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.events import TP
from engine.streams.quiesce import Quiesce
from engine.tasks import release
from engine.tasks.active import ActiveTask
from engine.tasks.inputs import InputPlan, TaskInputs
from engine.tasks.leases import Leases
from engine.tasks.pauses import Pauses
from engine.tasks.release import ORDERING, ORDERING_BUFFERS, Ordering, ReleaseState
from tests.unit.engine.fake_consumer import FakeConsumer

if TYPE_CHECKING:
    from collections.abc import Collection, Coroutine, Mapping, Sequence

    import pytest

    from engine.tasks.leases import Lease

LEFT, RIGHT, TABLE = TP("orders", 0), TP("payments", 0), TP("profiles", 0)


@dataclass
class Record:
    offset: int
    timestamp: int


def records(*timestamps: int) -> list[Any]:
    return [Record(offset, at) for offset, at in enumerate(timestamps)]


@dataclass
class FakeDelivery:
    """The conductor's part, recorded: each stream run handed over is tracked on its lease (in flight until
    the test acks it); a partition in `parked` stops the hand-over, as a parked batch does."""

    tables: Collection[str]
    lags: dict[TP, int | None] = field(default_factory=dict)
    delivered: list[tuple[str, list[int]]] = field(default_factory=list)
    parked_tps: set[TP] = field(default_factory=set)
    park_after: int | None = None  # the run handed over as this many-th is parked
    read_tables: Collection[str] = ()  # tables' topics that agents read: their runs handed over once applied
    suspends: bool = False  # each hand-over gives the loop a turn (a mailbox's room awaited, a decode)
    spawned: list[asyncio.Task[Any]] = field(default_factory=list)

    async def lag(self, tp: TP) -> int | None:
        return self.lags.get(tp, 0)

    def handover(self, leases: Mapping[TP, Lease]) -> FakeHandover:
        return FakeHandover(self, leases)

    def parked(self, tps: Collection[TP]) -> bool:
        return any(tp in self.parked_tps for tp in tps)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.spawned.append(task)
        return task


@dataclass
class FakeHandover:
    delivery: FakeDelivery
    leases: Mapping[TP, Lease]

    async def deliver(self, runs: Sequence[tuple[TP, list[Any]]], start: int) -> int:
        delivery = self.delivery
        for index in range(start, len(runs)):
            tp, got = runs[index]
            if delivery.parked(self.leases) or tp.topic in delivery.tables:
                return index
            for record in got:
                self.leases[tp].track(record.offset)
            delivery.delivered.append((tp.topic, [record.timestamp for record in got]))
            if delivery.suspends:
                await asyncio.sleep(0)
            if len(delivery.delivered) == delivery.park_after:
                delivery.parked_tps.add(tp)  # this run's batch waits for room in its mailbox
        return len(runs)

    async def flush(self) -> None: ...

    async def applied(self, got: list[Any], lease: Lease) -> bool:
        if lease.tp.topic not in self.delivery.read_tables:
            return False
        for record in got:
            lease.track(record.offset)
        self.delivery.delivered.append((lease.tp.topic, [record.timestamp for record in got]))
        return True


class Applied:
    """The task's state manager, as far as table runs go: what was applied to its table partitions."""

    def __init__(self) -> None:
        self.runs: list[list[int]] = []

    def apply_source(self, topic: str, got: list[Any]) -> bool:
        self.runs.append([record.timestamp for record in got])
        return True

    def partitions(self) -> list[Any]:
        return []


def task_of(*tps: TP, tables: Collection[str] = (), applied: Applied | None = None) -> ActiveTask:
    task = ActiveTask(0)
    for lease in Leases().grant(tps):
        task.leases[lease.tp] = lease
    task.inputs = TaskInputs(tps, [tp for tp in tps if tp.topic in tables], idle=0.0)
    task.restoring(applied or Applied())  # type: ignore[arg-type]
    task.open()
    return task


def ordering(delivery: FakeDelivery, *, limit: int = 100, quiesce: Quiesce | None = None
             ) -> tuple[Ordering, FakeConsumer]:
    consumer = FakeConsumer()
    pauses = Pauses(consumer, keep_fetched=[ORDERING])  # type: ignore[arg-type]
    return Ordering(delivery, pauses, limit, quiesce), consumer


def ack(task: ActiveTask, tp: TP, *offsets: int) -> None:
    for offset in offsets:
        task.leases[tp].ack(offset)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_runs_are_released_in_timestamp_order_across_the_inputs() -> None:
    task = task_of(LEFT, RIGHT)
    delivery = FakeDelivery(tables=())
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(1, 2, 6, 9), order)
    task.release.buffer(RIGHT, records(3, 4, 5, 10), order)
    await task.release.run(order)
    assert delivery.delivered == [("orders", [1, 2]), ("payments", [3, 4, 5]), ("orders", [6, 9]),
                                  ("payments", [10])]
    assert task.release.state is ReleaseState.IDLE


async def test_an_empty_input_with_records_on_the_broker_holds_the_others_back() -> None:
    task = task_of(LEFT, RIGHT)
    delivery = FakeDelivery(tables=(), lags={RIGHT: 3})
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(1, 2), order)
    await task.release.run(order)
    assert delivery.delivered == []
    task.release.buffer(RIGHT, records(0, 5, 6), order)
    await task.release.run(order)
    assert delivery.delivered == [("payments", [0]), ("orders", [1, 2]), ("payments", [5, 6])]


async def test_a_table_run_waits_for_the_events_before_it_and_the_release_goes_on_after() -> None:
    applied = Applied()
    task = task_of(LEFT, TABLE, tables={"profiles"}, applied=applied)
    delivery = FakeDelivery(tables={"profiles"})
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(1, 2, 5), order)
    task.release.buffer(TABLE, records(3, 4, 6), order)
    await task.release.run(order)
    assert delivery.delivered == [("orders", [1, 2])]
    assert applied.runs == []  # the events of 1 and 2 are in flight
    assert task.release.state is ReleaseState.WAITING
    await task.release.run(order)  # (the fetch loop asks again: nothing overtakes the waiting table run)
    assert delivery.delivered == [("orders", [1, 2])]
    ack(task, LEFT, 0)
    await settle()
    assert applied.runs == []
    ack(task, LEFT, 1)
    await settle()
    assert applied.runs == [[3, 4]]  # then the events after it, then the next table run waits for them
    assert delivery.delivered == [("orders", [1, 2]), ("orders", [5])]
    assert task.release.state is ReleaseState.WAITING
    ack(task, LEFT, 2)
    await settle()
    assert applied.runs == [[3, 4], [6]]
    assert task.release.state is ReleaseState.IDLE
    assert task.leases[TABLE].position == 3  # the table's records acked once applied


async def test_a_table_run_agents_read_goes_to_them_once_applied_and_the_next_waits_for_them() -> None:
    """A table joined with another reads the table's topic as its changes: each run reaches its agents with
    the table already holding it, and the next table run (of either table) waits until they processed it."""
    applied = Applied()
    other = TP("customers", 0)
    task = task_of(TABLE, other, tables={"profiles", "customers"}, applied=applied)
    delivery = FakeDelivery(tables={"profiles", "customers"}, read_tables={"profiles", "customers"})
    order, _ = ordering(delivery)
    task.release.buffer(TABLE, records(1, 2, 5), order)
    task.release.buffer(other, records(3, 4), order)
    await task.release.run(order)
    assert applied.runs == [[1, 2]]
    assert delivery.delivered == [("profiles", [1, 2])]  # after it was applied
    assert task.release.state is ReleaseState.WAITING
    ack(task, TABLE, 0, 1)
    await settle()
    assert applied.runs == [[1, 2], [3, 4]]
    assert delivery.delivered == [("profiles", [1, 2]), ("customers", [3, 4])]
    ack(task, other, 0, 1)
    await settle()
    assert applied.runs == [[1, 2], [3, 4], [5]]
    ack(task, TABLE, 2)
    assert task.leases[TABLE].position == 3  # acked by the agents, not when applied
    assert task.leases[other].position == 2


async def test_a_table_run_waits_while_the_quiesce_gate_is_closed() -> None:
    applied, quiesce = Applied(), Quiesce()
    task = task_of(LEFT, TABLE, tables={"profiles"}, applied=applied)
    delivery = FakeDelivery(tables={"profiles"})
    order, _ = ordering(delivery, quiesce=quiesce)
    task.release.buffer(LEFT, records(1), order)
    task.release.buffer(TABLE, records(2), order)
    await task.release.run(order)
    assert await quiesce.pause(1.0)  # a checkpoint closes the gate
    ack(task, LEFT, 0)
    await settle()
    assert applied.runs == []
    assert task.release.state is ReleaseState.WAITING
    quiesce.resume()
    await settle()
    assert applied.runs == [[2]]
    assert task.release.state is ReleaseState.IDLE


async def test_a_parked_batch_stops_the_release_until_it_is_handed_over() -> None:
    task = task_of(LEFT, RIGHT)
    delivery = FakeDelivery(tables=(), park_after=2)
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(1, 3, 5), order)
    task.release.buffer(RIGHT, records(2, 4, 6), order)
    await task.release.run(order)
    assert delivery.delivered == [("orders", [1]), ("payments", [2])]
    assert task.inputs is not None
    assert (task.inputs.buffered(LEFT), task.inputs.buffered(RIGHT)) == (2, 2)  # put back, in order
    assert task.release.state is ReleaseState.IDLE
    await task.release.run(order)  # the fetch loop asks again while the batch is parked: nothing goes
    assert len(delivery.delivered) == 2
    delivery.parked_tps.clear()
    task.release.unparked(order)
    await settle()
    assert delivery.delivered == [("orders", [1]), ("payments", [2]), ("orders", [3]), ("payments", [4]),
                                  ("orders", [5]), ("payments", [6])]


async def test_a_release_that_goes_on_after_a_parked_batch_is_the_only_one_of_its_task() -> None:
    """`unparked` starts the release in the background; a fetch loop that asks the task to release before
    that release ran finds it under way, and does not start a second one beside it: two releases of one task
    would each take runs and hand them over interleaved, a partition's records out of their order."""
    task = task_of(LEFT, RIGHT)
    delivery = FakeDelivery(tables=(), park_after=1, suspends=True)
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(*range(0, 40, 2)), order)
    task.release.buffer(RIGHT, records(*range(1, 40, 2)), order)
    await task.release.run(order)
    assert delivery.delivered == [("orders", [0])]
    delivery.parked_tps.clear()
    task.release.unparked(order)  # the parked batch was handed over: the release goes on, in the background
    await task.release.run(order)  # the fetch loop's turn comes first: the release is under way already
    await asyncio.gather(*delivery.spawned)
    for topic, first in (("orders", 0), ("payments", 1)):
        times = [at for got, run in delivery.delivered if got == topic for at in run]
        assert times == list(range(first, 40, 2)), f"{topic}: each record once, in order"
    assert task.release.state is ReleaseState.IDLE


async def test_an_input_with_much_buffered_is_held_back_until_the_task_released_it() -> None:
    task = task_of(LEFT, RIGHT)
    delivery = FakeDelivery(tables=(), lags={RIGHT: None})  # its lag not known yet: the others wait
    order, consumer = ordering(delivery, limit=2)
    fetched = records(*range(2 * ORDERING_BUFFERS + 1))
    task.release.buffer(LEFT, fetched[:2 * ORDERING_BUFFERS], order)
    await task.release.run(order)
    assert consumer.held == set()
    task.release.buffer(LEFT, fetched[2 * ORDERING_BUFFERS:], order)
    assert consumer.held == {LEFT}
    assert order.pauses.reasons(LEFT) == {ORDERING}
    await task.release.run(order)
    assert delivery.delivered == []
    assert consumer.held == {LEFT}
    delivery.lags[RIGHT] = 0  # caught up: the others go on
    await task.release.run(order)
    assert [at for _, got in delivery.delivered for at in got] == list(range(2 * ORDERING_BUFFERS + 1))
    assert consumer.held == set()
    assert order.pauses.reasons(LEFT) == set()


async def test_a_closed_task_releases_nothing_more() -> None:
    applied = Applied()
    task = task_of(LEFT, TABLE, tables={"profiles"}, applied=applied)
    delivery = FakeDelivery(tables={"profiles"})
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(1, 3), order)
    task.release.buffer(TABLE, records(2), order)
    await task.release.run(order)
    assert task.release.state is ReleaseState.WAITING
    task.close()  # (lost: its leases end, what is buffered is dropped)
    await settle()
    assert applied.runs == []
    assert delivery.delivered == [("orders", [1])]
    assert task.release.state is ReleaseState.IDLE
    await task.release.run(order)
    task.release.unparked(order)
    await settle()
    assert delivery.delivered == [("orders", [1])]


async def test_a_task_being_set_up_is_not_released() -> None:
    task = ActiveTask(0)
    for lease in Leases().grant([LEFT, RIGHT]):
        task.leases[lease.tp] = lease
    task.inputs = TaskInputs([LEFT, RIGHT], [], idle=0.0)
    task.restoring()

    class NoLag(FakeDelivery):
        async def lag(self, tp: TP) -> int | None:
            raise AssertionError("a task being set up has no position to ask the lag of")

    delivery = NoLag(tables=())
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(1), order)
    await task.release.run(order)
    task.release.unparked(order)
    await settle()
    assert delivery.spawned == []
    assert task.release.state is ReleaseState.IDLE


async def test_a_long_wait_for_an_input_to_be_fetched_is_told_once(monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(release, "FETCH_WAIT_WARNING", 0.0)
    task = task_of(LEFT, RIGHT)
    delivery = FakeDelivery(tables=(), lags={RIGHT: 7})
    order, _ = ordering(delivery)
    task.release.buffer(LEFT, records(1), order)
    with caplog.at_level("WARNING", logger="engine.tasks.release"):
        await task.release.run(order)
        await task.release.run(order)
    assert caplog.text.count("payments[0] (7 on the broker)") == 1


def test_the_input_plan_orders_only_tasks_with_a_table_source_or_a_joined_stream() -> None:
    plan = InputPlan(table_sources=frozenset({"profiles"}), joined_streams=frozenset({"clicks"}),
                     max_idle=2.0)
    assert plan.ordered
    assert not InputPlan().ordered
    assert plan.inputs([TP("orders", 0)]) is None, "a plain stream's records go as they come"
    with_table = plan.inputs([LEFT, TABLE])
    assert with_table is not None
    assert set(with_table.inputs) == {LEFT, TABLE}
    assert with_table.idle == 2.0
    assert plan.inputs([TP("clicks", 0), TP("views", 0)]) is not None


def test_a_table_run_is_applied_only_by_a_running_task_with_its_state() -> None:
    applied = Applied()
    task = ActiveTask(0)
    task.restoring(applied)  # type: ignore[arg-type]
    assert not task.apply_source("profiles", records(5)), "not before it runs"
    task.open()
    assert task.apply_source("profiles", records(5))
    assert applied.runs == [[5]]
    task.close()
    assert not task.apply_source("profiles", records(6)), "nor once closed"
