"""An app stopped for longer than its input's retention comes back to committed offsets the broker no
longer has: it goes on where `auto_offset_reset` says, says once which partitions jumped and how many records
were skipped, and counts exactly what is left; a stateless app too."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from tests.integration.helpers import (
    WorkerProcess,
    committed_offsets,
    consume_until,
    create_topics,
    latest,
    produce,
    read_all,
    unique,
    worker_status,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
GONE = 25  # records of each partition deleted past its committed offset while the app was stopped


def counting(kafka, tmp_path, app_id: str, topic: str, name: str) -> WorkerProcess:
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(tmp_path / "data")}
    return WorkerProcess("tests.integration.table_apps:app", kafka.url, env, tmp_path / f"{name}.log")


async def retention_deletes_past(bootstrap: str, committed: dict[TopicPartition, int]) -> None:
    """What retention does to an app stopped too long: everything up to GONE records past each committed
    offset deleted."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({tp: RecordsToDelete(offset + GONE) for tp, offset in committed.items()})
    finally:
        await admin.close()


def assert_the_jumps_were_said(worker: WorkerProcess, status: dict[str, Any] | None, topic: str,
                               committed: dict[TopicPartition, int]) -> None:
    """One WARNING naming every partition's jump past the deleted records, and the same jumps in /status."""
    warnings = [line for line in worker.output().splitlines()
                if "committed offsets no longer on the broker" in line]
    assert len(warnings) == 1, worker.output()[-3000:]
    assert "WARNING" in warnings[0]
    for tp, offset in committed.items():
        assert (f"{topic}[{tp.partition}] from {offset} to {offset + GONE} ({GONE} records "
                "skipped)") in warnings[0]
    assert status is not None
    assert status["offset_jumps"] == {
        f"{topic}[{tp.partition}]": {"committed": offset, "to": offset + GONE, "skipped": GONE}
        for tp, offset in committed.items()}


async def test_committed_offsets_deleted_by_retention_jump_to_the_start_say_so_and_count_the_rest(
        kafka, tmp_path):
    app_id, topic = unique("retention"), unique("words")
    changelog = f"{app_id}-counts-changelog"
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)
    first = [f"k{i % 50}" for i in range(2000)]
    one = counting(kafka, tmp_path, app_id, topic, "one")
    try:
        await one.wait_for_output("tables ready", 90)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in first])
        await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == dict(Counter(first)),
                            timeout=90, workers=[one])
    finally:
        assert one.terminate() == 0, one.output()[-3000:]
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    committed = await committed_offsets(kafka.bootstrap, app_id, tps)
    assert len(committed) == PARTITIONS, "every partition committed before the stop"
    await produce(kafka.bootstrap, topic, [(f"k{i % 50}", 1) for i in range(2000)])  # while stopped
    await retention_deletes_past(kafka.bootstrap, committed)
    left = await read_all(kafka.bootstrap, topic)
    starts = {p: min(r.offset for r in left if r.partition == p) for p in range(PARTITIONS)}
    assert starts == {tp.partition: committed[tp] + GONE for tp in tps}, "the logs start past the commits"
    truth = dict(Counter(first) + Counter(r.key.decode() for r in left))

    two = counting(kafka, tmp_path, app_id, topic, "two")
    try:
        await two.wait_for_output("tables ready", 90)
        records = await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == truth,
                                      timeout=90, workers=[two])
        status = await worker_status(two)
    finally:
        assert two.terminate() == 0, two.output()[-3000:]
    assert latest(records) == truth
    assert_the_jumps_were_said(two, status, topic, committed)


async def test_a_stateless_app_whose_committed_offsets_were_deleted_says_so_and_processes_the_rest(
        kafka, tmp_path):
    """No table, at-least-once: no changelog or transaction to set up, but the same check of its committed
    offsets against the log, the same WARNING and `engine status`: every record left processed, none of the
    deleted ones."""
    app_id, topic = unique("retention-stateless"), unique("words")
    echo = f"{app_id}-echo"
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(tmp_path / "data")}

    def echoing(name: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.echo_apps:app", kafka.url, env, tmp_path / f"{name}.log")

    first = [(f"k{i % 50}", i) for i in range(800)]
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    one = echoing("one")
    try:
        await one.wait_for_output("assigned", 90)
        await produce(kafka.bootstrap, topic, first)
        await consume_until(kafka.bootstrap, echo, lambda rs: len({r.value for r in rs}) == len(first),
                            timeout=90, workers=[one])
        written = await read_all(kafka.bootstrap, topic)
        ends = {p: max(r.offset for r in written if r.partition == p) + 1 for p in range(PARTITIONS)}
        for _ in range(300):  # (its last checkpoint commits what it processed)
            committed = await committed_offsets(kafka.bootstrap, app_id, tps)
            if {tp.partition: offset for tp, offset in committed.items()} == ends:
                break
            await asyncio.sleep(0.1)
    finally:
        assert one.terminate() == 0, one.output()[-3000:]
    committed = await committed_offsets(kafka.bootstrap, app_id, tps)
    assert {tp.partition: offset for tp, offset in committed.items()} == ends, "all committed at the stop"
    await produce(kafka.bootstrap, topic, [(f"k{i % 50}", i) for i in range(800, 1600)])  # while stopped
    await retention_deletes_past(kafka.bootstrap, committed)
    left = {f"{r.partition}:{r.offset}" for r in await read_all(kafka.bootstrap, topic)}
    deleted = {f"{tp.partition}:{at}" for tp in tps for at in range(committed[tp], committed[tp] + GONE)}
    two = echoing("two")
    try:
        records = await consume_until(kafka.bootstrap, echo,
                                      lambda rs: left <= {r.value.decode().strip('"') for r in rs},
                                      timeout=90, workers=[two])
        status = await worker_status(two)
    finally:
        assert two.terminate() == 0, two.output()[-3000:]
    echoed = {r.value.decode().strip('"') for r in records}
    assert echoed & deleted == set(), "no deleted record was processed"
    assert_the_jumps_were_said(two, status, topic, committed)
