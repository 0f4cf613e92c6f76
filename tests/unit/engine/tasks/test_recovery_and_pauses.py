"""Recovery's replay of a changelog into stores (`replay_to_end`, on the in-memory broker) and the reasons a
partition is paused for (`Pauses`), on their own."""

from __future__ import annotations

import uuid
from typing import Any

from engine.errors import OffsetOutOfRange
from engine.events import TP
from engine.stores.memory import MemoryStoreBackend
from engine.tables.recovery import Progress, replay_to_end
from engine.tasks.pauses import Pauses
from engine.transport import TopicSpec, open_transport


async def changelog(records: dict[int, list[tuple[bytes, bytes | None]]]) -> tuple[Any, str]:
    transport = open_transport(f"memory://{uuid.uuid4().hex}")
    topic = "app-counts-changelog"
    producer = transport.producer()
    await producer.start()
    admin = transport.admin()
    await admin.create_topics([TopicSpec(topic, 2)])
    await admin.close()
    for partition, pairs in records.items():
        for key, value in pairs:
            await producer.send(topic, key, value, partition=partition)
    await producer.flush()
    await producer.stop()
    return transport, topic


async def test_replay_applies_each_partition_from_its_stores_offset_to_the_end():
    transport, topic = await changelog({
        0: [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None)],
        1: [(b"c", b"1"), (b"c", b"2")],
    })
    backend = MemoryStoreBackend(f"memory://{uuid.uuid4().hex}")
    stores = {TP(topic, 0): backend.open("counts", 0), TP(topic, 1): backend.open("counts", 1)}
    stores[TP(topic, 1)].write({b"c": b"1"}, 0)  # this store already holds offset 0
    reader = transport.consumer(group_id=None)
    await reader.start()
    progress = Progress()
    try:
        counts = await replay_to_end(reader, stores, lambda tp: stores[tp], progress, "test")
    finally:
        await reader.stop()
    assert counts == {TP(topic, 0): 4, TP(topic, 1): 1}
    assert dict(stores[TP(topic, 0)].items()) == {b"a": b"2"}, "the tombstone deleted b"
    assert dict(stores[TP(topic, 1)].items()) == {b"c": b"2"}
    assert [s.changelog_offset() for s in stores.values()] == [3, 1]
    assert (progress.applied, progress.remaining) == (5, 0)


async def test_a_store_ahead_of_its_log_is_rebuilt_from_the_start():
    transport, topic = await changelog({0: [(b"a", b"1")], 1: []})
    backend = MemoryStoreBackend(f"memory://{uuid.uuid4().hex}")
    stale = backend.open("counts", 0)
    stale.write({b"gone": b"9"}, 41)  # a log that was truncated, or another one
    stores = {TP(topic, 0): stale}
    rebuilt: list[TP] = []

    def rebuild(tp: TP) -> Any:
        rebuilt.append(tp)
        backend.destroy("counts", 0)
        stores[tp] = backend.open("counts", 0)
        return stores[tp]

    reader = transport.consumer(group_id=None)
    await reader.start()
    try:
        await replay_to_end(reader, dict(stores), rebuild, Progress(), "test")
    finally:
        await reader.stop()
    assert rebuilt == [TP(topic, 0)]
    assert dict(stores[TP(topic, 0)].items()) == {b"a": b"1"}


class EndingInMarkers:
    """A reader that never returns the records from offset `first` on, as aiokafka never returns a
    transaction's commit marker: a changelog written under exactly-once ends in one."""

    def __init__(self, inner: Any, first: int) -> None:
        self.inner, self.first = inner, first

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def getmany(self, timeout: float, max_records: int) -> Any:
        batches = await self.inner.getmany(timeout, max_records)
        return {tp: [r for r in records if r.offset < self.first] for tp, records in batches.items()}


async def test_a_log_that_ends_in_markers_it_never_sees_leaves_nothing_remaining():
    records = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"marker", b"")]
    transport, topic = await changelog({0: records, 1: []})
    backend = MemoryStoreBackend(f"memory://{uuid.uuid4().hex}")
    stores = {TP(topic, 0): backend.open("counts", 0)}
    reader = transport.consumer(group_id=None)
    await reader.start()
    progress = Progress()
    try:
        await replay_to_end(EndingInMarkers(reader, 3), stores, lambda tp: stores[tp], progress, "test")
    finally:
        await reader.stop()
    assert dict(stores[TP(topic, 0)].items()) == {b"a": b"2", b"b": b"1"}
    assert (progress.applied, progress.remaining) == (3, 0)  # (the gauge /metrics and the page show)


class TrimmedUnder:
    """A reader whose partition `tp` loses its records below `first` at the first fetch, once recovery has
    started (DeleteRecords): from then on it tells the new start and, asked for less, raises as aiokafka
    does with auto_offset_reset="none"."""

    def __init__(self, inner: Any, tp: TP, first: int) -> None:
        self.inner, self.tp, self.first, self.start = inner, tp, first, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def offsets(self, tps: Any) -> dict[TP, tuple[int, int]]:
        bounds = await self.inner.offsets(tps)
        return {tp: (max(first, self.start) if tp == self.tp else first, end)
                for tp, (first, end) in bounds.items()}

    async def getmany(self, timeout: float, max_records: int) -> Any:
        self.start = self.first
        position = await self.inner.position(self.tp)
        if position < self.start:
            raise OffsetOutOfRange({self.tp: position})
        return await self.inner.getmany(timeout, max_records)


async def test_records_deleted_under_a_store_being_restored_rebuild_it_from_what_the_log_holds(caplog):
    transport, topic = await changelog({0: [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"),
                                            (b"b", b"2")], 1: []})
    tp = TP(topic, 0)
    backend = MemoryStoreBackend(f"memory://{uuid.uuid4().hex}")
    stores = {tp: backend.open("counts", 0)}
    stores[tp].write({b"a": b"1"}, 0)

    def rebuild(tp: TP) -> Any:
        backend.destroy("counts", 0)
        stores[tp] = backend.open("counts", 0)
        return stores[tp]

    reader = transport.consumer(group_id=None)
    await reader.start()
    progress = Progress()
    try:
        await replay_to_end(TrimmedUnder(reader, tp, 3), dict(stores), rebuild, progress, "test",
                            tables={topic: "counts"})
    finally:
        await reader.stop()
    truth = {b"c": b"1", b"b": b"2"}  # the latest value of each key whose latest record survived
    assert dict(stores[tp].items()) == truth, "a=1 and a=2 are gone with the records deleted"
    assert (progress.applied, progress.remaining) == (2, 0)
    [warning] = [r for r in caplog.records if "records deleted under it" in r.getMessage()]
    assert warning.levelname == "WARNING"
    assert "table counts" in warning.getMessage()
    assert f"{topic}[0] is at changelog offset 0" in warning.getMessage()
    assert "a gap of 2 offsets [1, 3)" in warning.getMessage()


class RecordingConsumer:
    def __init__(self) -> None:
        self.paused: set[TP] = set()
        self.held: set[TP] = set()

    def pause(self, tps: Any) -> None:
        self.paused |= set(tps)

    def resume(self, tps: Any) -> None:
        self.paused -= set(tps)

    def hold_back(self, tps: Any) -> None:
        self.held |= set(tps)

    def let_through(self, tps: Any) -> None:
        self.held -= set(tps)


def test_a_partition_resumes_only_once_every_reason_to_pause_it_is_gone():
    consumer = RecordingConsumer()
    pauses = Pauses(consumer)  # type: ignore[arg-type]
    words0, words1 = TP("words", 0), TP("words", 1)
    pauses.hold([words0, words1], "recovering")
    pauses.hold([words0], "backpressure")  # a full mailbox: parked
    pauses.release([words0, words1], "recovering")
    assert consumer.paused == {words0}, "still parked"
    pauses.release([words0], "backpressure")
    assert consumer.paused == set()
    pauses.hold([words1], "backpressure")
    pauses.forget([words1])  # revoked: its reasons go with it
    pauses.release([words1], "backpressure")
    assert consumer.paused == {words1}, "forgotten reasons do not resume it (the next assignment does)"


def test_a_reason_that_keeps_fetched_records_holds_back_instead_of_pausing_and_the_two_kinds_end_apart():
    consumer = RecordingConsumer()
    pauses = Pauses(consumer, keep_fetched=["ordering"])  # type: ignore[arg-type]
    left, right = TP("left", 0), TP("right", 0)
    pauses.hold([left], "ordering")
    assert (consumer.paused, consumer.held) == (set(), {left}), "held back, not paused"
    pauses.hold([left], "backpressure")
    assert (consumer.paused, consumer.held) == ({left}, {left})
    pauses.release([left], "backpressure")
    assert (consumer.paused, consumer.held) == (set(), {left}), "still held back for the order"
    pauses.hold([left], "backpressure")
    pauses.release([left], "ordering")
    assert (consumer.paused, consumer.held) == ({left}, set()), "let through, still paused"
    pauses.release([left], "backpressure")
    pauses.hold([left, right], "ordering")
    pauses.forget([left, right])  # revoked: what is held back is let through with its reasons
    assert consumer.held == set()
    assert pauses.reasons(left) == set()
