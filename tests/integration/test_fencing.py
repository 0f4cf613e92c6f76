"""Fencing, on the real broker, without waiting for a rebalance: two workers' exactly-once producers both
claim task 0. The second one's start fences the first: the first one's open transaction is aborted (a
read_committed reader never sees its records) and its commit fails with ProducerFenced, which engine turns
into "task 0 lost" once the group confirms this worker is no longer its member (tests/integration/
test_rebalances.py shows the whole path with a frozen worker)."""

from __future__ import annotations

import pytest

from engine.commit.transactions import commit_transactions, task_transactional_id
from engine.errors import ProducerFenced
from engine.events import TP
from engine.transport import open_transport
from tests.integration.helpers import create_topics, read_all, unique

pytestmark = pytest.mark.kafka


async def test_a_new_owner_fences_the_old_ones_transaction(kafka):
    app_id, topic = unique("fence"), unique("out")
    await create_topics(kafka.bootstrap, [topic], partitions=1)
    transport = open_transport(kafka.url, {})
    old = transport.producer(task_transactional_id(app_id, 0))  # task 0's producer on the old owner
    new = transport.producer(task_transactional_id(app_id, 0))  # ... and on its new owner
    await old.start()
    try:
        await old.send(topic, b"k", b"from the old owner", partition=0)
        await new.start()  # the new owner of task 0: fences the old one, aborts its transaction
        try:
            await new.send(topic, b"k", b"from the new owner", partition=0)
            failed = await commit_transactions({0: (old, {TP(topic, 0): 1})}, app_id)
            assert set(failed) == {0}
            assert isinstance(failed[0], ProducerFenced)
            assert await commit_transactions({0: (new, {TP(topic, 0): 1})}, app_id) == {}
        finally:
            await new.stop()
    finally:
        await old.stop()
    seen = [r.value for r in await read_all(kafka.bootstrap, topic, isolation_level="read_committed")]
    assert seen == [b"from the new owner"]
