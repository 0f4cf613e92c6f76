"""A changelog trimmed under a stopped worker's stores (DeleteRecords, as retention would): the worker comes
back, follows (standby, warm-up) or restores them, and neither waits for offsets that will not come nor reads
on from the log's new start as if nothing were missing. Each store is rebuilt from what the log holds, with
a WARNING naming the table, the partition and the gap; its contents are then exactly what the log says.
The same while a standby follows its changelog live (its worker frozen within its session). An incremental
export whose changes were deleted as it set out to read them does a full export instead."""

from __future__ import annotations

import signal
from collections import Counter
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

import engine
from engine.errors import ChangelogGone
from engine.export.lake import changed_keys
from engine.stores import open_store_backend
from engine.tables.keys import META_PREFIX
from engine.transport import transport_for
from tests.integration.helpers import (
    SHORT_SESSION,
    WorkerProcess,
    consume_until,
    create_topics,
    latest,
    placed_over,
    produce,
    read_all,
    standbys_caught_up,
    unique,
    until_done,
    worker_status,
)
from tests.integration.table_apps import make_app

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def worker(kafka_url: str, app_id: str, topic: str, tmp_path: Path, name: str,
           data_dir: Path, session: Mapping[str, str] = SHORT_SESSION) -> WorkerProcess:
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ENGINE_DATA_DIR": str(data_dir),
           "ENGINE_STANDBY_REPLICAS": "1", **session}
    return WorkerProcess("tests.integration.table_apps:app", kafka_url, env, tmp_path / f"{name}.log")


Held = dict[int, tuple[int | None, dict[str, int]]]


def stores_on_disk(kafka_url: str, app_id: str, topic: str, data_dir: Path) -> Held:
    """Each partition's store of the counts table in a stopped worker's data dir: its changelog offset and
    what it holds."""
    app = make_app(app_id, topic=topic)
    settings = app.settings({"broker": kafka_url, "data_dir": str(data_dir)})
    counts: Any = app.counts  # type: ignore[attr-defined]
    backend = open_store_backend(settings.store, settings.app_dir, settings.store_memory)
    found = {}
    for number in range(PARTITIONS):
        store = backend.open("counts", number)
        try:
            found[number] = (store.changelog_offset(),
                             {counts.key_codec.decode(k): counts.value_codec.decode(v)
                              for k, v in store.items() if not k.startswith(META_PREFIX)})
        finally:
            store.close()
    return found


async def end_offsets(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        return ends
    finally:
        await consumer.stop()


async def counted_with_standbys(kafka: Any, topic: str, changelog: str, a: WorkerProcess, b: WorkerProcess,
                                words: list[str]) -> None:
    """Once the two workers hold every partition: `words` counted into the changelog, and b's standbys
    caught up with it."""
    await placed_over([a, b], PARTITIONS)
    await produce(kafka.bootstrap, topic, [(w, 1) for w in words])
    await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == dict(Counter(words)),
                        workers=[a, b])
    await standbys_caught_up(b, kafka.bootstrap, changelog)


async def trim(bootstrap: str, below: Mapping[TopicPartition, int]) -> None:
    """Delete each partition's records below its offset (DeleteRecords, as retention would), its topic's
    cleanup policy made `compact,delete` first (a compacted-only log refuses DeleteRecords)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"cleanup.policy": "compact,delete"})
                                   for topic in sorted({tp.topic for tp in below})])
        await admin.delete_records({tp: RecordsToDelete(offset) for tp, offset in below.items()})
    finally:
        await admin.close()


async def test_stores_below_a_trimmed_changelog_are_rebuilt_from_what_it_holds_and_say_so(kafka, tmp_path):
    app_id, topic = unique("trimmed"), unique("words")
    changelog = f"{app_id}-counts-changelog"
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)
    a = worker(kafka.url, app_id, topic, tmp_path, "a", tmp_path / "a")
    b = worker(kafka.url, app_id, topic, tmp_path, "b", tmp_path / "b")
    first = [f"c{i % 40}" for i in range(1000)]
    second = [f"c{i % 40}" for i in range(400)]  # while b is stopped
    third = [f"d{i % 20}" for i in range(200)]  # after the trim
    again: WorkerProcess | None = None
    try:
        await counted_with_standbys(kafka, topic, changelog, a, b, first)
        assert b.terminate() == 0, b.output()[-3000:]
        held = stores_on_disk(kafka.url, app_id, topic, tmp_path / "b")
        assert all(offset is not None for offset, _ in held.values()), "b kept a store of every partition"

        await produce(kafka.bootstrap, topic, [(w, 1) for w in second])
        both = dict(Counter(first + second))
        await consume_until(kafka.bootstrap, changelog, lambda rs: latest(rs) == both, workers=[a])
        tps = [TopicPartition(changelog, n) for n in range(PARTITIONS)]
        ends = await end_offsets(kafka.bootstrap, tps)
        await trim(kafka.bootstrap, ends)  # everything written so far, past every store b holds
        cut = {tp.partition: end for tp, end in ends.items()}
        await produce(kafka.bootstrap, topic, [(w, 1) for w in third])
        records = await consume_until(kafka.bootstrap, changelog,
                                      lambda rs: latest(rs) == dict(Counter(third)), workers=[a])
        truth = latest(records)  # the changelog's latest value of each key whose latest record survived
        assert truth == dict(Counter(third)), "the trim left none of the c keys"
        last = {n: max(r.offset for r in records if r.partition == n) + 1 for n in range(PARTITIONS)}

        again = worker(kafka.url, app_id, topic, tmp_path, "again", tmp_path / "b")

        async def caught_up() -> tuple[bool, Any]:  # every store of the worker, standby or active
            status = await worker_status(again)
            if status is None:
                return False, None
            positions = status["store_positions"]
            behind = {n: last[n] - positions.get(str(n), 0) for n in range(PARTITIONS)}
            return all(n <= 0 for n in behind.values()), behind

        await until_done(caught_up, "the restarted worker's stores catching up", stall=30, workers=[again])
        assert again.terminate() == 0, again.output()[-3000:]
        warnings = [line for line in again.output().splitlines() if "records deleted under it" in line]
        for n in range(PARTITIONS):
            stored = held[n][0]
            assert stored is not None
            line = next((w for w in warnings if f"{changelog}[{n}]" in w), None)
            assert line is not None, f"no warning for partition {n}: {again.output()[-3000:]}"
            assert "WARNING" in line
            assert "table counts" in line
            assert f"now starts at {cut[n]}" in line
            assert f"a gap of {cut[n] - stored - 1} offsets [{stored + 1}, {cut[n]})" in line
        rebuilt = stores_on_disk(kafka.url, app_id, topic, tmp_path / "b")
        held_now: dict[str, int] = {}
        for _, contents in rebuilt.values():
            held_now.update(contents)
        assert held_now == truth, "b's stores hold exactly what the trimmed changelog holds"
        assert truth == latest(await read_all(kafka.bootstrap, changelog))
        assert a.terminate() == 0, a.output()[-3000:]
    finally:
        for w in (a, b, again):
            if w is not None and w.process.poll() is None:
                w.kill()


@pytest.mark.both_protocols
async def test_a_changelog_trimmed_under_a_standby_that_follows_it_rebuilds_it_and_says_so(kafka, tmp_path):
    """A standby following its changelog live falls behind (its worker frozen a few seconds, within its
    session: it stays a member, its follower keeps its position), and the records past that position are
    deleted meanwhile: the follower's next fetch (OffsetOutOfRange) rebuilds the store from what the log
    holds, with the WARNING naming the gap, and follows on."""
    app_id, topic = unique("trimfollow"), unique("words")
    changelog = f"{app_id}-counts-changelog"
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)
    # (a session long enough that b, frozen through the waves and the trim, stays a member on a busy machine)
    session = {"ENGINE_SESSION_TIMEOUT": "30"}
    a, b = (worker(kafka.url, app_id, topic, tmp_path, name, tmp_path / name, session) for name in ("a", "b"))
    first = [f"c{i % 40}" for i in range(1000)]
    second = [f"c{i % 40}" for i in range(400)]  # while b is frozen, in two waves (below)
    third = [f"d{i % 20}" for i in range(200)]  # once it wakes
    try:
        await counted_with_standbys(kafka, topic, changelog, a, b, first)
        status = await worker_status(b)
        assert status is not None
        standby = sorted(status["standby"])
        partition_of = {r.key.decode(): r.partition for r in await read_all(kafka.bootstrap, changelog)}
        followed = {key for key, n in partition_of.items() if n in standby}  # (a's: it writes them alone)
        assignments = b.output().count("assignment:")
        b.process.send_signal(signal.SIGSTOP)
        try:
            # Each wave written by its own checkpoint of a's: a fetch b had in flight as it froze can return
            # the first wave's records at most, so the trim past the second is past b's position.
            for end in (200, 400):
                await produce(kafka.bootstrap, topic, [(w, 1) for w in second[end - 200:end]])
                sent = Counter(first + second[:end])
                await consume_until(kafka.bootstrap, changelog, lambda rs, sent=sent: all(
                    latest(rs).get(key) == sent[key] for key in followed), workers=[a])
            ends = await end_offsets(kafka.bootstrap, [TopicPartition(changelog, n) for n in standby])
            await trim(kafka.bootstrap, ends)
        finally:
            b.process.send_signal(signal.SIGCONT)
        cut = {tp.partition: end for tp, end in ends.items()}
        await produce(kafka.bootstrap, topic, [(w, 1) for w in third])
        await consume_until(kafka.bootstrap, changelog, lambda rs: all(
            latest(rs).get(key) == n for key, n in Counter(third).items()), workers=[a, b])
        await standbys_caught_up(b, kafka.bootstrap, changelog)
        status = await worker_status(b)
        assert status is not None
        assert sorted(status["standby"]) == standby, "b stayed a member, with the same standbys"
        assert b.output().count("assignment:") == assignments, "its stores followed on, never set up again"
        assert b.terminate() == 0, b.output()[-3000:]
        warnings = [line for line in b.output().splitlines() if "records deleted under it" in line]
        for n in standby:
            line = next((w for w in warnings if f"{changelog}[{n}]" in w), None)
            assert line is not None, f"no warning for partition {n}: {b.output()[-3000:]}"
            assert "WARNING" in line
            assert "table counts" in line
            assert f"now starts at {cut[n]}" in line
        held = stores_on_disk(kafka.url, app_id, topic, tmp_path / "b")
        records = await read_all(kafka.bootstrap, changelog)
        for n in standby:  # the latest surviving record of each key: the c keys' are gone
            assert held[n][1] == latest(r for r in records if r.partition == n), f"partition {n}"
        assert a.terminate() == 0, a.output()[-3000:]
    finally:
        for w in (a, b):
            if w.process.poll() is None:
                w.kill()


class TrimmedWhileRead:
    """A real reader whose partitions lose their records below `first` on the broker (DeleteRecords, as
    retention would) right after it was told where they start: before it seeks and fetches."""

    def __init__(self, inner: Any, bootstrap: str, first: int) -> None:
        self.inner, self.bootstrap, self.first = inner, bootstrap, first
        self.trimmed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def offsets(self, tps: Any) -> Any:
        bounds = await self.inner.offsets(tps)
        if not self.trimmed:
            self.trimmed = True
            await trim(self.bootstrap, {TopicPartition(*tp): self.first for tp in tps})
        return bounds


class Trimming:
    """A transport whose readers are TrimmedWhileRead."""

    def __init__(self, inner: Any, bootstrap: str, first: int) -> None:
        self.inner, self.args = inner, (bootstrap, first)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def consumer(self, **options: Any) -> TrimmedWhileRead:
        return TrimmedWhileRead(self.inner.consumer(**options), *self.args)


@pytest.mark.parametrize(("last", "said"), [(9, "after offset 9"), (None, "from its start")])
async def test_an_incremental_export_whose_changelog_is_trimmed_while_it_reads_asks_for_a_full_one(
        kafka, monkeypatch, last, said):
    """The last export was at offset 9 (or had nothing of the partition); offsets 10-19 set k0-k9 to 2, then
    20-29 set k5-k14 to 3, and the records below 20 are deleted once the export's reader learned where the
    log starts. Read on from the log's new start, the export would miss that k0-k4 changed and leave their
    old values in the lake (or leave them out): it must do a full one."""
    app = engine.App(unique("trimexport"), broker=kafka.url)
    table = app.Table("counts", key_type=str, value_type=int)
    changelog = table.changelog_topic.name
    await create_topics(kafka.bootstrap, [changelog], partitions=1,
                        config={"cleanup.policy": "compact,delete"})
    log = [(f"k{i}", 1) for i in range(10)] + [(f"k{i}", 2) for i in range(10)]
    await produce(kafka.bootstrap, changelog, log + [(f"k{i}", 3) for i in range(5, 15)])
    real = transport_for
    monkeypatch.setattr("engine.export.lake.transport_for",
                        lambda settings, *rest: Trimming(real(settings, *rest), kafka.bootstrap, 20))
    snapshot = SimpleNamespace(table=table, views={0: SimpleNamespace(changelog_offset=lambda: 29)})
    with pytest.raises(ChangelogGone, match=f"no longer holds the records {said}"):
        await changed_keys(snapshot, {0: last}, app.settings())  # type: ignore[arg-type]
