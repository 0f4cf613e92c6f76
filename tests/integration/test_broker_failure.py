"""A worker on a 3-broker cluster keeps going when one broker is killed mid-stream, and loses nothing; its
internal topics get the cluster's default replication factor (3), not 1. Exactly-once stays exact when a
broker dies and comes back while partitions move between workers."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.helpers import WorkerProcess, consume_until, create_topics, produce, read_all, unique
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import paced_produce, wait_until_complete, words
from tests.integration.worker_checks import numbers_of

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


async def test_exactly_once_stays_exact_when_a_broker_dies_while_partitions_move(kafka_cluster, tmp_path):
    """Internal topics replicated 3 times with min.insync.replicas=2: a broker is killed as a second worker
    joins (its partitions' leaders move, acks=all waits for the ISR to shrink, produces are retried), comes
    back as the first worker leaves. Read committed, counts, every window's final value and every event's
    output are exact."""
    for node in (1, 2, 3):  # an earlier test may have left one down
        if not kafka_cluster.nodes[node - 1].running:
            await asyncio.to_thread(kafka_cluster.restart, node)
    bootstrap = kafka_cluster.bootstrap
    app_id, topic = unique("brokers"), unique("words")
    await create_topics(bootstrap, [topic], replication=3)
    events = words(8_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": "exactly_once", "ITEST_ECHO": "1"}

    def worker(name: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.rebalance_apps:app", kafka_cluster.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")

    first = worker("first")
    second: WorkerProcess | None = None
    try:
        await first.wait_for_output("tables ready", 90)
        assert await replication_of(bootstrap, [f"{app_id}-counts-changelog", f"{app_id}-echo"]) == {3}

        def join_and_kill() -> None:
            nonlocal second
            second = worker("second")
            kafka_cluster.kill(3)

        cut = len(events) * 6 // 10
        await paced_produce(bootstrap, topic, events[:cut], rate=800, at={0.5: join_and_kill})
        assert second is not None
        await second.wait_for_output("tables ready", 120)
        await asyncio.to_thread(kafka_cluster.restart, 3)
        first.process.terminate()  # a clean leave while the broker catches up: the partitions move again
        await paced_produce(bootstrap, topic, events[cut:], rate=800)
        counts, closes = await wait_until_complete(bootstrap, app_id, events, timeout=240,
                                                   workers=[first, second])
        echoed = await read_all(bootstrap, f"{app_id}-echo", timeout=60)
        assert first.process.wait(60) == 0, first.output()[-3000:]
    finally:
        if first.process.poll() is None:
            first.kill()
        if second is not None:
            assert second.terminate(timeout=60) == 0, second.output()[-3000:]
    check(events, counts, closes, exact=True)
    outputs = Counter((r.key.decode(), int(r.value)) for r in echoed)
    assert set(outputs) == {(key, v["i"]) for key, v in events}, "every event's output"
    assert {o: n for o, n in outputs.items() if n > 1} == {}, "each output once"
