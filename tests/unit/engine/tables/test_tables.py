"""Tables on the in-memory broker: counting, coalescing, recovery, ownership, joins, global and source
tables, standbys. RocksDB stores live in tmp_path where persistence matters."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass

import pytest

import engine
from engine import testing
from engine.errors import KeyNotInPartition
from engine.events import TP


def count_app(url: str, **settings) -> tuple[engine.App, engine.Topic, engine.Table]:
    app = engine.App("tc", broker=url, **settings)
    words = app.topic("words", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str)

    @app.agent(words, concurrency=2)
    async def count(stream):
        async for word, n in stream.items():
            counts[word] += n

    return app, words, counts


def changelog(url: str, topic: str) -> list:
    return [r for p in testing.broker_for(url).topics[topic] for r in p]


async def test_counts_are_coalesced_per_checkpoint():
    url = testing.memory_url()
    app, words, counts = count_app(url, store="memory://")
    expected = Counter({f"w{i % 50}": 0 for i in range(50)})
    async with testing.running(app, commit_interval=0.2):
        for i in range(5000):
            word = f"w{i % 50}"
            expected[word] += 1
            await words.send(key=word, value=1)
        await testing.eventually(lambda: dict(counts.items()) == dict(expected))
        await asyncio.sleep(0.3)
    records = changelog(url, "tc-counts-changelog")
    assert 50 <= len(records) <= 50 * 10, f"{len(records)} changelog records for 50 keys"
    latest = {r.key: int(r.value) for r in records}
    assert latest == {k.encode(): v for k, v in expected.items()}


async def test_restart_with_the_same_rocksdb_stores_replays_nothing(tmp_path):
    url = testing.memory_url()
    app, words, counts = count_app(url, data_dir=str(tmp_path))
    async with testing.running(app) as worker:
        for i in range(300):
            await words.send(key=f"w{i % 7}", value=1)
        await testing.eventually(lambda: sum(v for _, v in counts.items()) == 300)
    assert sum(worker.tables.replayed.values()) == 0
    app2, _words2, counts2 = count_app(url, data_dir=str(tmp_path))
    async with testing.running(app2) as worker2:
        await testing.eventually(lambda: len(counts2.active) == 4)
        assert sum(worker2.tables.replayed.values()) == 0, "stores were current: nothing to replay"
        assert dict(counts2.items()) == {f"w{i}": 300 // 7 + (1 if i < 300 % 7 else 0) for i in range(7)}


async def test_restart_without_stores_rebuilds_from_the_changelog(tmp_path):
    url = testing.memory_url()
    app, words, counts = count_app(url, data_dir=str(tmp_path / "first"))
    async with testing.running(app):
        for i in range(200):
            await words.send(key=f"w{i % 9}", value=2)
        await testing.eventually(lambda: sum(v for _, v in counts.items()) == 400)
        before = dict(counts.items())
    app2, words2, counts2 = count_app(url, data_dir=str(tmp_path / "empty"))
    async with testing.running(app2) as worker2:
        await testing.eventually(lambda: len(counts2.active) == 4)
        assert dict(counts2.items()) == before
        assert sum(worker2.tables.replayed.values()) == len(changelog(url, "tc-counts-changelog"))
        await words2.send(key="w0", value=5)
        await testing.eventually(lambda: counts2["w0"] == before["w0"] + 5)


async def count_forty(tmp_path) -> str:
    """Count 40 words into RocksDB stores in tmp_path on a new memory broker; returns its URL."""
    url = testing.memory_url()
    app, words, counts = count_app(url, data_dir=str(tmp_path))
    async with testing.running(app):
        for i in range(40):
            await words.send(key=f"w{i % 4}", value=1)
        await testing.eventually(lambda: sum(v for _, v in counts.items()) == 40)
    return url


async def test_store_ahead_of_its_changelog_is_rebuilt(tmp_path):
    """A store whose offset the log does not have (the topic was recreated) is rebuilt, not trusted."""
    url = await count_forty(tmp_path)
    broker = testing.broker_for(url)
    for log in broker.topics["tc-counts-changelog"]:
        log.clear()  # the changelog is gone: every store is now ahead of it
    app2, _words2, counts2 = count_app(url, data_dir=str(tmp_path))
    async with testing.running(app2):
        await testing.eventually(lambda: len(counts2.active) == 4)
        assert dict(counts2.items()) == {}


async def test_store_of_a_recreated_changelog_is_rebuilt_even_once_the_new_log_is_longer(tmp_path):
    """Offsets cannot tell: the new log has grown past the store's offset. The topic id can."""
    url = await count_forty(tmp_path)
    broker = testing.broker_for(url)
    changelog_topic = "tc-counts-changelog"
    stored = max(r.offset for r in changelog(url, changelog_topic))
    broker.delete_topic(changelog_topic)
    broker.create_topic(changelog_topic, 4, {"cleanup.policy": "compact"})
    for i in range(4 * (stored + 10)):  # every partition of the new log is longer than any old store
        broker.append(changelog_topic, f"x{i % 8}".encode(), b"1", (), i % 4)
    app2, _words2, counts2 = count_app(url, data_dir=str(tmp_path))
    async with testing.running(app2):
        await testing.eventually(lambda: len(counts2.active) == 4)
        assert dict(counts2.items()) == {f"x{i}": 1 for i in range(8)}


async def test_deletes_are_tombstones():
    url = testing.memory_url()
    app = engine.App("td", broker=url, store="memory://")
    commands = app.topic("commands", key_type=str, value_type=str)
    state = app.Table("state", key_type=str, value_type=str)

    @app.agent(commands)
    async def apply(stream):
        async for key, command in stream.items():
            if command == "delete":
                del state[key]
            else:
                state[key] = command

    async with testing.running(app):
        await commands.send(key="a", value="one")
        await testing.eventually(lambda: "a" in state)
        await asyncio.sleep(0.1)
        await commands.send(key="a", value="delete")
        await testing.eventually(lambda: "a" not in state)
        await asyncio.sleep(0.1)
    records = changelog(url, "td-state-changelog")
    assert [(r.key, r.value) for r in records] == [(b"a", b"one"), (b"a", None)]


async def test_writing_another_partitions_key_fails_and_says_group_by():
    url = testing.memory_url()
    app = engine.App("tk", broker=url, store="memory://")
    events = app.topic("events", key_type=str, value_type=str)
    table = app.Table("by-value", key_type=str, default=int)
    errors: list[str] = []

    @app.agent(events, on_error="dlq")
    async def wrong(stream):
        async for value in stream:
            try:
                table[value] += 1
            except KeyNotInPartition as exc:
                errors.append(str(exc))

    async with testing.running(app):
        keys = [f"k{i}" for i in range(20)]
        for key in keys:
            await events.send(key=key, value=f"other-{key}")
        await testing.eventually(lambda: len(errors) + sum(v for _, v in table.items()) == 20)
    assert errors, "some values hash to another partition than their event"
    assert "re-key the stream with group_by(...)" in errors[0]


@dataclass
class Payment:
    customer: str
    amount: float


async def test_joins_with_a_global_table_over_a_source_topic():
    url = testing.memory_url()
    app = engine.App("tj", broker=url, store="memory://")
    customers = app.topic("customers", key_type=str, value_type=str)
    payments = app.topic("payments", key_type=str, value_type=Payment)
    countries = app.GlobalTable("countries", key_type=str, value_type=str, source_topic=customers)
    inner: list = []
    left: list = []

    @app.agent(payments)
    async def enrich(stream):
        async for payment, country in stream.join(countries, key=lambda p: p.customer):
            inner.append((payment.customer, country))

    @app.agent(app.topic("payments-left", key_type=str, value_type=Payment))
    async def enrich_left(stream):
        async for payment, country in stream.left_join(countries, key=lambda p: p.customer):
            left.append((payment.customer, country))

    async with testing.running(app) as worker:
        await customers.send(key="ada", value="FR")
        await customers.send(key="bob", value="NL")
        await testing.eventually(lambda: "ada" in countries and "bob" in countries)
        for name in ("ada", "eve", "bob"):
            await payments.send(key=name, value=Payment(name, 1.0))
            await app.topics["payments-left"].send(key=name, value=Payment(name, 1.0))
        await testing.eventually(lambda: len(inner) == 2 and len(left) == 3)
        assert len(countries.active) == worker.settings.topic_partitions
    assert sorted(inner) == [("ada", "FR"), ("bob", "NL")]
    assert sorted(left, key=lambda x: x[0]) == [("ada", "FR"), ("bob", "NL"), ("eve", None)]


async def test_changelog_is_a_stream_of_updates():
    url = testing.memory_url()
    app = engine.App("tl", broker=url, store="memory://", commit_interval=0.05)
    words = app.topic("words", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    updates: list = []

    @app.agent(words)
    async def count(stream):
        async for word, n in stream.items():
            counts[word] += n

    @app.agent(counts.changelog())
    async def watch(stream):
        async for word, total in stream.items():
            updates.append((word, total))

    async with testing.running(app):
        await words.send(key="x", value=1)
        await testing.eventually(lambda: ("x", 1) in updates)
        await words.send(key="x", value=2)
        await testing.eventually(lambda: ("x", 3) in updates)


async def test_standby_keeps_a_warm_copy_and_takes_over_with_only_the_tail(tmp_path):
    url = testing.memory_url()
    first, words, counts_a = count_app(url, data_dir=str(tmp_path / "a"), standby_replicas=1)
    second, _, counts_b = count_app(url, data_dir=str(tmp_path / "b"), standby_replicas=1)
    async with testing.running(first) as worker_a:
        async with testing.running(second):
            await testing.eventually(lambda: len(counts_a.active) == 2 and len(counts_b.active) == 2)
            for i in range(400):
                await words.send(key=f"w{i % 20}", value=1)
            await testing.eventually(lambda: sum(v for _, v in counts_a.items())
                                     + sum(v for _, v in counts_b.items()) == 400)
            await asyncio.sleep(0.3)  # a checkpoint, and the standby follows it
            standby_of_a = {tp for tp in worker_a.tables.followed}
            assert standby_of_a == {TP("tc-counts-changelog", p)
                                    for p in set(range(4)) - set(counts_a.active)}
            replayed_before = sum(worker_a.tables.replayed.values())
        await testing.eventually(lambda: len(counts_a.active) == 4)
        assert sum(v for _, v in counts_a.items()) == 400
        assert sum(worker_a.tables.replayed.values()) - replayed_before < 40, "only the tail"


async def test_three_workers_keep_exactly_one_standby_per_partition_never_on_its_owner(tmp_path):
    url = testing.memory_url()
    apps = [count_app(url, data_dir=str(tmp_path / name), standby_replicas=1) for name in "abc"]
    async with contextlib.AsyncExitStack() as stack:
        workers = [await stack.enter_async_context(testing.running(app)) for app, _, _ in apps]
        tables = [counts for _, _, counts in apps]

        def placed() -> bool:  # every partition active once, the warm-ups done (2 workers get 1, one 2)
            return sorted(len(t.active) for t in tables) == [1, 1, 2] and sorted(
                p for t in tables for p in t.active) == [0, 1, 2, 3]

        await testing.eventually(placed, 10)
        await testing.eventually(lambda: all(
            {tp.partition for tp in w.tables.followed} == set(w.tasks.assignment.standby)
            and set(w.tasks.standby) == set(w.tasks.assignment.standby)
            for w in workers if w.tables is not None and w.tasks.assignment is not None), 10)
        for number in range(4):
            owner = next(i for i, t in enumerate(tables) if number in t.active)
            changelog = TP("tc-counts-changelog", number)
            holders = [i for i, w in enumerate(workers) if changelog in w.tables.followed]
            assert len(holders) == 1, (number, holders)
            assert holders != [owner]


async def test_stores_of_partitions_that_moved_away_are_deleted_after_the_cleanup_delay(tmp_path):
    url = testing.memory_url()
    first, words, counts_a = count_app(url, data_dir=str(tmp_path / "a"), state_cleanup_delay=0.2)
    second, _, counts_b = count_app(url, data_dir=str(tmp_path / "b"), state_cleanup_delay=0.2)
    stores = tmp_path / "a" / "tc" / "counts"
    async with testing.running(first) as worker_a:
        for i in range(40):
            await words.send(key=f"w{i}", value=1)
        await testing.eventually(lambda: sum(v for _, v in counts_a.items()) == 40)
        await worker_a.checkpoint()
        assert sorted(p.name for p in stores.iterdir()) == ["0", "1", "2", "3"]
        async with testing.running(second):
            # Moved away: closed, kept for a while (the same once the group has settled).
            await testing.eventually(lambda: len(counts_a.active) == 2 and len(counts_b.active) == 2 and {
                tp.partition for tp in worker_a.tables.on_disk} == {0, 1, 2, 3} - set(counts_a.active), 30)
            await asyncio.sleep(0.3)
            worker_a.conductor.consumer.request_rebalance()  # the next assignment cleans up
            await testing.eventually(lambda: sorted(int(p.name) for p in stores.iterdir())
                                     == sorted(counts_a.active), 30)


async def test_table_settings_are_checked():
    with pytest.raises(engine.ConfigError, match="default must be callable"):
        engine.App("x", broker="memory://").Table("t", default=0)
    with pytest.raises(engine.ConfigError, match="setting 'standby_replicas' is -1"):
        engine.App("x", broker="memory://", standby_replicas=-1)
    with pytest.raises(engine.ConfigError, match="setting 'store' is 'redis://'"):
        engine.App("x", broker="memory://", store="redis://")


async def test_the_write_of_a_plus_equals_on_the_events_key_is_refused_once_its_partition_moved(tmp_path):
    from engine.errors import PartitionMigrated
    from engine.events import TP, Event
    from engine.stores import open_store_backend
    from engine.streams.current import current_source
    from engine.tables.partition import TablePartition
    from engine.tasks.leases import Leases

    app = engine.App("pe", broker="memory://")
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    counts.bind(None, 1, {"in": 1})
    counts.active[0] = TablePartition(0, open_store_backend("memory://", tmp_path).open("counts", 0),
                                      counts.value_codec)

    class Record:
        topic, partition, offset, timestamp, key, value, headers = "in", 0, 0, 0, b"k", b"", []

    lease = Leases().grant([TP("in", 0)])[0]
    class Processing:  # what tables read of the stream an agent takes its events from
        current_event: Event | None = None

    token = current_source.set(Processing())
    Processing.current_event = Event(lease.tp, Record(), "k", None, lease)  # type: ignore[arg-type]
    counts["k"] += 1  # the first write from topic `in` (checked for co-partitioning), then the fast path
    counts["k"] += 1
    assert counts["k"] == 2
    value = counts["k"]
    lease.end()  # lost while the event was in progress: its write must not land
    with pytest.raises(PartitionMigrated):
        counts["k"] = value + 1
    Processing.current_event = Event(lease.tp, Record(), "k", None, Leases().grant([TP("in", 0)])[0])  # type: ignore[arg-type]
    counts["k"] = 7  # no read of this event before it: the routed write
    assert counts["k"] == 7
    current_source.reset(token)


async def test_an_untyped_group_by_into_a_typed_table_is_warned_about_at_the_group_by(caplog):
    import logging

    app = engine.App("gb-warn", broker=testing.memory_url(), store="memory://")
    clicks = app.topic("clicks", value_type=dict)  # no key type: JSON keys, and so is group_by's topic
    per_user = app.Table("per-user", default=int, key_type=str, value_type=int)

    @app.agent(clicks)
    async def count(stream):
        async for click in stream.group_by(lambda c: c["user"], name="by-user"):
            per_user[click["user"]] += 1

    with caplog.at_level(logging.WARNING, logger="engine"):
        async with testing.running(app):
            for user in [f"u{i}" for i in range(20)]:
                await clicks.send(value={"user": user})
            await testing.eventually(lambda: any("group_by" in r.getMessage() for r in caplog.records))
    [warning] = [r.getMessage() for r in caplog.records if "group_by" in r.getMessage()]
    assert "'gb-warn-by-user-repartition'" in warning
    assert "group_by(..., key_type=str)" in warning
    assert "windowed" not in warning


def test_a_read_before_the_partition_is_ready_says_to_retry_and_one_of_another_workers_says_whose() -> None:
    from engine.errors import PartitionNotLocal, PartitionNotReady

    app = engine.App("not-ready", broker="memory://unused")
    table = app.Table("counts", default=int, key_type=str)
    worker = object()
    assigned: dict[int, bool] = {}
    table.bind(worker, 2, {}, assigned=lambda: assigned)
    number = table.locate("k")[1]
    with pytest.raises(PartitionNotReady, match=r"no partitions assigned yet .* retry in a moment"):
        table.get("k")
    assigned[number] = False  # assigned, its store being restored
    with pytest.raises(PartitionNotReady, match=r"still restoring .* retry in a moment"):
        table.get("k")
    assigned.clear()
    assigned[1 - number] = True  # only the other partition is here
    with pytest.raises(PartitionNotLocal, match="another worker owns: `await table") as raised:
        table.get("k")
    assert not isinstance(raised.value, PartitionNotReady)
    table.unbind(worker)
