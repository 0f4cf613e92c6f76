"""A task's transaction failing to commit: the task is rewound to its last commit (its uncommitted writes
dropped, its open transaction aborted by a fresh producer, its partitions sought back to the committed
offsets, its tables recovered) while the worker goes on; every count stays exact (exactly-once), or at least
the truth (at-least-once, whose changelogs are written in the same transactions). Until it is rewound the
task is stopped: a checkpoint meanwhile commits nothing of it."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

import engine
from engine import testing
from engine.errors import DeliveryFailed
from tests.integration.helpers import consume_until, create_topics, latest, produce, read_all, unique
from tests.integration.table_apps import make_app

pytestmark = pytest.mark.kafka


async def test_a_failed_task_commit_is_rewound_and_counts_stay_exact(kafka, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="engine.tasks.manager")
    app_id, topic = unique("rewind"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    app = make_app(app_id, topic=topic, processing_guarantee="exactly_once")
    worker = engine.Worker(app, app.settings({"broker": kafka.url, "data_dir": str(tmp_path)}))
    first = [f"w{i % 40}" for i in range(2000)]
    second = [f"w{i % 40}" for i in range(1000)]
    failures: list[int] = []
    await worker.start()
    try:
        await testing.eventually(lambda: "tables ready" in caplog.text, 60)
        task = worker.tasks.active[0].producer
        assert task is not None
        commit = task.commit_transaction

        async def fail_once(offsets, group_id):
            if not failures and offsets:
                failures.append(len(offsets))
                raise DeliveryFailed("injected: the transaction could not be committed")
            await commit(offsets, group_id)

        task.commit_transaction = fail_once  # type: ignore[method-assign]
        await produce(kafka.bootstrap, topic, [(w, 1) for w in first])
        await testing.eventually(lambda: bool(failures), 30)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in second])
        truth = dict(Counter(first + second))
        records = await consume_until(kafka.bootstrap, f"{app_id}-counts-changelog",
                                      lambda rs: latest(rs) == truth, timeout=90,
                                      isolation_level="read_committed")
        assert latest(records) == truth
        assert worker.failure is None
    finally:
        worker.request_stop()
        await worker.run_until_stopped()
    assert "rewinding" in caplog.text


class FailingCommits:
    """Wraps a transport's producers: the next `armed` transaction commits (of any task) fail, as a broker
    refusing them would, whatever producer the task has by then (tasks get new producers when they come
    back)."""

    def __init__(self, transport) -> None:
        self.armed = 0
        self.failed = 0
        self._producer = transport.producer
        transport.producer = self.producer

    def producer(self, transactional_id=None):
        producer = self._producer(transactional_id)
        if transactional_id is None or "-task-" not in transactional_id:
            return producer
        commit = producer.commit_transaction

        async def commit_or_fail(offsets, group_id):
            if self.armed > 0:
                self.armed -= 1
                self.failed += 1
                raise DeliveryFailed("injected: the transaction could not be committed")
            await commit(offsets, group_id)

        producer.commit_transaction = commit_or_fail
        return producer


async def test_partitions_whose_revoke_checkpoint_fails_and_come_back_stay_exact(kafka, tmp_path, caplog):
    """The checkpoint on revoke fails (every task's commit refused) and the same worker gets the partitions
    back: their uncommitted work must be dropped and processed again once, not applied on top."""
    caplog.set_level(logging.INFO, logger="engine.tasks.manager")
    app_id, topic = unique("comeback"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    app = make_app(app_id, topic=topic, processing_guarantee="exactly_once")
    # The classic protocol: asked for, its rebalance revokes every partition and gives them back to the one
    # worker (a streams group's broker assigns continuously, and gives a lone member nothing to revoke).
    worker = engine.Worker(app, app.settings({"broker": kafka.url, "data_dir": str(tmp_path),
                                              "group_protocol": "classic"}))
    faults = FailingCommits(worker.transport)
    batches = [[f"w{i % 40}" for i in range(1000 * n, 1000 * n + 1000)] for n in range(4)]
    await worker.start()
    try:
        await testing.eventually(lambda: "tables ready" in caplog.text, 60)
        for round_, batch in enumerate(batches):
            await produce(kafka.bootstrap, topic, [(w, 1) for w in batch])
            faults.armed = 4  # the next commits fail: the revoke's among them
            worker.conductor.consumer.request_rebalance()
            await testing.eventually(lambda r=round_: caplog.text.count("tables ready") >= r + 2, 60)
        truth = dict(Counter(w for batch in batches for w in batch))
        try:
            records = await consume_until(kafka.bootstrap, f"{app_id}-counts-changelog",
                                          lambda rs: latest(rs) == truth, timeout=90,
                                          isolation_level="read_committed")
        except AssertionError:
            got = latest(await read_all(kafka.bootstrap, f"{app_id}-counts-changelog"))
            wrong = {k: (got.get(k), n) for k, n in truth.items() if got.get(k) != n}
            raise AssertionError(f"(count, truth) of the keys that differ: {wrong}") from None
        await asyncio.sleep(1)  # a few more checkpoints: an over-count would show now
        records = await read_all(kafka.bootstrap, f"{app_id}-counts-changelog")
        assert latest(records) == truth
        assert worker.failure is None
    finally:
        worker.request_stop()
        await worker.run_until_stopped()
    assert faults.failed >= 4
    assert "revoked" in caplog.text


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_task_whose_commit_failed_commits_nothing_more_before_it_is_rewound(kafka, tmp_path, caplog,
                                                                                    guarantee):
    """A task's commit fails. Before the task manager rewinds it, it asks the group whether this worker is
    still a member (a heartbeat: seconds while a broker restarts); meanwhile more events come and a rebalance
    revokes the partitions, which checkpoints them. That checkpoint must commit nothing of the failed task:
    its offsets cover the events whose writes the failed commit dropped, and its events since read its table
    without those writes (the restart storm's at-least-once count left below the truth for good)."""
    caplog.set_level(logging.INFO, logger="engine.tasks.manager")
    app_id, topic = unique("failed"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    app = make_app(app_id, topic=topic, processing_guarantee=guarantee)
    # The classic protocol: the rebalance it asks for revokes the worker's partitions (a streams group's
    # broker gives a lone member nothing to revoke).
    worker = engine.Worker(app, app.settings({"broker": kafka.url, "data_dir": str(tmp_path),
                                              "group_protocol": "classic"}))
    faults = FailingCommits(worker.transport)
    batches = [[f"w{i % 40}" for i in range(1000 * n, 1000 * n + 1000)] for n in range(4)]
    await worker.start()
    consumer = worker.tasks.consumer
    confirm = consumer.confirm_membership
    revoked: list[bool] = []

    async def slow_after_the_failure() -> None:
        """The first membership check after the failed commit (the rewind's) waits until the events after
        the failed cut are processed and a rebalance's revoke has checkpointed the worker."""
        if faults.failed and not revoked:
            revoked.append(False)
            await produce(kafka.bootstrap, topic, [(w, 1) for w in batches[2]])
            leases = worker.tasks.leases.current
            ends = {tp: end for tp, (_, end) in (await consumer.offsets(list(leases))).items()}
            await testing.eventually(lambda: all(
                lease.ended or (lease.position or 0) >= ends[tp] for tp, lease in leases.items()), 60)
            revokes = caplog.text.count("revoke of")
            consumer.request_rebalance()
            await testing.eventually(lambda: caplog.text.count("revoke of") > revokes, 60)
            revoked[0] = True
        await confirm()

    consumer.confirm_membership = slow_after_the_failure  # type: ignore[method-assign]
    try:
        await testing.eventually(lambda: "tables ready" in caplog.text, 60)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in batches[0]])
        first = dict(Counter(batches[0]))
        await consume_until(kafka.bootstrap, f"{app_id}-counts-changelog", lambda rs: latest(rs) == first)
        faults.armed = 1  # the next task commit fails
        await produce(kafka.bootstrap, topic, [(w, 1) for w in batches[1]])
        await testing.eventually(lambda: revoked == [True], 90)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in batches[3]])
        truth = dict(Counter(w for batch in batches for w in batch))

        def reached(records) -> bool:
            got = latest(records)
            return all(got.get(k, 0) >= n for k, n in truth.items())

        try:
            await consume_until(kafka.bootstrap, f"{app_id}-counts-changelog", reached, timeout=60)
        except AssertionError:
            got = latest(await read_all(kafka.bootstrap, f"{app_id}-counts-changelog"))
            below = {k: (got.get(k), n) for k, n in truth.items() if got.get(k, 0) < n}
            raise AssertionError(f"(count, truth) of the keys below the truth: {below}") from None
        await asyncio.sleep(1)  # a few more checkpoints: an over-count would show now
        got = latest(await read_all(kafka.bootstrap, f"{app_id}-counts-changelog"))
        if guarantee == "exactly_once":
            assert {k: (got.get(k), n) for k, n in truth.items() if got.get(k) != n} == {}
        assert worker.failure is None
    finally:
        worker.request_stop()
        await worker.run_until_stopped()
    assert faults.failed == 1
