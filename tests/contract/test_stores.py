"""One contract, every store: memory:// and rocksdb:// must behave the same."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from engine.errors import StoreCorrupt, StoreError
from engine.events import TP
from engine.stores import StoreBackend, open_store_backend
from engine.stores.rocksdb import LOG_FILE_BYTES
from tests.tmpfs import mounted_tmpfs

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(params=["memory://", "rocksdb://"])
def backend(request, tmp_path: Path) -> StoreBackend:
    return open_store_backend(request.param, tmp_path)


def test_put_get_delete(backend):
    store = backend.open("counts", 0)
    assert store.get(b"a") is None
    store.write({b"a": b"1", b"b": b"2"}, None)
    assert store.get(b"a") == b"1"
    store.write({b"a": None, b"b": b"3"}, None)
    assert store.get(b"a") is None
    assert store.get(b"b") == b"3"
    store.close()


def test_offset_is_written_with_the_data_and_survives_reopen(backend):
    store = backend.open("counts", 1)
    assert store.changelog_offset() is None
    store.write({b"k": b"v"}, 41)
    store.write({b"k2": b"v2"}, None)  # a write without a changelog position keeps the last one
    assert store.changelog_offset() == 41
    store.close()
    again = backend.open("counts", 1)
    assert again.changelog_offset() == 41
    assert again.get(b"k") == b"v"
    assert again.get(b"k2") == b"v2"
    again.close()


def test_input_offsets_are_written_with_the_data_merged_by_partition_and_survive_reopen(backend):
    words, clicks = TP("words.v1-x", 1), TP("clicks", 1)
    store = backend.open("counts", 1)
    assert store.input_offsets() == {}
    store.write({b"k": b"v"}, 41, {words: 120, clicks: 7})
    store.write({b"k": b"w"}, 42, {words: 130})  # (a commit of one input: the other's offset kept)
    store.write({b"k2": b"x"}, 43)  # (a restored or followed record: nothing said of the input)
    assert store.input_offsets() == {words: 130, clicks: 7}
    store.close()
    again = backend.open("counts", 1)
    assert again.input_offsets() == {words: 130, clicks: 7}
    assert again.changelog_offset() == 43
    again.close()
    backend.destroy("counts", 1)
    assert backend.open("counts", 1).input_offsets() == {}


def test_partitions_and_tables_are_separate(backend):
    first, second, other = backend.open("t", 0), backend.open("t", 1), backend.open("u", 0)
    first.write({b"k": b"0"}, 1)
    assert second.get(b"k") is None
    assert other.get(b"k") is None
    assert second.changelog_offset() is None
    for store in (first, second, other):
        store.close()


def test_items_are_key_ordered_and_bounded(backend):
    store = backend.open("ordered", 0)
    keys = [b"b", b"a", b"c\x00", b"c", b"ab", b"\xff"]
    store.write({k: k.upper() for k in keys}, None)
    assert [k for k, _ in store.items()] == sorted(keys)
    assert list(store.items(b"ab", b"c\x00")) == [(b"ab", b"AB"), (b"b", b"B"), (b"c", b"C")]
    assert [k for k, _ in store.items(start=b"c")] == [b"c", b"c\x00", b"\xff"]
    assert [k for k, _ in store.items(end=b"b")] == [b"a", b"ab"]
    assert store.approximate_len() >= 1
    store.close()


def test_destroy_forgets_everything(backend):
    store = backend.open("gone", 0)
    store.write({b"k": b"v"}, 9)
    store.close()
    backend.destroy("gone", 0)
    fresh = backend.open("gone", 0)
    assert fresh.get(b"k") is None
    assert fresh.changelog_offset() is None
    fresh.close()


def test_many_writes_in_one_batch(backend):
    store = backend.open("bulk", 0)
    store.write({str(i).encode(): str(i * i).encode() for i in range(10_000)}, 10_000)
    assert store.get(b"9999") == b"99980001"
    assert sum(1 for _ in store.items()) == 10_000
    store.close()


def test_rocksdb_corrupt_store_is_reported_as_such(tmp_path):
    backend = open_store_backend("rocksdb://", tmp_path)
    store = backend.open("bad", 0)
    store.write({b"k": b"v"}, 1)
    store.close()
    path = tmp_path / "bad" / "0"
    for manifest in path.glob("MANIFEST-*"):
        manifest.write_bytes(b"garbage" * 10)
    (path / "CURRENT").write_text("MANIFEST-999999\n")
    with pytest.raises(StoreCorrupt, match="cannot be opened"):
        backend.open("bad", 0)
    backend.destroy("bad", 0)
    rebuilt = backend.open("bad", 0)
    assert rebuilt.changelog_offset() is None
    rebuilt.close()


def test_rocksdb_garbled_sst_is_corrupt_at_open_not_at_the_first_read(tmp_path):
    """A garbled data block opens without complaint in RocksDB and fails only when read ("block checksum
    mismatch", which contains the word "lock": it was once taken for a store in use)."""
    backend = open_store_backend("rocksdb://", tmp_path)
    store = backend.open("garbled", 0)
    store.write({f"key{i:06d}".encode(): b"x" * 40 for i in range(50_000)}, 7)
    store.close()
    sst = max((tmp_path / "garbled" / "0").glob("*.sst"), key=lambda f: f.stat().st_size)
    data = bytearray(sst.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = b"\0" * 64
    sst.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match="block checksum mismatch"):
        backend.open("garbled", 0)


def test_changelog_identity_survives_reopen(backend):
    store = backend.open("ids", 0)
    assert store.changelog_identity() is None
    store.set_changelog_identity(b"\x01" * 16)
    store.close()
    again = backend.open("ids", 0)
    assert again.changelog_identity() == b"\x01" * 16
    again.close()


def test_rocksdb_store_in_use_is_a_clear_error(tmp_path):
    backend = open_store_backend("rocksdb://", tmp_path)
    store = backend.open("busy", 0)
    with pytest.raises(StoreError, match="in use"):
        backend.open("busy", 0)
    store.close()


def test_unknown_store_url(tmp_path):
    with pytest.raises(ValueError, match="unknown store 'redis://'"):
        open_store_backend("redis://", tmp_path)


def test_snapshot_is_a_fixed_view_with_its_offset(backend):
    store = backend.open("snap", 0)
    store.write({b"a": b"1", b"b": b"2"}, 7)
    snapshot = store.snapshot()
    store.write({b"a": b"changed", b"b": None, b"c": b"new"}, 9)
    assert snapshot.changelog_offset() == 7
    assert list(snapshot.items()) == [(b"a", b"1"), (b"b", b"2")]
    assert list(snapshot.items(b"b")) == [(b"b", b"2")]
    assert list(store.items()) == [(b"a", b"changed"), (b"c", b"new")]
    snapshot.close()
    store.write({b"d": b"4"}, 10)  # the store goes on after the snapshot is gone
    assert store.changelog_offset() == 10
    store.close()


def test_rocksdb_snapshot_leaves_nothing_behind(tmp_path):
    backend = open_store_backend("rocksdb://", tmp_path)
    store = backend.open("snap", 3)
    store.write({b"k": b"v"}, 0)
    snapshot = store.snapshot()
    assert len(list((tmp_path / "snap").iterdir())) == 2
    snapshot.close()
    assert [p.name for p in (tmp_path / "snap").iterdir()] == ["3"]
    assert backend.local_partitions("snap") == [3]
    store.close()


def test_rocksdb_stores_of_a_backend_share_one_bounded_memory_budget(tmp_path):
    """Four stores written five times past their budget: their memtables are charged to the shared cache and
    flushed as they fill it (RocksDB's limit is soft: a memtable is counted by whole arena blocks), so
    memory stays near the budget however much is written, and every value reads back."""
    budget = 16 << 20
    backend = open_store_backend("rocksdb://", tmp_path, memory=budget)
    stores = [backend.open("bounded", n) for n in range(4)]
    value = b"v" * 100
    peak = 0
    for round_ in range(40):  # 40 x 4 x 5,000 x ~110 bytes: ~88 MB written
        for number, store in enumerate(stores):
            store.write({f"{number}-{round_}-{i}".encode(): value for i in range(5000)}, round_)
        held = backend.memory_bytes()
        assert held["memtables"] <= held["total"], "memtables are charged to the budget"
        peak = max(peak, held["memtables"])
    assert 0 < peak <= budget * 3 // 2
    assert 0 < backend.memory_bytes()["total"] <= budget * 3 // 2
    assert stores[3].get(b"3-39-4999") == value
    assert stores[0].get(b"0-0-0") == value
    for store in stores:
        store.close()


def test_a_rocksdb_stores_info_log_is_bounded_however_often_it_opens(tmp_path: Path) -> None:
    """RocksDB's info LOG grows without end by default, and every open kept the last one as
    LOG.old.<time> (up to 1,000): a worker restarted daily grew each store's directory for good. Each open
    writes some 10 KB of options to it; 30 opens write more than a rolled file holds."""
    backend = open_store_backend("rocksdb://", tmp_path)
    for offset in range(30):
        store = backend.open("logged", 0)
        store.write({b"k": str(offset).encode()}, offset)
        store.close()
    logs = [p for p in (tmp_path / "logged" / "0").iterdir() if p.name.startswith("LOG")]
    assert 1 <= len(logs) <= 2, sorted(p.name for p in logs)
    assert all(p.stat().st_size <= 2 * LOG_FILE_BYTES for p in logs)
    assert backend.open("logged", 0).get(b"k") == b"29"


def test_rocksdb_stores_that_failed_on_a_full_disk_close_at_once_and_keep_every_acknowledged_write(
        tmp_path: Path) -> None:
    """RocksDB retries a failed flush once a second in the background, and a close waited for the next
    retry: a worker stopping on a full disk held its loop about a second per store. Closed, they keep every
    write they acknowledged (in the write-ahead log), read back once there is room again."""
    with mounted_tmpfs(tmp_path / "disk", "8m") as disk:
        backend = open_store_backend("rocksdb://", disk)
        stores = [backend.open("t", number) for number in range(4)]
        acknowledged: dict[int, int] = {}
        with pytest.raises(StoreError, match="filesystem is full"):
            fill_stores(stores, acknowledged)
        started = time.perf_counter()
        for store in stores:
            store.close()
        closing = time.perf_counter() - started
        assert closing < 2.0, f"closing 4 failed stores took {closing:.1f}s: RocksDB's retries waited for"
        backend.destroy("t", 3)  # (room to open the others)
        for number in range(3):
            store = backend.open("t", number)
            try:
                assert store.changelog_offset() == acknowledged[number]
                assert store.get(f"{acknowledged[number]}-199".encode()) == bytes(200)
            finally:
                store.close()


def fill_stores(stores: list[Any], acknowledged: dict[int, int]) -> None:
    """Write to every store in turn until one fails; `acknowledged`: each one's last write (its offset)."""
    rounds = 0
    while True:
        for number, store in enumerate(stores):
            store.write({f"{rounds}-{i}".encode(): bytes(200) for i in range(200)}, rounds)
            acknowledged[number] = rounds
        rounds += 1
