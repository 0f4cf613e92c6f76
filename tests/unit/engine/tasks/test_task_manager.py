"""The task manager on fakes (no broker): an assignment becomes set-up tasks (producer started before the
committed offsets are read, partitions paused meanwhile), a revoke waits (bounded) for the events agents hold,
checkpoints and closes clean, a loss closes dirty (nothing sent or committed), a standby task is recycled into
the active one, and a task whose commit failed is rewound while this worker is a member, or lost otherwise."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from engine.app import App
from engine.commit.cut import TaskCut
from engine.commit.guarantee import AtLeastOnce, ExactlyOnce
from engine.errors import BrokerUnavailable, DeliveryFailed, ProducerFenced
from engine.events import TP
from engine.stores.memory import MemoryStoreBackend
from engine.tasks.leases import Leases
from engine.tasks.manager import RECOVERING, TaskManager
from engine.tasks.pauses import Pauses
from engine.tasks.poison import PoisonRecords
from tests.unit.engine.fake_consumer import FakeConsumer

if TYPE_CHECKING:
    from engine.tasks.active import ActiveTask

IN0, IN1 = TP("in", 0), TP("in", 1)


class FakeProducer:
    transactional = True

    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name, self.log = name, log

    async def start(self) -> None:
        self.log.append(("start", self.name))

    async def stop(self) -> None:
        self.log.append(("stop", self.name))

    async def flush(self) -> None:
        self.log.append(("flush", self.name))

    async def commit_transaction(self, offsets: Any, group_id: str) -> None:
        self.log.append(("commit", self.name, dict(offsets)))


class FakeTransport:
    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    def producer(self, transactional_id: str | None) -> FakeProducer:
        return FakeProducer(transactional_id or "plain", self.log)


class FakeTables:
    """The table manager's side of tasks: one table, stores in memory, and what was asked of it."""

    def __init__(self) -> None:
        app = App("app", broker="memory://")
        self.table = app.Table("counts", default=int)
        self.tables: dict[str, Any] = {"counts": self.table}
        self.warming: frozenset[int] = frozenset()
        self.backend = MemoryStoreBackend()
        self.restored: list[list[str]] = []  # per restore, the state managers restored
        self.followed: set[TP] = set()
        self.closed: list[TP] = []
        self.kept: set[TP] = set()

    def changelog(self, number: int) -> TP:
        return TP(self.table.changelog_topic.name, number)

    def task_partitions(self, number: int) -> list[tuple[Any, int]]:
        return [(self.table, number)]

    async def restore(self, states: Any, until: Any = None) -> None:
        self.restored.append(sorted(state.label for state in states))
        self.unfollow([tp for state in states for tp in state.stores])

    def follow(self, state: Any) -> None:
        self.followed |= set(state.followed())

    def unfollow(self, tps: Any) -> None:
        self.followed -= set(tps)

    def clean_up(self, keep: Any) -> None:
        self.kept = set(keep)

    def kept_positions(self) -> dict[int, int]:
        return {}

    def open_store(self, table: Any, number: int) -> Any:
        return self.backend.open(table.name, number)

    async def opened(self, wanted: Any) -> Any:
        for table, number in wanted:
            yield table, number, self.open_store(table, number)

    def destroy_store(self, table: Any, number: int) -> None:
        self.backend.destroy(table.name, number)

    def closed_store(self, table: Any, tp: TP, store: Any) -> None:
        self.unfollow([tp])
        self.closed.append(tp)
        store.close()

    async def closed_off_loop(self, table: Any, tp: TP, store: Any) -> None:
        self.closed_store(table, tp, store)


class Assignment:
    def __init__(self, active: set[int], standby: set[int]) -> None:
        self.active, self.standby, self.warming = frozenset(active), frozenset(standby), frozenset()


def manager(log: list[tuple[Any, ...]], *, exactly_once: bool = True, tables: FakeTables | None = None,
            dropped: dict[TP, int] | None = None, commit_interval: float = 3600,
            consumer: FakeConsumer | None = None, **options: Any) -> tuple[TaskManager, FakeConsumer]:
    transport = FakeTransport(log)
    active: dict[int, ActiveTask] = {}
    guarantee = (ExactlyOnce(transport, "app", "worker", active) if exactly_once  # type: ignore[arg-type]
                 else AtLeastOnce(transport, "app", tables=True))  # type: ignore[arg-type]
    consumer = consumer if consumer is not None else FakeConsumer(log)
    tasks = TaskManager(
        leases=Leases(), consumer=consumer, pauses=Pauses(consumer), guarantee=guarantee,  # type: ignore[arg-type]
        tables=tables, drop_queued=lambda tps: dict(dropped or {}),  # type: ignore[arg-type]
        commit_interval=commit_interval, revoke_wait=0.3, active=active, **options,
    )
    return tasks, consumer


async def ready(tasks: TaskManager, tps: set[TP], *, assign: bool = True) -> None:
    """Assign `tps` (unless `assign` is False) and wait until their tasks are set up."""
    if assign:
        await tasks.assigned(tps)
    while any(not tasks.active[tp.partition].ready for tp in tps):
        await asyncio.sleep(0.001)


async def standbys_settled(tasks: TaskManager) -> None:
    """Wait for the settles of the standbys under way (each its own task, after a set-up)."""
    while settling := [t for t in tasks._tasks if t.get_name().endswith(":standbys")]:
        await asyncio.wait(settling)


async def test_an_assigned_task_starts_its_producer_before_reading_its_offsets_and_resumes_once_set_up():
    log: list[tuple[Any, ...]] = []
    tasks, consumer = manager(log, tables=FakeTables())
    await tasks.assigned({IN0})
    assert consumer.paused == {IN0}, "paused while the task is set up"
    assert not tasks.active[0].ready
    await ready(tasks, {IN0}, assign=False)
    assert log[:3] == [("start", "app-task-0"), ("read committed", [IN0]), ("seek", IN0, 7)]
    assert consumer.paused == set()
    assert tasks.active[0].producer is not None
    assert tasks.active[0].leases[IN0] is tasks.leases.current[IN0]


class SlowOpeningTables(FakeTables):
    """Tables whose stores take until `opening` is set to open (a RocksDB open, off the event loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.opening = asyncio.Event()

    async def opened(self, wanted: Any) -> Any:
        await self.opening.wait()
        for table, number in wanted:
            yield table, number, self.open_store(table, number)


async def test_a_worker_that_stops_while_a_tasks_stores_open_closes_them_and_sets_nothing_up():
    """The stores of a task becoming active open off the event loop, and the worker may stop meanwhile (a
    SIGTERM right after start): the task, closed by the stop, is not set up, and its stores close."""
    tables = SlowOpeningTables()
    tasks, _ = manager([], tables=tables)
    assigning = asyncio.ensure_future(tasks.assigned({IN0}))
    await asyncio.sleep(0.01)  # (the task made, its stores opening)
    task = tasks.active[0]
    await tasks.close_all()  # what the worker's stop does
    tables.opening.set()
    await assigning
    assert tasks.failure is None  # (was: "task 0 cannot go from closed to restoring", the worker stopped)
    assert task.closed
    assert not tasks._recoveries  # no set-up started
    assert tables.closed == [tables.changelog(0)]  # its store, opened after the stop, closed


class OutageTables(FakeTables):
    """Tables whose restores find no broker the first `outage` times (one restarting during a set-up)."""

    def __init__(self, outage: int) -> None:
        super().__init__()
        self.outage = outage

    async def restore(self, states: Any, until: Any = None) -> None:
        if self.outage:
            self.outage -= 1
            raise BrokerUnavailable("no Kafka broker answered at 'b:9092'; is Kafka running?")
        await super().restore(states, until)


async def test_a_set_up_that_finds_no_broker_tries_again_until_one_answers(caplog, monkeypatch):
    """The worker goes on: the set-up is tried again (each step again where it stands: the producer started
    once) and the task resumes once it is done; said once at WARNING, and once done."""
    monkeypatch.setattr("engine.tasks.setup.SET_UP_RETRY", 0.001)
    caplog.set_level("INFO")
    log: list[tuple[Any, ...]] = []
    tables = OutageTables(outage=3)
    tasks, consumer = manager(log, tables=tables)
    await asyncio.wait_for(ready(tasks, {IN0}), 10)
    assert tables.outage == 0
    assert tables.restored == [["task 0"]]
    assert log.count(("start", "app-task-0")) == 1, "its producer started once"
    assert log.count(("seek", IN0, 7)) == 4, "sought at each try"
    assert consumer.paused == set()
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert [r.getMessage() for r in warnings] == [
        "setting up in[0]: no Kafka broker answered at 'b:9092'; is Kafka running?; trying again every 0 s"]
    assert any(r.getMessage().startswith("set up in[0] after ") for r in caplog.records)


async def test_checkpoints_skipped_while_membership_cannot_be_confirmed_are_said_once_then_counted(caplog):
    """A broker restarting: the coordinator cannot confirm this worker's membership for many commit
    intervals. One WARNING when the first checkpoint is skipped, one line with the count when they run."""
    caplog.set_level("INFO")
    log: list[tuple[Any, ...]] = []
    tasks, consumer = manager(log, exactly_once=False, tables=FakeTables(), commit_interval=0.005)
    consumer.member = False

    async def logged(text: str) -> None:
        while not any(text in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.01)

    await tasks.start()
    try:
        await ready(tasks, {IN0})
        lease = tasks.leases.current[IN0]
        lease.track(0)
        lease.ack(0)  # an offset to commit
        await asyncio.wait_for(logged("checkpoint skipped"), 10)
        await asyncio.sleep(0.1)  # many more intervals
        consumer.member = True
        await asyncio.wait_for(logged("checkpoints run again"), 10)
    finally:
        await tasks.stop()
    skipped = [r for r in caplog.records if "checkpoint skipped" in r.getMessage()]
    assert [r.levelname for r in skipped] == ["WARNING"]
    assert skipped[0].getMessage() == ("checkpoint skipped: the group moved on; skipped until it is "
                                       "confirmed again")
    again = next(r.getMessage() for r in caplog.records if "checkpoints run again" in r.getMessage())
    assert int(again.rsplit("after ", 1)[1].split()[0]) > 5, again
    assert ("offsets", {IN0: 1}) in log, "committed once confirmed"


async def test_a_revoke_waits_for_held_events_then_checkpoints_and_closes_clean():
    log: list[tuple[Any, ...]] = []
    tables = FakeTables()
    tasks, _ = manager(log, exactly_once=False, tables=tables)
    await tasks.start()
    try:
        await ready(tasks, {IN0, IN1})
        lease = tasks.leases.current[IN0]
        lease.track(0)  # an agent holds offset 0 ...
        asyncio.get_running_loop().call_later(0.05, lease.ack, 0)  # ... and finishes it within the wait
        task = tasks.active[0]
        await tasks.revoked({IN0})
        assert ("offsets", {IN0: 1}) in log, "its last offset committed by the revoke's checkpoint"
        assert log.index(("offsets", {IN0: 1})) < log.index(("stop", "app-task-0")), "producer stopped after"
        assert task.closed
        assert lease.ended
        assert set(tasks.active) == {1}
        assert set(tasks.warm) == {0}, "its stores kept open until the next assignment says what it is"
        assert tables.followed == {tables.changelog(0)}, "and followed meanwhile"
    finally:
        await tasks.stop()


async def test_a_revoke_does_not_wait_past_its_bound_for_an_event_that_never_finishes():
    log: list[tuple[Any, ...]] = []
    tasks, _ = manager(log, exactly_once=False)
    await tasks.start()
    try:
        await ready(tasks, {IN0})
        tasks.leases.current[IN0].track(0)  # never acked
        started = asyncio.get_running_loop().time()
        await tasks.revoked({IN0})
        assert asyncio.get_running_loop().time() - started < 5
        assert not any(entry[0] == "offsets" for entry in log), "the unfinished event's offset not committed"
        assert tasks.active == {}
    finally:
        await tasks.stop()


async def test_a_lost_task_closes_dirty_writing_and_committing_nothing():
    log: list[tuple[Any, ...]] = []
    tasks, _ = manager(log)
    await ready(tasks, {IN0})
    lease = tasks.leases.current[IN0]
    lease.track(0)
    lease.ack(0)
    log.clear()
    await tasks.lost({IN0})
    assert log == [("stop", "app-task-0")], "nothing committed; the producer stopped, its transaction open"
    assert lease.ended
    assert tasks.active == {}


async def test_a_standby_task_is_recycled_when_its_number_becomes_active_here(caplog):
    caplog.set_level("INFO")
    log: list[tuple[Any, ...]] = []
    tables = FakeTables()
    tasks, _ = manager(log, tables=tables)
    tasks.on_assignment(Assignment({0}, {1}))  # type: ignore[arg-type]
    await ready(tasks, {IN0})
    await standbys_settled(tasks)
    assert set(tasks.standby) == {1}
    standby = tasks.standby[1]
    assert standby.ready, "a running standby: its stores followed"
    assert tables.followed == {tables.changelog(1)}
    tasks.on_assignment(Assignment({0, 1}, set()))  # type: ignore[arg-type]
    await ready(tasks, {IN1})
    await standbys_settled(tasks)
    assert "standby task 1 becomes active here" in caplog.text
    assert tables.restored == [["task 0"], ["task 1"]]
    assert tasks.active[1].state_manager is standby.state_manager, "handed over, stores open"
    assert standby.closed
    assert tasks.standby == {}
    assert tables.followed == set(), "an active task's stores are its own: not followed"
    assert tables.closed == []


class SlowStandbyTables(FakeTables):
    """Tables whose task 2's stores take until `gate` is set to open (a standby's, on a slow disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.opening_standby = asyncio.Event()

    async def opened(self, wanted: Any) -> Any:
        for table, number in wanted:
            if number == 2:
                self.opening_standby.set()
                await self.gate.wait()
            yield table, number, self.open_store(table, number)


async def test_partitions_process_while_the_standbys_open_and_a_revoke_meanwhile_seeks_none_back():
    """The standbys settle after the tasks set up process, apart from the set-up: a revoke of one task while
    a standby's stores still open restarts no set-up, so the other task's partition, processing, is never
    sought back to its committed offset (its events would be processed twice)."""
    log: list[tuple[Any, ...]] = []
    tables = SlowStandbyTables()
    tasks, consumer = manager(log, exactly_once=False, tables=tables)
    await tasks.start()
    try:
        tasks.on_assignment(Assignment({0, 1}, {2}))  # type: ignore[arg-type]
        await ready(tasks, {IN0, IN1})
        await tables.opening_standby.wait()
        assert consumer.paused == set(), "processing while the standby's stores open"
        lease = tasks.leases.current[IN1]
        lease.track(7)
        lease.track(8)
        lease.ack(7)
        log.clear()
        await tasks.revoked({IN0})
        await asyncio.sleep(0.02)
        assert not [entry for entry in log if entry[0] in ("seek", "read committed")], log
        assert tasks.active[1].ready
        assert consumer.paused == set()
        tables.gate.set()
        await standbys_settled(tasks)
        assert set(tasks.standby) == {2}
        assert tasks.failure is None
    finally:
        await tasks.stop()


async def test_a_revoked_task_kept_warm_becomes_a_standby_or_closes_at_the_next_assignment():
    log: list[tuple[Any, ...]] = []
    tables = FakeTables()
    tasks, _ = manager(log, exactly_once=False, tables=tables)
    await tasks.start()
    try:
        tasks.on_assignment(Assignment({0, 1}, set()))  # type: ignore[arg-type]
        await ready(tasks, {IN0, IN1})
        states = {n: tasks.active[n].state_manager for n in (0, 1)}
        await tasks.revoked({IN0, IN1})
        assert tasks.warm == states
        tasks.on_assignment(Assignment(set(), {0}))  # type: ignore[arg-type]
        await tasks.assigned(set())
        await standbys_settled(tasks)
        assert tasks.standby[0].state_manager is states[0], "kept warm, now a standby: not reopened"
        assert tasks.warm == {}
        assert tables.closed == [tables.changelog(1)], "neither active nor standby here: closed"
        assert tables.followed == {tables.changelog(0)}
        assert tables.kept == {tables.changelog(0)}
    finally:
        await tasks.stop()
    assert tables.closed == [tables.changelog(1), tables.changelog(0)], "every store closed at stop"


async def test_a_failed_commit_rewinds_the_task_while_a_member_and_loses_it_otherwise():
    log: list[tuple[Any, ...]] = []
    tasks, consumer = manager(log)
    await ready(tasks, {IN0, IN1})
    first = tasks.active[0]
    await tasks.tasks_failed({0: DeliveryFailed("the transaction could not be committed")})
    await ready(tasks, {IN0}, assign=False)
    assert first.closed
    assert tasks.active[0] is not first, "rewound: a new task, set up again"
    assert log.count(("start", "app-task-0")) == 2, "with a new producer (fencing the old transaction)"
    assert log[-1] == ("seek", IN0, 7), "from its last commit"
    consumer.member = False
    await tasks.tasks_failed({1: DeliveryFailed("fenced?")})
    assert 1 not in tasks.active, "lost: another worker may own it"
    assert IN1 in consumer.paused, "until the group takes it away"
    assert RECOVERING not in str(tasks.pauses._reasons.get(IN1))
    assert log[-1] == ("rebalance",), "asked for: the group may still count this worker in (broker down)"
    consumer.member = True
    await ready(tasks, {IN1})  # the group gives it back
    assert IN1 not in consumer.paused
    assert not tasks.active[1].closed


async def test_a_rewind_counts_a_loss_for_the_event_that_held_its_transaction_past_the_timeout():
    """The checkpoint tells which events held their task's transaction open; one held while the transaction
    has been open past the transaction timeout (since the task's last commit here) is what the broker
    aborted it for (engine.tasks.poison)."""
    log: list[tuple[Any, ...]] = []
    tasks, _ = manager(log, transaction_timeout=0.2, poison=PoisonRecords(limit=1))
    await ready(tasks, {IN0, IN1})

    class Event:
        topic, partition = IN0

        def __init__(self, offset: int) -> None:
            self.offset = offset

    tasks.commits._held("count", Event(8))  # type: ignore[arg-type]  # within the timeout: not a suspect
    await asyncio.sleep(0.25)
    other = tasks.active[1]
    other.offsets_committed(TaskCut(other))  # another task committed: task 0 keeps its old transaction
    tasks.commits._held("count", Event(9))  # type: ignore[arg-type]
    await tasks.tasks_failed({0: ProducerFenced("the broker aborted the transaction")})
    await ready(tasks, {IN0}, assign=False)
    assert tasks.poison.buried == {IN0}
    assert tasks.poison.verdict(IN0, 8) is None
    verdict = tasks.poison.verdict(IN0, 9)
    assert verdict is not None
    assert "past the transaction timeout" in str(verdict[1])
    tasks.commits._held("count", Event(9))  # type: ignore[arg-type]  # a new transaction since the rewind
    assert tasks.poison.suspects.get(IN0, {}) == {}


@pytest.mark.parametrize("exactly_once", [True, False])
async def test_the_worker_stopping_checkpoints_then_closes_every_task(exactly_once):
    log: list[tuple[Any, ...]] = []
    tasks, _ = manager(log, exactly_once=exactly_once)
    await tasks.start()
    await ready(tasks, {IN0, IN1})
    lease = tasks.leases.current[IN1]
    lease.track(0)
    lease.ack(0)
    await tasks.stop()
    committed = ("commit", "app-task-1", {IN1: 1}) if exactly_once else ("offsets", {IN1: 1})
    assert committed in log
    assert ("stop", "app-task-0") in log
    assert ("stop", "app-task-1") in log
    assert log.index(committed) < log.index(("stop", "app-task-1"))
    assert tasks.active == {}


async def test_a_task_set_up_takes_the_groups_committed_offset_as_its_last_commit_unless_it_is_gone():
    """Until it commits, a task's last commit is the group's (the app's page shows it; repartition records
    below it may be purged). One no longer on the broker, where the partition jumped elsewhere, is not."""
    tasks, _ = manager([], exactly_once=False, tables=FakeTables())
    await ready(tasks, {IN0})
    assert tasks.leases.current[IN0].committed == 7  # (the fake's committed offset, on a log from 0)

    class TrimmedConsumer(FakeConsumer):
        async def offsets(self, tps: Any) -> dict[TP, tuple[int, int]]:
            return dict.fromkeys(tps, (10, 100))  # (the committed 7 deleted by retention)

    log: list[tuple[Any, ...]] = []
    jumped, _ = manager(log, exactly_once=False, tables=FakeTables(), consumer=TrimmedConsumer(log))
    await ready(jumped, {IN0})
    assert ("seek", IN0, 10) in log  # (auto_offset_reset="earliest": the log's start)
    assert jumped.leases.current[IN0].committed is None
