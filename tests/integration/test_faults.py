"""Faults as inputs, on a real broker: the broker restarting under an exactly-once worker, an agent stuck on
one event, corrupt stores and a recreated changelog. Each checked against ground truth."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING

import orjson
import pytest

from engine.partitioner import partition_for
from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    committed_to_end,
    consume_until,
    create_topics,
    delete_topic,
    latest,
    produce,
    read_all,
    unique,
    until_done,
)
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import outputs, paced_produce, truth_of, wait_until_complete, words
from tests.kafka.broker import KafkaCluster

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def own_broker() -> Iterator[KafkaCluster]:
    """A broker of this module's own, since tests here restart it."""
    with KafkaCluster(1) as cluster:
        yield cluster


def worker(url: str, tmp_path, name: str, **env: str) -> WorkerProcess:
    env = {"ENGINE_DATA_DIR": str(tmp_path / name), **env}
    return WorkerProcess("tests.integration.rebalance_apps:app", url, env, tmp_path / f"{name}.log")


async def test_an_exactly_once_worker_rides_out_a_broker_restart(own_broker, tmp_path):
    """The single broker restarted cleanly (SIGTERM), as for an upgrade, while events flow: every count and
    every window exact. Not killed: a single node killed is elected back to its partitions by an unclean
    election, which can cut transaction markers out of their logs, and no client can be exact across that
    (docs/rebalances-and-faults.md, "The broker restarting"); a node of the 3-node cluster killed is
    test_restart_storm's."""
    app_id, topic = unique("restart"), unique("words")
    await create_topics(own_broker.bootstrap, [topic])
    events = words(12_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": "exactly_once"}
    one = worker(own_broker.url, tmp_path, "one", **env)
    restarting: list[asyncio.Future[None]] = []
    try:
        await one.wait_for_output("tables ready", 90)

        def restart() -> None:
            restarting.append(asyncio.ensure_future(asyncio.to_thread(own_broker.restart, 1, crash=False)))

        await paced_produce(own_broker.bootstrap, topic, events, rate=800, at={0.4: restart})
        await asyncio.gather(*restarting)
        counts, closes = await wait_until_complete(own_broker.bootstrap, app_id, events, timeout=180,
                                                   workers=[one])
        assert one.process.poll() is None, "the worker must survive the broker's restart"
    finally:
        assert one.terminate(timeout=60) == 0, one.output()[-3000:]
    check(events, counts, closes, exact=True)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_an_agent_stuck_on_one_event_holds_back_only_its_own_partition(kafka, tmp_path, guarantee):
    """Under exactly-once the stuck task's transaction stays open while the others commit (the guarantee
    never weakens); stuck past the transaction timeout (6 s here), the broker aborts it and the task is
    rewound to its last commit: still exact."""
    app_id, topic = unique("stuck"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(4_000)
    stuck_for = 14  # past the transaction timeout and the broker's check of it (each second in tests)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_CONCURRENCY": "4", "ITEST_GUARANTEE": guarantee,
           "ITEST_STUCK": f"0:50:{stuck_for}", "ENGINE_STUCK_EVENT_WARNING": "4", "ITEST_ECHO": "1",
           "ENGINE_TRANSACTION_TIMEOUT": "6",
           "ENGINE_MAILBOX_SIZE": "100"}  # partition 0 fills its mailbox long before the agent moves on
    one = worker(kafka.url, tmp_path, "one", **env)
    try:
        await one.wait_for_output("tables ready", 90)
        started = time.monotonic()
        await paced_produce(kafka.bootstrap, topic, events, rate=2000)
        truth_counts, _ = truth_of(events)
        elsewhere = {k: n for k, n in truth_counts.items() if partition_for(k.encode(), 4) != 0}
        stuck = {k: n for k, n in truth_counts.items() if k not in elsewhere}

        async def others_done() -> bool:
            counts, _ = await outputs(kafka.bootstrap, app_id)
            return all(counts.get(k, 0) >= n for k, n in elsewhere.items())

        while not await others_done():
            assert time.monotonic() - started < stuck_for - 5, "the other partitions waited for the stuck one"
            await asyncio.sleep(0.5)
        counts, _ = await outputs(kafka.bootstrap, app_id)
        assert any(counts.get(k, 0) < n for k, n in stuck.items()), "partition 0 is still held back"
        await one.wait_for_output(f"agent count has been processing {topic}[0]@50 for", 10)
        if guarantee == "exactly_once":  # the stuck event sent its output before it sat down
            stuck_record = next(r for r in await read_all(kafka.bootstrap, topic) if (r.partition, r.offset)
                                == (0, 50))
            stuck_output = (stuck_record.key.decode(), orjson.loads(stuck_record.value)["i"])
            echoed = await read_all(kafka.bootstrap, f"{app_id}-echo")
            assert time.monotonic() - started < stuck_for, "still inside the stuck event"
            assert stuck_output not in {(r.key.decode(), int(r.value)) for r in echoed}, (
                "the output of an unfinished event was committed (the checkpoint went at-least-once)")
        counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, timeout=90, workers=[one])
    finally:
        assert one.terminate(timeout=60) == 0, one.output()[-3000:]
    check(events, counts, closes, exact=guarantee == "exactly_once")
    echoed = await read_all(kafka.bootstrap, f"{app_id}-echo")
    echoes = Counter((r.key.decode(), int(r.value)) for r in echoed)
    assert set(echoes) == {(key, v["i"]) for key, v in events}, "every event's output"
    if guarantee == "exactly_once":
        assert {e: n for e, n in echoes.items() if n > 1} == {}, "exactly once"


async def test_a_record_that_blocks_the_loop_is_named_and_set_aside_after_its_partition_was_lost(
        kafka, tmp_path):
    """The agent blocks the event loop (time.sleep past the group's session timeout) on one record, every
    time: the loop monitor names the record and the blocking line; the worker loses the partition, the
    record comes back (here or on the other worker), and once one worker lost the partition twice during it,
    it goes to the DLQ saying why; everything else is processed."""
    app_id, topic = unique("poison"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(2_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_CONCURRENCY": "4", "ITEST_BLOCK": "1:40:6",
           "ENGINE_POISON_AFTER_LOSSES": "2", **SHORT_SESSION}
    one, two = worker(kafka.url, tmp_path, "one", **env), worker(kafka.url, tmp_path, "two", **env)
    try:
        await one.wait_for_output("tables ready", 90)
        await two.wait_for_output("tables ready", 90)
        await paced_produce(kafka.bootstrap, topic, events, rate=1000)
        dead = await consume_until(kafka.bootstrap, f"{app_id}-count-dlq", lambda rs: len(rs) >= 1,
                                   timeout=240)
        truth_counts, _ = truth_of(events)
        source = await read_all(kafka.bootstrap, topic)
        blocked = next(r for r in source if (r.partition, r.offset) == (1, 40))
        expected = {**truth_counts, blocked.key.decode(): truth_counts[blocked.key.decode()] - 1}
        async def processed() -> tuple[bool, int]:
            counts, _ = await outputs(kafka.bootstrap, app_id)
            return all(counts.get(k, 0) >= n for k, n in expected.items()), sum(counts.values())

        await until_done(processed, "the other records being processed", workers=(one, two))
    finally:
        for process in (one, two):
            assert process.terminate(timeout=60) == 0, process.output()[-3000:]
    headers = dict(dead[0].headers)
    assert (dead[0].key, dead[0].value) == (blocked.key, blocked.value)
    assert headers["engine-error-type"] == b"PoisonRecord"
    assert headers["engine-offset"] == b"40"
    assert (b"was taken from this worker 2 times while agent 'count' processed offset 40"
            in headers["engine-error"])
    logs = one.output() + two.output()
    assert f"agent count at {topic}[1]@40" in logs
    assert "time.sleep(BLOCK[2])" in logs, "the blocking line is named"


async def test_a_record_slower_than_the_transaction_timeout_is_set_aside_and_the_rest_is_exact(
        kafka, tmp_path):
    """Exactly-once, the agent awaits (without blocking the loop) longer than the transaction timeout on one
    record, every time: its task's transaction stays open meanwhile, the broker aborts it, and the task is
    fenced and rewound when the event ends. Once that happened twice during the same record it goes to the
    DLQ naming the transaction timeout; every other event's output is there exactly once, and no send's
    failure is left for asyncio to report as never retrieved."""
    app_id, topic = unique("slow"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    events = words(2_000)
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": "exactly_once", "ITEST_ECHO": "1",
           "ITEST_SLOW": "1:40:7", "ENGINE_TRANSACTION_TIMEOUT": "3", "ENGINE_POISON_AFTER_LOSSES": "2"}
    one = worker(kafka.url, tmp_path, "one", **env)
    try:
        await one.wait_for_output("tables ready", 90)
        await paced_produce(kafka.bootstrap, topic, events, rate=2000)
        dead = await consume_until(kafka.bootstrap, f"{app_id}-count-dlq", lambda rs: len(rs) >= 1,
                                   timeout=90, workers=[one])
        source = await read_all(kafka.bootstrap, topic)
        slow = next(r for r in source if (r.partition, r.offset) == (1, 40))
        truth_counts, _ = truth_of(events)
        expected = {**truth_counts, slow.key.decode(): truth_counts[slow.key.decode()] - 1}

        async def processed() -> tuple[bool, int]:
            counts, _ = await outputs(kafka.bootstrap, app_id)
            return all(counts.get(k, 0) >= n for k, n in expected.items()), sum(counts.values())

        await until_done(processed, "the other records being processed", workers=[one])
        await committed_to_end(kafka.bootstrap, app_id, topic, 4, workers=[one])
        counts, _ = await outputs(kafka.bootstrap, app_id)
        echoed = await read_all(kafka.bootstrap, f"{app_id}-echo")
    finally:
        assert one.terminate(timeout=60) == 0, one.output()[-3000:]
    assert len(dead) == 1
    headers = dict(dead[0].headers)
    assert (dead[0].key, dead[0].value) == (slow.key, slow.value)
    assert headers["engine-error-type"] == b"PoisonRecord"
    assert headers["engine-offset"] == b"40"
    assert b"transaction timeout" in headers["engine-error"], headers["engine-error"]
    assert {k: (n, expected.get(k)) for k, n in counts.items() if n != expected.get(k)} == {}, "exactly once"
    slow_output = (slow.key.decode(), orjson.loads(slow.value)["i"])
    echoes = Counter((r.key.decode(), int(r.value)) for r in echoed)
    assert set(echoes) == {(key, v["i"]) for key, v in events} - {slow_output}, "every other event's output"
    assert {e: n for e, n in echoes.items() if n > 1} == {}, "each once"
    output = one.output()
    assert "Future exception was never retrieved" not in output
    # Quiet at the faults: the one ERROR is the dead letter's; each rewind of the slow record's task is one
    # WARNING naming its partition, and every WARNING is about that task (nothing else was disturbed).
    errors = one.records("ERROR")
    assert len(errors) == 1, errors
    assert "; record sent to" in errors[0], errors
    warnings = one.records("WARNING")
    assert len([w for w in warnings if "rewinding " in w]) == 2, "\n".join(warnings)  # (the poison limit)
    assert all(f"{topic}[1]" in w or "tasks [1]" in w for w in warnings), "\n".join(warnings)


async def count_through(kafka, tmp_path, app_id: str, topic: str, name: str, data_dir: str,
                        words: list[str], expected: Counter[str]) -> WorkerProcess:
    """Run a counting worker, feed it `words`, wait until its changelog holds `expected`, stop it."""
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(tmp_path / data_dir)}
    process = WorkerProcess("tests.integration.table_apps:app", kafka.url, env, tmp_path / f"{name}.log")
    try:
        await process.wait_for_output("tables ready", 90)
        await produce(kafka.bootstrap, topic, [(w, 1) for w in words])
        changelog = f"{app_id}-counts-changelog"
        await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == dict(expected), timeout=90)
    finally:
        assert process.terminate() == 0, process.output()[-3000:]
    return process


async def test_a_store_with_a_garbled_sst_is_rebuilt_and_counts_stay_exact(kafka, tmp_path):
    app_id, topic = unique("garbled"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    first = [f"k{i % 300}" for i in range(6000)]
    await count_through(kafka, tmp_path, app_id, topic, "first", "data", first, Counter(first))
    garbled = 0
    for store in (tmp_path / "data" / app_id / "counts").iterdir():
        for sst in store.glob("*.sst"):
            data = bytearray(sst.read_bytes())
            if len(data) > 1000:
                data[len(data) // 3:len(data) // 3 + 16] = b"\0" * 16
                sst.write_bytes(bytes(data))
                garbled += 1
    assert garbled, "the stores were flushed to SST files on stop"
    second = [f"k{i % 300}" for i in range(600)]
    again = await count_through(kafka, tmp_path, app_id, topic, "again", "data", second,
                                Counter(first + second))
    assert "corrupt" in again.output()
    assert "rebuilding" in again.output()


async def test_a_store_of_a_deleted_and_recreated_changelog_is_rebuilt(kafka, tmp_path):
    """The new changelog grows past the old store's offset before the old store's worker comes back: only
    the topic id tells the logs apart."""
    app_id, topic = unique("recreated"), unique("words")
    await create_topics(kafka.bootstrap, [topic])
    old = [f"a{i % 20}" for i in range(300)]
    await count_through(kafka, tmp_path, app_id, topic, "old", "kept", old, Counter(old))
    changelog = f"{app_id}-counts-changelog"
    await delete_topic(kafka.bootstrap, changelog)
    # Another worker, with no stores, starts over: a new changelog, longer than the old one ever was.
    fresh = [f"b{i % 600}" for i in range(1800)]
    await count_through(kafka, tmp_path, app_id, topic, "fresh", "other", fresh, Counter(fresh))
    more = [f"b{i % 600}" for i in range(600)]
    back = await count_through(kafka, tmp_path, app_id, topic, "back", "kept", more, Counter(fresh + more))
    assert "reflects another topic of that name" in back.output()
