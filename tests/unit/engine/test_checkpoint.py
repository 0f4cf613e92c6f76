"""The checkpoint on fakes (no broker): what a cut commits under each guarantee, an aborted cut putting its
writes back, the tasks whose transactions failed split out of a cut, and a task with an event in progress
left out of an exactly-once cut while the others commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from engine.checkpoint import Checkpointer, CheckpointState
from engine.errors import DeliveryFailed
from engine.events import TP
from engine.guarantee import AtLeastOnce, ExactlyOnce
from engine.leases import Leases
from engine.transactions import TransactionsFailed

IN0, IN1 = TP("in", 0), TP("in", 1)


class FakeProducer:
    transactional = True

    def __init__(self, name: str, log: list[tuple[Any, ...]], failures: dict[str, BaseException]) -> None:
        self.name, self.log, self.failures = name, log, failures

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


class FakeTransport:
    def __init__(self, transactional: bool = True) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.failures: dict[str, BaseException] = {}
        self.transactional = transactional

    def producer(self, transactional_id: str | None) -> FakeProducer:
        producer = FakeProducer(transactional_id or "plain", self.log, self.failures)
        producer.transactional = transactional_id is not None and self.transactional
        return producer


class FakeConsumer:
    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    async def confirm_membership(self) -> None:
        self.log.append(("confirm",))

    async def commit(self, offsets: Any) -> None:
        self.log.append(("offsets", dict(offsets)))


@dataclass
class Item:
    """What the table manager's Pending is to the checkpoint: a partition's writes in flight."""

    number: int
    writes: dict[str, int]


@dataclass
class FakeTables:
    """The table manager's checkpoint steps: a buffer per partition number."""

    buffers: dict[int, dict[str, int]]
    sent: list[int] = field(default_factory=list)
    stored: dict[int, dict[str, int]] = field(default_factory=dict)
    aborted_send: set[int] = field(default_factory=set)

    def prepare(self, leases: Any, held: frozenset[int] = frozenset()) -> list[Any]:
        taken = [Item(n, b) for n, b in self.buffers.items() if b and n not in held]
        for item in taken:
            self.buffers[item.number] = {}
        return taken

    async def send(self, pending: list[Any]) -> dict[int, BaseException]:
        self.sent += [item.number for item in pending]
        return {n: DeliveryFailed("aborted by the broker") for n in self.aborted_send}

    def complete(self, pending: list[Any]) -> None:
        for item in pending:
            self.stored.setdefault(item.number, {}).update(item.writes)

    def drop(self, pending: list[Any], numbers: Any) -> list[Any]:
        return [item for item in pending if item.number not in numbers]

    def abort(self, pending: list[Any]) -> None:
        for item in pending:
            self.buffers[item.number] = {**item.writes, **self.buffers[item.number]}


class Event:
    def __init__(self, tp: TP, offset: int) -> None:
        self.topic, self.partition, self.offset = tp.topic, tp.partition, offset


def leases_with(processed: dict[TP, int]) -> Leases:
    """Leases whose records 0..n-1 were processed (acked)."""
    leases = Leases()
    for lease in leases.grant(processed):
        for offset in range(processed[lease.tp]):
            lease.track(offset)
            lease.ack(offset)
    return leases


async def exactly_once(transport: FakeTransport) -> ExactlyOnce:
    guarantee = ExactlyOnce(transport, "app", "worker")  # type: ignore[arg-type]
    await guarantee.tasks.assign([0, 1])
    return guarantee


async def test_at_least_once_flushes_then_commits_the_changelogs_then_the_offsets():
    transport = FakeTransport()
    guarantee = AtLeastOnce(transport, "app", tables=True)  # type: ignore[arg-type]
    assert guarantee.tasks is not None
    await guarantee.tasks.assign([0, 1])
    tables = FakeTables({0: {"a": 1}, 1: {"b": 2}})
    leases = leases_with({IN0: 5, IN1: 3})
    checkpoints = Checkpointer(leases=leases, consumer=FakeConsumer(transport.log),  # type: ignore[arg-type]
                               guarantee=guarantee, tables=tables, busy=list)  # type: ignore[arg-type]
    cut = await checkpoints.run(1.0)
    assert cut.state is CheckpointState.COMMITTED
    assert transport.log == [("confirm",), ("flush", "plain"), ("commit", "app-task-0", {}),
                             ("commit", "app-task-1", {}), ("offsets", {IN0: 5, IN1: 3})]
    assert tables.stored == {0: {"a": 1}, 1: {"b": 2}}
    assert [lease.committed for lease in leases.live()] == [5, 3]


async def test_a_cut_whose_send_fails_is_aborted_and_its_writes_go_back_under_newer_ones():
    transport = FakeTransport()
    guarantee = AtLeastOnce(transport, "app", tables=True)  # type: ignore[arg-type]
    assert guarantee.tasks is not None
    await guarantee.tasks.assign([0])
    tables = FakeTables({0: {"a": 1, "b": 1}})
    leases = leases_with({IN0: 5})
    checkpoints = Checkpointer(leases=leases, consumer=FakeConsumer(transport.log),  # type: ignore[arg-type]
                               guarantee=guarantee, tables=tables, busy=list)  # type: ignore[arg-type]
    transport.failures["flush plain"] = DeliveryFailed("the broker did not acknowledge a record")
    with pytest.raises(DeliveryFailed):
        await checkpoints.run(1.0)
    tables.buffers[0]["b"] = 2  # written after the failed cut
    assert tables.buffers[0] == {"a": 1, "b": 2}, "the failed cut's writes back, under the newer one"
    assert tables.stored == {}
    assert ("offsets", {IN0: 5}) not in transport.log
    assert [lease.committed for lease in leases.live()] == [None]
    cut = await checkpoints.run(1.0)  # the next one sends them
    assert cut.state is CheckpointState.COMMITTED
    assert tables.stored == {0: {"a": 1, "b": 2}}


async def test_exactly_once_commits_each_task_with_its_offsets_and_splits_out_the_failed_ones():
    transport = FakeTransport()
    guarantee = await exactly_once(transport)
    tables = FakeTables({0: {"a": 1}, 1: {"b": 2}})
    leases = leases_with({IN0: 5, IN1: 3})
    checkpoints = Checkpointer(leases=leases, consumer=FakeConsumer(transport.log),  # type: ignore[arg-type]
                               guarantee=guarantee, tables=tables, busy=list)  # type: ignore[arg-type]
    transport.failures["commit app-task-1"] = DeliveryFailed("the transaction could not be committed")
    with pytest.raises(TransactionsFailed) as failed:
        await checkpoints.run(1.0)
    assert set(failed.value.failed) == {1}
    assert ("commit", "app-task-0", {IN0: 5}) in transport.log
    assert not any(entry[0] == "offsets" for entry in transport.log), "offsets travel in the transactions"
    assert tables.stored == {0: {"a": 1}}, "task 1's writes are dropped: its events are processed again"
    assert tables.buffers[1] == {}
    assert [(lease.tp, lease.committed) for lease in leases.live()] == [(IN0, 5), (IN1, None)]


async def test_a_task_whose_transaction_the_broker_aborted_fails_alone():
    transport = FakeTransport()
    guarantee = await exactly_once(transport)
    tables = FakeTables({0: {"a": 1}, 1: {"b": 2}}, aborted_send={0})
    leases = leases_with({IN0: 5, IN1: 3})
    checkpoints = Checkpointer(leases=leases, consumer=FakeConsumer(transport.log),  # type: ignore[arg-type]
                               guarantee=guarantee, tables=tables, busy=list)  # type: ignore[arg-type]
    with pytest.raises(TransactionsFailed) as failed:
        await checkpoints.run(1.0)
    assert set(failed.value.failed) == {0}
    assert [e for e in transport.log if e[0] == "commit" and e[1].startswith("app-task")] == [
        ("commit", "app-task-1", {IN1: 3})]
    assert tables.stored == {1: {"b": 2}}


async def test_exactly_once_leaves_out_a_task_with_an_event_in_progress_and_commits_the_others():
    transport = FakeTransport()
    guarantee = await exactly_once(transport)
    tables = FakeTables({0: {"a": 1}, 1: {"b": 2}})
    leases = leases_with({IN0: 5, IN1: 3})
    inside = [("count", Event(IN1, 3))]
    leases.current[IN1].track(3)  # pulled, never finished
    guarantee.quiesce.started()
    checkpoints = Checkpointer(leases=leases, consumer=FakeConsumer(transport.log),  # type: ignore[arg-type]
                               guarantee=guarantee, tables=tables,  # type: ignore[arg-type]
                               busy=lambda: list(inside))  # type: ignore[arg-type]
    await checkpoints.run(0.05)
    commits = [e for e in transport.log if e[0] == "commit" and e[1].startswith("app-task")]
    assert commits == [("commit", "app-task-0", {IN0: 5})], "task 1's transaction stays open"
    assert tables.stored == {0: {"a": 1}}
    assert tables.buffers[1] == {"b": 2}, "task 1's writes wait for its next commit"
    transport.log.clear()
    await checkpoints.run(10.0)  # does not wait for the known stuck event again
    assert [e[1] for e in transport.log if e[0] == "commit"] == ["app-task-0", "worker"]
    guarantee.quiesce.finished()
    inside.clear()
    leases.current[IN1].ack(3)
    await checkpoints.run(10.0)
    assert ("commit", "app-task-1", {IN1: 4}) in transport.log
    assert tables.stored == {0: {"a": 1}, 1: {"b": 2}}
