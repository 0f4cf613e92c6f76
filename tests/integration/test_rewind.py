"""Exactly-once, a task's transaction failing to commit: the task is rewound to its last commit (its
uncommitted writes dropped, its open transaction aborted by a fresh producer, its partitions sought back to
the committed offsets, its tables recovered) while the worker goes on; every count stays exact."""

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
