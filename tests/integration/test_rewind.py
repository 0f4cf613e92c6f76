"""Exactly-once, a task's transaction failing to commit: the task is rewound to its last commit (its
uncommitted writes dropped, its open transaction aborted by a fresh producer, its partitions sought back to
the committed offsets, its tables recovered) while the worker goes on; every count stays exact."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

import engine
from engine import testing
from engine.errors import DeliveryFailed
from tests.integration.helpers import consume_until, create_topics, latest, produce, unique
from tests.integration.table_apps import make_app

pytestmark = pytest.mark.kafka


async def test_a_failed_task_commit_is_rewound_and_counts_stay_exact(kafka, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="engine.rebalance")
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
        task = worker.producer.tasks[0]  # type: ignore[attr-defined]  # exactly-once: TaskProducers
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
