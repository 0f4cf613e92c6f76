"""TaskProducers' checkpoint commit, with producers that record what they are asked: every task's transaction
and the worker's commit together, each task with its own partitions' offsets; a failed worker transaction is
replaced without failing the checkpoint, a failed task is named."""

from __future__ import annotations

import asyncio

import pytest

from engine.events import TP
from engine.transactions import TaskProducers, TransactionsFailed


class RecordingProducer:
    transactional = True

    def __init__(self, transactional_id: str, log: list[tuple], failures: dict[str, Exception]) -> None:
        self.id = transactional_id
        self.log = log
        self.failures = failures

    async def start(self) -> None:
        self.log.append(("start", self.id))

    async def stop(self) -> None:
        self.log.append(("stop", self.id))

    async def commit_transaction(self, offsets, group_id: str) -> None:
        self.log.append(("commit", self.id))
        await asyncio.sleep(0.01)  # a broker round trip: the others start meanwhile if concurrent
        if self.id in self.failures:
            raise self.failures.pop(self.id)
        self.log.append(("committed", self.id, dict(offsets), group_id))


class RecordingTransport:
    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.failures: dict[str, Exception] = {}

    def producer(self, transactional_id: str) -> RecordingProducer:
        return RecordingProducer(transactional_id, self.log, self.failures)


async def started(transport: RecordingTransport) -> TaskProducers:
    producers = TaskProducers(transport, "app", "worker-1")  # type: ignore[arg-type]
    await producers.start()
    await producers.assign([0, 1])
    transport.log.clear()
    return producers


OFFSETS = {TP("in", 0): 10, TP("other", 0): 3, TP("in", 1): 7}


async def test_tasks_and_the_worker_commit_together_each_task_with_its_offsets():
    transport = RecordingTransport()
    producers = await started(transport)
    await producers.commit_transaction(OFFSETS, "group")
    began = [entry[1] for entry in transport.log[:3]]
    assert sorted(began) == ["app-task-0", "app-task-1", "worker-1"]  # all begun before any finished
    assert {entry[1]: entry[2] for entry in transport.log[3:]} == {
        "app-task-0": {TP("in", 0): 10, TP("other", 0): 3},
        "app-task-1": {TP("in", 1): 7},
        "worker-1": {},
    }


async def test_a_failed_worker_transaction_is_replaced_and_the_tasks_still_commit(caplog):
    transport = RecordingTransport()
    producers = await started(transport)
    old_worker = producers.worker
    transport.failures["worker-1"] = RuntimeError("coordinator gone")
    await producers.commit_transaction(OFFSETS, "group")  # no exception: the tasks' offsets committed
    assert {e[1] for e in transport.log if e[0] == "committed"} == {"app-task-0", "app-task-1"}
    assert ("stop", "worker-1") in transport.log
    assert transport.log[-1] == ("start", "worker-1")
    assert producers.worker is not old_worker
    assert "coordinator gone" in caplog.text


async def test_a_failed_task_is_named_and_the_others_and_the_worker_commit():
    transport = RecordingTransport()
    producers = await started(transport)
    transport.failures["app-task-1"] = RuntimeError("fenced?")
    with pytest.raises(TransactionsFailed) as failed:
        await producers.commit_transaction(OFFSETS, "group")
    assert set(failed.value.failed) == {1}
    assert {e[1] for e in transport.log if e[0] == "committed"} == {"app-task-0", "worker-1"}
