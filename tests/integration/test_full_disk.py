"""A worker whose data dir's filesystem fills up mid-stream (a small tmpfs, filled by a file beside the
stores, as another process's logs would): it stops with one clear error naming the store it could not write
(the path, the table, the partition), commits no source offset past what its tables hold, and once space is
freed a restart is exact. Both guarantees, against ground truth computed from the input."""

from __future__ import annotations

import asyncio
import errno
import re
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from aiokafka import TopicPartition

from engine.stores.rocksdb import RocksDBStoreBackend
from tests.integration.helpers import (
    WorkerProcess,
    committed_offsets,
    create_topics,
    latest,
    read_all,
    unique,
)
from tests.integration.rebalance_checks import check
from tests.integration.rebalance_run import COMMITTED, paced_produce, wait_until_complete, words
from tests.tmpfs import mounted_tmpfs

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.kafka

PARTITIONS = 4
DISK = "32m"  # the data dir's filesystem: room for the stores, little more


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK mounted for the test."""
    with mounted_tmpfs(tmp_path / "disk", DISK) as mount:
        yield mount


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte with one file; returns it (delete it to free the space)."""
    ballast = disk / "ballast"
    chunk = b"\0" * (1 << 16)
    with ballast.open("wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    for size in (4096, 512, 1):  # (the tail of the last page too)
        with ballast.open("ab", buffering=0) as out:
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return ballast


def stopped_for_the_full_disk(worker: WorkerProcess, data: Path, verb: str) -> None:
    """The worker exited nonzero, its last word one line that names the store (table, partition, path) it
    could not open or write and says the filesystem is full; its stop went through (no second failure)."""
    log = worker.output()
    assert worker.process.returncode not in (0, None), log[-3000:]
    store = rf"the store of table '(counts|per-window)' partition [0-3] at {re.escape(str(data))}/\S+/[0-3]"
    said = (rf"cannot {verb} {store}: its filesystem is full \(.*No space left on device.*\); free space "
            "there and start the worker again.*")
    assert re.fullmatch(rf"engine: worker '.+' stopped: {said}", log.rstrip().splitlines()[-1]), log[-3000:]
    # Every ERROR line of engine's is the full disk, said of a store (under load a second step, a revoke or
    # another store's write, can meet it too and say so); no other failure, no traceback of the stop.
    # (aiokafka's own are not counted: on a loaded machine the stop, which frees each failed store on the
    # loop, can outlast the session, and aiokafka logs that at ERROR.)
    errors = [record for record in worker.records("ERROR") if " ERROR aiokafka" not in record]
    assert errors, log[-3000:]
    either = said.replace(f"cannot {verb} ", "cannot (open|write) ", 1)  # (the disk met by a later step too)
    others = [record for record in errors
              if not re.search(rf"StoreError: {either}", record.split("\n", 1)[0])]
    assert others == [], "\n".join(others)


async def run_until_it_stops(worker: WorkerProcess, timeout: float = 90) -> None:
    try:
        await asyncio.to_thread(worker.process.wait, timeout)
    finally:
        worker.terminate(timeout=60)


def stored_counts(data: Path) -> dict[str, int]:
    """The counts the worker's stores hold on disk (read-only: the disk may be full)."""
    backend = RocksDBStoreBackend("rocksdb://", data)
    counts: dict[str, int] = {}
    for number in backend.local_partitions("counts"):
        store = backend.open_read_only("counts", number)
        assert store is not None
        try:
            counts.update({key.decode(): int(value) for key, value in store.items()})
        finally:
            store.close()
    return counts


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_full_disk_stops_the_worker_naming_the_store_and_a_restart_is_exact(
        kafka, tmp_path, small_disk, guarantee):
    """At-least-once writes a checkpoint's stores before it commits its offsets, so the offsets committed
    never pass what the stores on disk hold; exactly-once commits the offsets with the changelogs in one
    transaction (the stores follow, and catch up from the changelog if they could not), so the committed
    changelog holds exactly the events before the committed offsets. A worker started again while the disk
    is still full stops the same way, and keeps its stores (a full disk is not a corrupt store)."""
    app_id, topic = unique("fulldisk"), unique("words")
    await create_topics(kafka.bootstrap, [topic], partitions=PARTITIONS)
    events = words(8_000)
    data = small_disk / "data"
    env = {"ITEST_APP": app_id, "ITEST_TOPIC": topic, "ITEST_GUARANTEE": guarantee,
           "ENGINE_DATA_DIR": str(data)}
    one = WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env, tmp_path / "one.log")
    filled: list[Path] = []
    try:
        await one.wait_for_output("tables ready", 90)
        await paced_produce(kafka.bootstrap, topic, events, rate=1000,
                            at={0.3: lambda: filled.append(fill(small_disk))})
    finally:
        await run_until_it_stops(one)
    stopped_for_the_full_disk(one, data / app_id, "write")

    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    committed = await committed_offsets(kafka.bootstrap, app_id, tps)
    before = Counter(r.key.decode() for r in await read_all(kafka.bootstrap, topic)
                     if r.offset < committed.get(TopicPartition(r.topic, r.partition), 0))
    assert 0 < sum(before.values()) < len(events), "the worker stopped mid-stream"
    changelog = latest(await read_all(kafka.bootstrap, f"{app_id}-counts-changelog",
                                      isolation_level=COMMITTED))
    if guarantee == "exactly_once":
        assert {k: (changelog.get(k, 0), n) for k, n in before.items() if changelog.get(k, 0) != n} == {}
    else:
        stored = stored_counts(data / app_id)
        assert {k: (stored.get(k, 0), n) for k, n in before.items() if stored.get(k, 0) < n} == {}, (
            "offsets committed past what the stores hold")
        assert {k: (changelog.get(k, 0), n) for k, n in before.items() if changelog.get(k, 0) < n} == {}

    still = WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env, tmp_path / "still.log")
    await run_until_it_stops(still)
    stopped_for_the_full_disk(still, data / app_id, "open")
    assert "rebuilding" not in still.output()

    filled[0].unlink()
    again = WorkerProcess("tests.integration.rebalance_apps:app", kafka.url, env, tmp_path / "again.log")
    try:
        counts, closes = await wait_until_complete(kafka.bootstrap, app_id, events, timeout=90,
                                                   workers=[again])
    finally:
        assert again.terminate(timeout=60) == 0, again.output()[-3000:]
    check(events, counts, closes, exact=guarantee == "exactly_once")
    assert "rebuilding" not in again.output(), "the stores were kept"
