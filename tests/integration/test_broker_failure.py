"""A worker on a 3-broker cluster keeps going when one broker is killed mid-stream, and loses nothing; its
internal topics get the cluster's default replication factor (3), not 1."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.helpers import WorkerProcess, consume_until, create_topics, produce, unique
from tests.integration.test_workers_on_kafka import numbers_of

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]


async def test_broker_killed_mid_stream_loses_nothing(kafka_cluster, tmp_path):
    bootstrap = kafka_cluster.bootstrap
    await create_topics(bootstrap, ["numbers", "processed"], replication=3)
    app_id = unique("fault")
    env = {"ITEST_APP": app_id, "ITEST_DELAY": "0.001"}  # no topic_replication: the broker's default
    worker = WorkerProcess("tests.integration.apps:app", kafka_cluster.url, env,
                           tmp_path / "worker.log")
    ids = set(range(3000))
    try:
        await worker.wait_for_output("assigned")
        assert await replication_of(bootstrap, [f"{app_id}-process-dlq", f"{app_id}-replies"]) == {3}
        await produce(bootstrap, "numbers", ((n, {"n": n}) for n in sorted(ids)))
        await consume_until(bootstrap, "processed", lambda rs: len(numbers_of(rs)) >= 500, 90)
        kafka_cluster.kill(2)
        records = await consume_until(bootstrap, "processed",
                                      lambda rs: ids <= numbers_of(rs), timeout=180)
        assert ids <= numbers_of(records)
        assert worker.process.poll() is None, "the worker must survive a broker failure"
    finally:
        assert worker.terminate(timeout=60) == 0, worker.output()[-3000:]


async def replication_of(bootstrap: str, topics: list[str]) -> set[int]:
    """The replication factors found among the partitions of `topics`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    assert {t["topic"] for t in described} == set(topics)
    return {len(p["replicas"]) for t in described for p in t["partitions"]}
