"""The checkpoint over real active tasks (a table partition each, on a memory store) with fake producers and
consumer (no broker): what a cut commits under each guarantee, an aborted cut putting its writes back, the
tasks whose transactions failed split out of a cut, and a task with an event in progress left out of an
exactly-once cut while the others commit."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

import engine
from engine.commit.checkpoint import Checkpointer, CheckpointState
from engine.commit.guarantee import AtLeastOnce, ExactlyOnce, Guarantee
from engine.errors import DeliveryFailed, TransactionAborted, TransactionsFailed
from engine.events import TP
from engine.stores import open_store_backend
from engine.tables.keys import META_PREFIX
from engine.tables.state import StateManager
from engine.tasks.active import ActiveTask
from engine.tasks.leases import Leases
from engine.tasks.lifecycle import TaskState
from tests.unit.engine.fake_consumer import FakeConsumer

if TYPE_CHECKING:
    from pathlib import Path

IN0, IN1 = TP("in", 0), TP("in", 1)


class BackendStores:
    """What a state manager needs of the table manager, over one store backend."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def open_store(self, table: Any, number: int) -> Any:
        return self.backend.open(table.name, number)

    def destroy_store(self, table: Any, number: int) -> None:
        self.backend.destroy(table.name, number)

    def closed_store(self, table: Any, tp: TP, store: Any) -> None:
        store.close()


class FakeProducer:
    transactional = True

    def __init__(self, name: str, log: list[tuple[Any, ...]], failures: dict[str, BaseException]) -> None:
        self.name, self.log, self.failures = name, log, failures
        self.offset = 0

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def flush(self) -> None:
        self.log.append(("flush", self.name))
        if (failure := self.failures.pop(f"flush {self.name}", None)) is not None:
            raise failure

    async def commit_transaction(self, offsets: Any, group_id: str) -> None:
        if (failure := self.failures.pop(f"commit {self.name}", None)) is not None:
            raise failure
        self.log.append(("commit", self.name, dict(offsets)))

    async def send_batch(self, topic: str, partition: int, records: list[Any],
                         timestamps: list[int] | None = None) -> asyncio.Future[int]:
        if (failure := self.failures.pop(f"send {self.name}", None)) is not None:
            raise failure
        self.offset += len(records)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(self.offset - 1)
        return done


class FakeTransport:
    def __init__(self, transactional: bool = True) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.failures: dict[str, BaseException] = {}
        self.transactional = transactional

    def producer(self, transactional_id: str | None) -> FakeProducer:
        producer = FakeProducer(transactional_id or "plain", self.log, self.failures)
        producer.transactional = transactional_id is not None and self.transactional
        return producer


class Event:
    def __init__(self, tp: TP, offset: int) -> None:
        self.topic, self.partition, self.offset = tp.topic, tp.partition, offset


class Tasks:
    """Active tasks 0 and 1 of a counting table on memory stores, each with a lease on `in` whose records
    0..n-1 were processed, and their producers started as the guarantee makes them."""

    def __init__(self, tmp_path: Path, guarantee: Guarantee, processed: dict[TP, int]) -> None:
        app = engine.App("app", broker="memory://")
        self.table = app.Table("counts", default=int, key_type=str, value_type=int)
        self.table.bind(None, 2, {"in": 2})
        backend = open_store_backend("memory://", tmp_path)
        self.leases = Leases()
        self.active: dict[int, ActiveTask] = {}
        for lease in self.leases.grant(processed):
            for offset in range(processed[lease.tp]):
                lease.track(offset)
                lease.ack(offset)
            number = lease.tp.partition
            task = self.active[number] = ActiveTask(number)
            task.leases[lease.tp] = lease
            assert guarantee.task_producer is not None
            task.producer = guarantee.task_producer(number)
            state = StateManager(f"task {number}", BackendStores(backend))
            state.open([(self.table, number)])
            task.restoring(state)
            task.open()

    def write(self, number: int, **values: int) -> None:
        self.table.active[number].buffer.update(values)

    def buffer(self, number: int) -> dict[str, int]:
        return dict(self.table.active[number].buffer)

    def stored(self) -> dict[int, dict[str, int]]:
        """Each task's store, decoded (what a checkpoint completed)."""
        table = self.table
        found = {n: {table.key_codec.decode(k): table.value_codec.decode(v)
                     for k, v in part.store.items() if not k.startswith(META_PREFIX)}
                 for n, part in table.active.items()}
        return {n: values for n, values in found.items() if values}

    def committed(self) -> list[tuple[TP, int | None]]:
        return [(lease.tp, lease.committed) for lease in self.leases.live()]


def checkpointer(tasks: Tasks, guarantee: Guarantee, transport: FakeTransport, **told: Any) -> Checkpointer:
    return Checkpointer(tasks=tasks.active, consumer=FakeConsumer(transport.log),  # type: ignore[arg-type]
                        guarantee=guarantee, **told)


class Inside:
    """An agent's stream inside an event, as the quiesce gate sees it."""

    def __init__(self, agent_name: str, event: Any) -> None:
        self.agent_name, self.current_event = agent_name, event


async def test_at_least_once_flushes_then_commits_the_changelogs_then_the_offsets(tmp_path):
    transport = FakeTransport()
    guarantee = AtLeastOnce(transport, "app", tables=True)  # type: ignore[arg-type]
    tasks = Tasks(tmp_path, guarantee, {IN0: 5, IN1: 3})
    tasks.write(0, a=1)
    tasks.write(1, b=2)
    cut = await checkpointer(tasks, guarantee, transport).run(1.0)
    assert cut.state is CheckpointState.COMMITTED
    assert transport.log == [("confirm",), ("flush", "plain"), ("commit", "app-task-0", {}),
                             ("commit", "app-task-1", {}), ("offsets", {IN0: 5, IN1: 3})]
    assert tasks.stored() == {0: {"a": 1}, 1: {"b": 2}}
    assert tasks.committed() == [(IN0, 5), (IN1, 3)]


async def test_a_cut_whose_send_fails_is_aborted_and_its_writes_go_back_under_newer_ones(tmp_path):
    transport = FakeTransport()
    guarantee = AtLeastOnce(transport, "app", tables=True)  # type: ignore[arg-type]
    tasks = Tasks(tmp_path, guarantee, {IN0: 5})
    tasks.write(0, a=1, b=1)
    checkpoints = checkpointer(tasks, guarantee, transport)
    transport.failures["flush plain"] = DeliveryFailed("the broker did not acknowledge a record")
    with pytest.raises(DeliveryFailed):
        await checkpoints.run(1.0)
    tasks.write(0, b=2)  # written after the failed cut
    assert tasks.buffer(0) == {"a": 1, "b": 2}, "the failed cut's writes back, under the newer one"
    assert tasks.stored() == {}
    assert ("offsets", {IN0: 5}) not in transport.log
    assert tasks.committed() == [(IN0, None)]
    cut = await checkpoints.run(1.0)  # the next one sends them
    assert cut.state is CheckpointState.COMMITTED
    assert tasks.stored() == {0: {"a": 1, "b": 2}}


async def test_exactly_once_commits_each_task_with_its_offsets_and_splits_out_the_failed_ones(tmp_path):
    transport = FakeTransport()
    guarantee = ExactlyOnce(transport, "app", "worker", {})  # type: ignore[arg-type]
    tasks = Tasks(tmp_path, guarantee, {IN0: 5, IN1: 3})
    tasks.write(0, a=1)
    tasks.write(1, b=2)
    transport.failures["commit app-task-1"] = DeliveryFailed("the transaction could not be committed")
    with pytest.raises(TransactionsFailed) as failed:
        await checkpointer(tasks, guarantee, transport).run(1.0)
    assert set(failed.value.failed) == {1}
    assert ("commit", "app-task-0", {IN0: 5}) in transport.log
    assert not any(entry[0] == "offsets" for entry in transport.log), "offsets travel in the transactions"
    assert tasks.stored() == {0: {"a": 1}}, "task 1's writes are dropped: its events are processed again"
    assert 1 not in tasks.table.active, "task 1 failed: its table partition is gone, buffers and all"
    assert tasks.active[1].state is TaskState.FAILED
    assert tasks.committed() == [(IN0, 5)], "task 1's lease ended"


@pytest.mark.parametrize("exactly_once", [False, True])
async def test_a_task_whose_commit_failed_is_in_no_later_checkpoint(tmp_path, exactly_once):
    """Until the task manager rewinds it: its lease's offsets cover the events whose writes were dropped, and
    its open transaction holds some of them; a later checkpoint (a revoke's) must commit neither."""
    transport = FakeTransport()
    guarantee: Guarantee = (ExactlyOnce(transport, "app", "worker", {}) if exactly_once  # type: ignore[arg-type]
                            else AtLeastOnce(transport, "app", tables=True))  # type: ignore[arg-type]
    tasks = Tasks(tmp_path, guarantee, {IN0: 5, IN1: 3})
    lease = tasks.leases.current[IN1]
    tasks.write(0, a=1)
    tasks.write(1, b=2)
    checkpoints = checkpointer(tasks, guarantee, transport)
    transport.failures["commit app-task-1"] = DeliveryFailed("the transaction could not be committed")
    with pytest.raises(TransactionsFailed):
        await checkpoints.run(1.0)
    assert lease.ended, "nothing more of task 1 is applied: its events would read a table without the writes"
    for offset in (3, 4):  # events taken before the lease ended, finished after (acked by their agent)
        lease.track(offset)
        lease.ack(offset)
    tasks.write(0, a=2)
    transport.log.clear()
    await checkpoints.run(1.0)  # a revoke's, say, before the rewind
    committed = [entry for entry in transport.log if entry[0] in ("commit", "offsets")]
    assert all(entry[1] != "app-task-1" for entry in committed), "its open transaction is never committed"
    assert all(IN1 not in entry[-1] for entry in committed), "nor its offsets"


async def test_a_task_whose_transaction_the_broker_aborted_fails_alone(tmp_path):
    transport = FakeTransport()
    guarantee = ExactlyOnce(transport, "app", "worker", {})  # type: ignore[arg-type]
    tasks = Tasks(tmp_path, guarantee, {IN0: 5, IN1: 3})
    tasks.write(0, a=1)
    tasks.write(1, b=2)
    transport.failures["send app-task-0"] = TransactionAborted("aborted by the broker")
    with pytest.raises(TransactionsFailed) as failed:
        await checkpointer(tasks, guarantee, transport).run(1.0)
    assert set(failed.value.failed) == {0}
    assert [e for e in transport.log if e[0] == "commit" and e[1].startswith("app-task")] == [
        ("commit", "app-task-1", {IN1: 3})]
    assert tasks.stored() == {1: {"b": 2}}


async def test_exactly_once_leaves_out_a_task_with_an_event_in_progress_and_commits_the_others(tmp_path):
    transport = FakeTransport()
    guarantee = ExactlyOnce(transport, "app", "worker", {})  # type: ignore[arg-type]
    tasks = Tasks(tmp_path, guarantee, {IN0: 5, IN1: 3})
    tasks.write(0, a=1)
    tasks.write(1, b=2)
    stream = Inside("count", Event(IN1, 3))
    tasks.leases.current[IN1].track(3)  # pulled, never finished
    guarantee.quiesce.started(stream)
    held: list[tuple[str, int]] = []
    committed: list[tuple[list[int], dict[TP, int]]] = []
    since = time.monotonic()

    def told(offsets: Any) -> None:  # which tasks committed (their transactions open anew), their offsets
        renewed = [n for n, task in sorted(tasks.active.items())
                   if task.transaction_opened is not None and task.transaction_opened >= since]
        committed.append((renewed, dict(offsets)))

    checkpoints = checkpointer(tasks, guarantee, transport,
                               held=lambda agent, event: held.append((agent, event.offset)), committed=told)
    await checkpoints.run(0.05)
    commits = [e for e in transport.log if e[0] == "commit" and e[1].startswith("app-task")]
    assert commits == [("commit", "app-task-0", {IN0: 5})], "task 1's transaction stays open"
    assert tasks.stored() == {0: {"a": 1}}
    assert tasks.buffer(1) == {"b": 2}, "task 1's writes wait for its next commit"
    transport.log.clear()
    await checkpoints.run(10.0)  # does not wait for the known stuck event again
    assert sorted(e[1] for e in transport.log if e[0] == "commit") == ["app-task-0", "worker"]
    assert held == [("count", 3), ("count", 3)], "told at each cut that goes on without it"
    guarantee.quiesce.finished(stream)
    tasks.leases.current[IN1].ack(3)
    since = time.monotonic()
    await checkpoints.run(10.0)
    assert ("commit", "app-task-1", {IN1: 4}) in transport.log
    assert len(held) == 2, "not held any more"
    assert committed[0] == ([0], {IN0: 5})
    assert committed[-1] == ([0, 1], {IN1: 4})
    assert tasks.stored() == {0: {"a": 1}, 1: {"b": 2}}


async def test_a_closed_task_or_one_still_setting_up_is_not_in_a_cut(tmp_path):
    transport = FakeTransport()
    guarantee = ExactlyOnce(transport, "app", "worker", {})  # type: ignore[arg-type]
    tasks = Tasks(tmp_path, guarantee, {IN0: 5, IN1: 3})
    tasks.active[0].close()
    tasks.active[2] = ActiveTask(2)  # assigned, its producer not started yet
    await checkpointer(tasks, guarantee, transport).run(1.0)
    assert sorted(e[1] for e in transport.log if e[0] == "commit") == ["app-task-1", "worker"]
