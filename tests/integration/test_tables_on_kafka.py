"""Tables on a real broker: rebuild from the changelog after SIGKILL, tail-only recovery, standby failover.

Processing is at-least-once: after a SIGKILL mid-stream, events processed since the last commit are
processed again, so counts may exceed the ground truth but never fall below it. Exact counts across a
crash need exactly-once checkpoints (a later step); the standby test kills at a checkpointed moment.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

import engine
from engine import testing
from engine.tables.keys import META_PREFIX
from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    committed_to_end,
    consume_until,
    create_topics,
    latest,
    placed_over,
    produce,
    read_all,
    standbys_caught_up,
    unique,
)
from tests.integration.table_apps import make_app

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.tables.state import StateManager

pytestmark = pytest.mark.kafka


def replayed(log: str) -> int:
    return sum(int(n) for n in re.findall(r"recovered \S+: replayed (\d+) records", log))


def worker(kafka_url: str, app_id: str, topic: str, tmp_path, name: str, data_dir, **env) -> WorkerProcess:
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(data_dir), **SHORT_SESSION,
           **env}
    return WorkerProcess("tests.integration.table_apps:app", kafka_url, env, tmp_path / f"{name}.log")


async def feed(bootstrap: str, topic: str, words: list[str]) -> None:
    await produce(bootstrap, topic, [(w, 1) for w in words])


def words_for(prefix: str, count: int, keys: int = 50) -> list[str]:
    return [f"{prefix}{i % keys}" for i in range(count)]


async def test_sigkill_then_rebuild_from_the_changelog_with_no_data_dir(kafka, tmp_path):
    app_id, topic = unique("rebuild"), unique("words")
    changelog = f"{app_id}-counts-changelog"
    await create_topics(kafka.bootstrap, [topic])
    victim = worker(kafka.url, app_id, topic, tmp_path, "victim", tmp_path / "d1", ITEST_DELAY="0.001")
    first, second = words_for("a", 3000), words_for("a", 1000)
    try:
        await victim.wait_for_output("tables ready", 90)
        await feed(kafka.bootstrap, topic, first)
        await consume_until(kafka.bootstrap, changelog, lambda rs: sum(latest(rs).values()) >= 1000)
    finally:
        victim.kill()
    before = latest(await read_all(kafka.bootstrap, changelog))
    assert 0 < sum(before.values()) < 3000, "killed mid-stream"
    total_records = len(await read_all(kafka.bootstrap, changelog))

    app = make_app(app_id, topic=topic)
    settings = app.settings({"broker": kafka.url, "data_dir": str(tmp_path / "empty")})
    rebuilt = engine.Worker(app, settings)
    counts = app.counts  # type: ignore[attr-defined]
    at_recovery: list[dict[str, int]] = []
    assert rebuilt.tables is not None
    restore = rebuilt.tables.restore

    async def restore_and_look(states: Collection[StateManager], until: Any = None) -> None:
        await restore(states, until)  # recovered; the tasks resume their partitions after this
        at_recovery.append({counts.key_codec.decode(key): counts.value_codec.decode(value)
                            for state in states for _, store in state.stores.values()
                            for key, value in store.items() if not key.startswith(META_PREFIX)})

    rebuilt.tables.restore = restore_and_look  # type: ignore[method-assign]
    await rebuilt.start()
    try:
        await testing.eventually(lambda: bool(at_recovery), 60)
        assert at_recovery[0] == before, "rebuilt from the changelog, equal to the state before"
        assert sum(rebuilt.tables.replayed.values()) == total_records
        await feed(kafka.bootstrap, topic, second)
        truth = Counter(first + second)
        await testing.eventually(lambda: all(counts[w] >= n for w, n in truth.items()), 90)
        assert sum(v for _, v in counts.items()) >= sum(truth.values())
    finally:
        rebuilt.request_stop()
        await rebuilt.run_until_stopped()


async def test_restart_with_the_data_dir_replays_only_the_tail(kafka, tmp_path):
    app_id, topic = unique("tail"), unique("words")
    changelog = f"{app_id}-counts-changelog"
    await create_topics(kafka.bootstrap, [topic])
    data_dir = tmp_path / "data"
    first = worker(kafka.url, app_id, topic, tmp_path, "first", data_dir, ITEST_DELAY="0.001")
    try:
        await first.wait_for_output("tables ready", 90)
        await feed(kafka.bootstrap, topic, words_for("b", 4000, keys=200))
        # Several checkpoints before the kill (each writes at most one record per key, 200 keys).
        await consume_until(kafka.bootstrap, changelog,
                            lambda rs: sum(latest(rs).values()) >= 2000 and len(rs) > 200)
    finally:
        first.kill()
    records = len(await read_all(kafka.bootstrap, changelog))
    again = worker(kafka.url, app_id, topic, tmp_path, "again", data_dir)
    try:
        await again.wait_for_output("tables ready", 90)
        tail = replayed(again.output())
        # At most the checkpoint the kill interrupted (flushed to the changelog, not yet to the store):
        # one record per key, 200 keys.
        assert tail <= 200, f"replayed {tail} of {records} changelog records"
        assert tail < records
        await consume_until(kafka.bootstrap, changelog,
                            lambda rs: all(v >= 20 for v in latest(rs).values())
                            and len(latest(rs)) == 200)
    finally:
        assert again.terminate() == 0, again.output()[-3000:]


async def test_standby_takes_over_with_only_the_tail_and_counts_are_exact(kafka, tmp_path):
    app_id, topic = unique("standby"), unique("words")
    changelog = f"{app_id}-counts-changelog"
    await create_topics(kafka.bootstrap, [topic])
    env = {"ENGINE_STANDBY_REPLICAS": "1"}
    a = worker(kafka.url, app_id, topic, tmp_path, "a", tmp_path / "a", **env)
    b = worker(kafka.url, app_id, topic, tmp_path, "b", tmp_path / "b", **env)
    first, second = words_for("c", 2000, keys=40), words_for("c", 1000, keys=40)
    try:
        await placed_over([a, b], 4)  # the group settled with both members
        await feed(kafka.bootstrap, topic, first)
        await consume_until(kafka.bootstrap, changelog, lambda rs: sum(latest(rs).values()) == 2000)
        await committed_to_end(kafka.bootstrap, app_id, topic, 4, [a, b])  # the kill comes after a checkpoint
        await standbys_caught_up(b, kafka.bootstrap, changelog)
        b_before = replayed(b.output())
        a.kill()
        await feed(kafka.bootstrap, topic, second)
        truth = Counter(first + second)
        records = await consume_until(kafka.bootstrap, changelog,
                                      lambda rs: latest(rs) == dict(truth), timeout=120)
        assert latest(records) == dict(truth), "exact: the kill came after a checkpoint"
        takeover = replayed(b.output()) - b_before
        assert takeover < 40, f"the standby replayed {takeover} records on failover, not just the tail"
    finally:
        if a.process.poll() is None:
            a.kill()
        assert b.terminate() == 0, b.output()[-3000:]
