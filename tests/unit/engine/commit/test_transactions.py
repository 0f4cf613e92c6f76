"""The exactly-once checkpoint commit, with producers that record what they are asked: every task's
transaction and the worker's commit together, each task with its own partitions' offsets; a failed worker
transaction is replaced without failing the checkpoint, a failed task is named."""

from __future__ import annotations

import asyncio

import pytest

from engine.commit.cut import TaskCut
from engine.commit.guarantee import ExactlyOnce
from engine.errors import TransactionAborted, TransactionsFailed
from engine.events import TP
from engine.tasks.active import ActiveTask


class RecordingProducer:
    transactional = True

    def __init__(self, transactional_id: str, log: list[tuple], failures: dict[str, Exception]) -> None:
        self.id = transactional_id
        self.log = log
        self.failures = failures
        self.open = asyncio.Event()  # like KafkaProducer: sends wait while the transaction commits
        self.in_transaction = False

    async def start(self) -> None:
        self.log.append(("start", self.id))
        self.in_transaction = True
        self.open.set()

    async def send(self, topic, key, value, **options) -> asyncio.Future[object]:
        await self.open.wait()
        if not self.in_transaction:  # as aiokafka refuses it once a commit failed
            raise TransactionAborted(f"{self.id}: no transaction open")
        self.log.append(("send", self.id, value))
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def stop(self) -> None:
        self.log.append(("stop", self.id))

    async def commit_transaction(self, offsets, group_id: str) -> None:
        self.log.append(("commit", self.id))
        self.open.clear()
        try:
            await asyncio.sleep(0.01)  # a broker round trip: the others start meanwhile if concurrent
            if self.id in self.failures:
                self.in_transaction = False
                raise self.failures.pop(self.id)
        finally:
            self.open.set()
        self.log.append(("committed", self.id, dict(offsets), group_id))


class RecordingTransport:
    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.failures: dict[str, Exception] = {}

    def producer(self, transactional_id: str) -> RecordingProducer:
        return RecordingProducer(transactional_id, self.log, self.failures)


OFFSETS = {TP("in", 0): 10, TP("other", 0): 3, TP("in", 1): 7}


async def started(transport: RecordingTransport) -> tuple[ExactlyOnce, list[TaskCut]]:
    """The guarantee with tasks 0 and 1 started, and a cut of each holding its partitions' OFFSETS."""
    guarantee = ExactlyOnce(transport, "app", "worker-1", {})  # type: ignore[arg-type]
    await guarantee.events.start()
    cuts = []
    for number in (0, 1):
        task = ActiveTask(number)
        task.producer = guarantee.task_producer(number)
        await task.producer.start()
        cut = TaskCut(task)
        cut.offsets = {tp: (None, offset) for tp, offset in OFFSETS.items()  # type: ignore[misc]
                       if tp.partition == number}
        cuts.append(cut)
    transport.log.clear()
    return guarantee, cuts


async def commit(guarantee: ExactlyOnce, cuts: list[TaskCut]) -> None:
    failed = await guarantee.commit(None, cuts, {})  # type: ignore[arg-type]
    if failed:
        raise TransactionsFailed(failed)


async def test_tasks_and_the_worker_commit_together_each_task_with_its_offsets():
    transport = RecordingTransport()
    guarantee, cuts = await started(transport)
    await commit(guarantee, cuts)
    began = [entry[1] for entry in transport.log[:3]]
    assert sorted(began) == ["app-task-0", "app-task-1", "worker-1"]  # all begun before any finished
    assert {entry[1]: entry[2] for entry in transport.log[3:]} == {
        "app-task-0": {TP("in", 0): 10, TP("other", 0): 3},
        "app-task-1": {TP("in", 1): 7},
        "worker-1": {},
    }


async def test_a_failed_worker_transaction_is_replaced_and_the_tasks_still_commit(caplog):
    transport = RecordingTransport()
    guarantee, cuts = await started(transport)
    old_worker = guarantee.events.worker
    transport.failures["worker-1"] = RuntimeError("coordinator gone")
    await commit(guarantee, cuts)  # no exception: the tasks' offsets committed
    assert {e[1] for e in transport.log if e[0] == "committed"} == {"app-task-0", "app-task-1"}
    stopped = transport.log.index(("stop", "worker-1"))
    assert ("start", "worker-1") in transport.log[stopped:], "a new worker transaction started"
    assert guarantee.events.worker is not old_worker
    assert "coordinator gone" in caplog.text


async def test_sends_outside_events_while_the_worker_transaction_fails_go_into_the_next_one():
    """A send outside any event (a timer's, a test's) that meets the worker's transaction failing to commit
    is not refused: it goes into the replacement's transaction."""
    transport = RecordingTransport()
    guarantee, cuts = await started(transport)
    transport.failures["worker-1"] = RuntimeError("coordinator gone")
    checkpoint = asyncio.ensure_future(commit(guarantee, cuts))
    while ("commit", "worker-1") not in transport.log:  # the worker's commit under way
        await asyncio.sleep(0)
    await asyncio.gather(guarantee.events.send("out", None, b"during"), checkpoint)
    await guarantee.events.send("out", None, b"after")
    sent = [e for e in transport.log if e[0] == "send"]
    assert sent == [("send", "worker-1", b"during"), ("send", "worker-1", b"after")]
    started_again = transport.log.index(("start", "worker-1"))
    assert transport.log.index(sent[0]) > started_again, "sent into the new transaction, not the failed one"


async def test_a_failed_task_is_named_and_the_others_and_the_worker_commit():
    transport = RecordingTransport()
    guarantee, cuts = await started(transport)
    transport.failures["app-task-1"] = RuntimeError("fenced?")
    with pytest.raises(TransactionsFailed) as failed:
        await commit(guarantee, cuts)
    assert set(failed.value.failed) == {1}
    assert {e[1] for e in transport.log if e[0] == "committed"} == {"app-task-0", "worker-1"}
