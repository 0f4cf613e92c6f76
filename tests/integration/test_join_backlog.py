"""A stream-table join processed from a backlog, on the real broker, through `engine worker`, with a second
worker joining halfway (partitions and the table's partitions moving): every payment is joined with the
profile version of its own time, the newest written at or before it (the table's record first on the same
millisecond), as a live run gives it, not with the version the table holds at the end of the backlog.
Ground truth computed from the records; under exactly-once, every payment once."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.helpers import WorkerProcess, create_topics, read_all, unique, until_done

pytestmark = pytest.mark.kafka

CUSTOMERS = 12
EVENTS = 6000


def backlog() -> tuple[list[tuple[str, str, int, int]], dict[int, int | None]]:
    """(topic, customer, number, ts) in time order (profiles: number is the version; payments: its id),
    and the version each payment must see (None: no profile yet)."""
    records: list[tuple[str, str, int, int]] = []
    versions: dict[str, int] = {}
    expected: dict[int, int | None] = {}
    ts = int(time.time() * 1000) - 3_600_000
    for i in range(EVENTS):
        customer = f"c{(i * 5) % CUSTOMERS}"  # profiles (every 7th) and payments cover every customer
        ts += 10 if i % 13 else 0  # now and then a profile and a payment of the same millisecond
        if i % 7 == 0:
            versions[customer] = versions.get(customer, 0) + 1
            records.append(("profiles", customer, versions[customer], ts))
        else:
            records.append(("payments", customer, i, ts))
            expected[i] = versions.get(customer)
    return records, expected


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_join_over_a_backlog_equals_the_live_join_while_partitions_move(kafka, tmp_path, guarantee):
    app_id, prefix = unique("backlog"), unique("j") + "-"
    await create_topics(kafka.bootstrap, [f"{prefix}payments", f"{prefix}enriched"])
    await create_topics(kafka.bootstrap, [f"{prefix}profiles"], config={"cleanup.policy": "compact"})
    records, expected = backlog()
    assert sum(v is not None for v in expected.values()) > 0.95 * len(expected)
    assert len(set(expected.values())) > 50, "the profiles change while payments flow"
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        for topic, customer, number, ts in records:  # the whole backlog before any worker starts
            await producer.send(f"{prefix}{topic}", orjson.dumps(number), key=orjson.dumps(customer),
                                timestamp_ms=ts)
        await producer.flush()
    finally:
        await producer.stop()
    env = {"ITEST_APP": app_id, "ITEST_PREFIX": prefix, "ITEST_GUARANTEE": guarantee, "ITEST_DELAY": "0.002"}

    def worker(name: str) -> WorkerProcess:
        return WorkerProcess("tests.integration.join_apps:app", kafka.url,
                             {**env, "ENGINE_DATA_DIR": str(tmp_path / name)}, tmp_path / f"{name}.log")

    first = worker("first")
    second: WorkerProcess | None = None
    out: list[Any] = []

    async def joined() -> tuple[bool, int]:
        nonlocal second
        out[:] = await read_all(kafka.bootstrap, f"{prefix}enriched")
        seen = {orjson.loads(r.value)["id"] for r in out}
        if second is None and len(seen) > len(expected) // 5:
            second = worker("second")  # partitions move while the backlog is processed
        return second is not None and seen >= set(expected), len(seen)

    try:
        await until_done(joined, "every payment joined", workers=[first])
    finally:
        for process in [first, *([second] if second is not None else [])]:
            process.stop()
    assert second is not None
    assert "assigned" in second.output()
    got = [orjson.loads(r.value) for r in out]
    wrong = [(g["id"], g["version"], expected[g["id"]]) for g in got if g["version"] != expected[g["id"]]]
    assert wrong == [], f"{len(wrong)} payments joined another version than their own time's: {wrong[:10]}"
    assert {g["id"] for g in got} == set(expected)
    if guarantee == "exactly_once":
        assert [i for i, n in Counter(g["id"] for g in got).items() if n > 1] == []
