"""rocksdb://: one RocksDB database per table partition, through rocksdict. rocksdict lives here only.

Layout: `<data_dir>/<table>/<partition>/`; user keys in the default column family, the applied changelog
offset in the `engine-meta` column family, both written by one WriteBatch so they can never disagree.
Writes keep RocksDB's write-ahead log (not fsynced): a killed process loses nothing it wrote, so a restart
replays only the changelog's tail. Writes come as one coalesced batch per checkpoint, so the WAL costs little.

Snapshots are RocksDB checkpoints (hard links, beside the store) opened read-only. rocksdict's own
`Rdict.snapshot()` is not usable for this: its `get` honours the snapshot but its `items`/`iter` read the live
database (rocksdict 0.3.29), so a scan would mix in later writes.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Checkpoint,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from engine.errors import StoreCorrupt, StoreError
from engine.events import TP

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

# RocksDB's own words when another process holds a database's LOCK file ("While lock file: .../LOCK:
# Resource temporarily unavailable"; "lock hold by current process"). Not just "lock": a corrupt block's
# "block checksum mismatch" contains that word too.
_LOCKED = re.compile(r"While lock file|lock hold by|/LOCK: ")
# ENOSPC as RocksDB says it ("IO error: No space left on device: While appending to file: ..."): the store is
# whole (a failed write leaves it as it was), only its filesystem is full.
_NO_SPACE = "No space left on device"

log = logging.getLogger(__name__)

META = "engine-meta"
OFFSET_KEY = b"changelog-offset"
IDENTITY_KEY = b"changelog-id"
INPUTS_KEY = b"input-offsets"  # "topic:partition:offset" lines (a topic name has no ':' nor newline)


LOG_FILE_BYTES = 128 << 10


def _options(memory: SharedMemory | None = None) -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    # RocksDB's info LOG (flushes, compactions, a stats dump every 10 minutes) grows without end by default,
    # and every open keeps the last one as LOG.old.<time>, up to 1,000: the largest files of a store that
    # runs for days. Rolled at 128 KiB, the current one and one old one kept. (Kafka Streams quiets it at
    # level ERROR instead; rocksdict does not expose the level.)
    options.set_max_log_file_size(LOG_FILE_BYTES)
    options.set_keep_log_file_num(2)
    if memory is not None:
        memory.apply(options)
    return options


class SharedMemory:
    """One memory budget for every store of a backend (so of a worker): a block cache of `size` bytes, and
    memtables charged to it, flushed once they hold half of it together. Without it each store had its own
    cache and memtables of up to 64 MB each (RocksDB's defaults): memory grew with every write until then,
    times the number of stores; with the budget it levels off (benchmarks/README.md). A single memtable
    stays small too, so that one busy store flushes before it takes the whole budget."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cache = Cache(size)
        self.write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            size // 2, False, self.cache)

    def bytes_held(self) -> dict[str, int]:
        """What the budget holds now: `total` (memtables included, as they are charged to the cache) and
        `memtables`."""
        return {"total": self.cache.get_usage(), "memtables": self.write_buffers.get_usage()}

    def apply(self, options: Options) -> None:
        options.set_write_buffer_manager(self.write_buffers)
        options.set_write_buffer_size(max(1 << 20, min(8 << 20, self.size // 8)))
        table = BlockBasedOptions()
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)  # index and filters count against the budget too
        options.set_block_based_table_factory(table)


class Disk:
    """The filesystem the stores of a backend share, as they found it: full from a write or a flush of one
    of them that ran out of space, until one of them flushes again. While it is full no store of it flushes
    as it closes: RocksDB retries a failed flush in the background once a second, and a flush or a close
    met on the way waits for the next retry, the event loop held meanwhile (a second or more per store)."""

    __slots__ = ("full",)

    def __init__(self) -> None:
        self.full = False


class RocksDBPartitionStore:
    def __init__(self, path: Path, *, read_only: bool = False, remove_on_close: bool = False,
                 memory: SharedMemory | None = None, name: str | None = None,
                 disk: Disk | None = None) -> None:
        """`name`: what the store is, for errors ("table 'counts' partition 1"); `disk`: the filesystem as
        the backend's stores found it."""
        self.path = path
        self._disk = disk if disk is not None else Disk()
        self.name = f"the store of {name} at {path}" if name else f"store {path}"
        self.read_only = read_only
        self._remove_on_close = remove_on_close
        access = AccessType.read_only() if read_only else AccessType.read_write()
        try:
            self._db = Rdict(str(path), _options(memory), column_families={META: _options(memory)},
                             access_type=access)
        except Exception as exc:  # rocksdict raises plain Exceptions for IO and corruption errors
            message = str(exc)
            if _LOCKED.search(message):
                holder = "this process" if "by current process" in message else "another process"
                raise StoreError(f"store {path} is in use by {holder}: {message}") from exc
            if _NO_SPACE in message:
                raise StoreError(_no_space(f"cannot open {self.name}", message)) from exc
            raise StoreCorrupt(f"store {path} cannot be opened: {message}") from exc
        self._meta_handle = self._db.get_column_family_handle(META)
        self._meta = self._db.get_column_family(META)
        self._write_options = WriteOptions()
        # A read-only store is a view read once (an export's scan, `engine table get`): its scans bypass the
        # block cache, which would otherwise keep up to its size (RocksDB's default: 32 MB a store) of blocks
        # never read again. Kept as long as the store: an iterator must not outlive its ReadOptions.
        self._scan_options: ReadOptions | None = None
        if read_only:
            self._scan_options = ReadOptions()
            self._scan_options.fill_cache(False)  # type: ignore[call-arg]  # its stub omits the flag it takes
        self._closed = False
        self._inputs: dict[TP, int] | None = None
        try:
            self._offset = self._read_offset()
            if not read_only:
                self._verify()
        except Exception as exc:
            self.close()
            raise StoreCorrupt(f"store {path} is corrupt: {exc}") from exc

    def _verify(self) -> None:
        """Read every block once, so that RocksDB checks its checksum now. A garbled SST file opens without
        complaint and fails only when a read reaches the bad block: in the middle of processing, where it
        would look like the agent's fault. Found here, the store is rebuilt from the changelog instead.
        (Costs a scan at open, proportional to the store's size.) rocksdict's `keys()` and `items()` would end
        quietly at the bad block (they do not check the iterator's status): the raw iterator is used."""
        read_options = ReadOptions()
        read_options.fill_cache(False)  # type: ignore[call-arg]  # its stub omits the flag it takes
        cursor = self._db.iter(read_options)
        cursor.seek_to_first()
        while cursor.valid():
            cursor.next()
        cursor.status()

    def _read_offset(self) -> int | None:
        raw = self._meta.get(OFFSET_KEY)
        return int(raw) if raw is not None else None

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def write(self, updates: Mapping[bytes, bytes | None], changelog_offset: int | None,
              inputs: Mapping[TP, int] | None = None) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in updates.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if changelog_offset is not None:
            batch.put(OFFSET_KEY, str(changelog_offset).encode(), self._meta_handle)
        recorded = None
        if inputs:
            recorded = {**self.input_offsets(), **inputs}
            batch.put(INPUTS_KEY, "\n".join(f"{topic}:{partition}:{offset}" for (topic, partition), offset
                                            in sorted(recorded.items())).encode(), self._meta_handle)
        try:
            self._db.write(batch, self._write_options)
        except Exception as exc:  # rocksdict raises plain Exceptions; the batch was not applied
            raise self._write_failed(exc) from exc
        if changelog_offset is not None:
            self._offset = changelog_offset
        if recorded is not None:
            self._inputs = recorded

    def changelog_offset(self) -> int | None:
        return self._offset

    def input_offsets(self) -> dict[TP, int]:
        if self._inputs is None:  # (read once: every checkpoint's write merges into it)
            raw: bytes | None = self._meta.get(INPUTS_KEY)
            self._inputs = {}
            for line in (raw or b"").decode().splitlines():
                topic, partition, offset = line.rsplit(":", 2)
                self._inputs[TP(topic, int(partition))] = int(offset)
        return dict(self._inputs)

    def changelog_identity(self) -> bytes | None:
        identity: bytes | None = self._meta.get(IDENTITY_KEY)
        return identity

    def set_changelog_identity(self, identity: bytes) -> None:
        try:
            self._meta[IDENTITY_KEY] = identity
        except Exception as exc:
            raise self._write_failed(exc) from exc

    def _write_failed(self, exc: Exception) -> StoreError:
        message = str(exc)
        if _NO_SPACE in message:
            self._disk.full = True
            return StoreError(_no_space(f"cannot write {self.name}", message))
        return StoreError(f"cannot write {self.name}: {message}")

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """rocksdict's own items iterator (no Python generator between): an export scans every pair of a
        store, and a generator would add a Python frame resume to each.

        A bounded scan stops at `end` itself instead of through ReadOptions' iterate_upper_bound: the
        ReadOptions object is freed when this returns, and an iterator outliving it could end early (seen:
        a key's two windows read back as one)."""
        scan = cast("Iterator[tuple[bytes, bytes]]",
                    self._db.items(from_key=start, read_opt=self._scan_options))
        if end is None:
            return scan
        return itertools.takewhile(lambda pair: pair[0] < end, scan)

    def approximate_len(self) -> int:
        value = self._db.property_int_value("rocksdb.estimate-num-keys")
        return int(value or 0)

    def disk_bytes(self) -> int:
        """Its live SST files' bytes (RocksDB's own count, no walk of the directory): what the data takes on
        disk once flushed; the write-ahead log, the memtables and files only a snapshot still holds are not
        counted."""
        value = self._db.property_int_value("rocksdb.live-sst-files-size")
        return int(value or 0)

    def snapshot(self) -> RocksDBPartitionStore:
        """A checkpoint beside the store, opened read-only; closing it deletes it. The checkpoint holds both
        column families at one sequence number, so its data and offset agree."""
        target = self.path.parent / f".snapshot-{self.path.name}-{uuid.uuid4().hex[:12]}"
        try:
            Checkpoint(self._db).create_checkpoint(str(target))
            return RocksDBPartitionStore(target, read_only=True, remove_on_close=True)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise

    def flush(self) -> None:
        """Persist memtables to SST files (on close), so reopening does not replay the WAL."""
        try:
            self._db.flush()
            self._meta.flush()
        except Exception as exc:
            raise self._write_failed(exc) from exc
        self._disk.full = False

    def _flush_for_close(self) -> str | None:
        """Flush before the close; None if it did, else why not: the disk found full (not tried), or the
        flush's failure."""
        if self._disk.full:
            return f"{self.name}: its filesystem is full"
        try:
            self.flush()
        except StoreError as exc:
            return str(exc)
        return None

    def close(self) -> None:
        """Flush and release the database. Every handle must go: any live one keeps RocksDB's lock.

        A flush that fails (a full disk) loses nothing: every write the store acknowledged is in its
        write-ahead log, replayed when it is opened again. The handles are released all the same, so
        that a worker stopping after such a failure closes its other stores and leaves its group. On a disk
        found full (`Disk`) the store does not try: background work is called off, and the handles go at
        once."""
        if self._closed:
            return
        self._closed = True
        unflushed = None if self.read_only else self._flush_for_close()
        if unflushed is not None:
            log.warning("closed without a flush (its write-ahead log keeps every write it took): %s",
                        unflushed)
            with contextlib.suppress(Exception):
                self._db.cancel_all_background(False)  # (False: not waiting for a retry under way)
        # After a failed write RocksDB repeats its error ("Writer has previous error") as it closes: the
        # handles are released all the same.
        for handle in (self._meta, self._db):
            with contextlib.suppress(Exception):
                handle.close()
        del self._meta_handle, self._meta, self._db
        if self._remove_on_close:
            shutil.rmtree(self.path, ignore_errors=True)


class RocksDBStoreBackend:
    blocking = True  # (an open reads the store's files; rocksdict releases the GIL while it waits on them)

    def __init__(self, url: str, data_dir: Path, memory: int | None = None) -> None:
        self.url = url
        self.root = Path(data_dir)
        self.memory = SharedMemory(memory) if memory is not None else None
        self.disk = Disk()

    def path(self, table: str, partition: int) -> Path:
        return self.root / table / str(partition)

    def memory_bytes(self) -> dict[str, int]:
        return self.memory.bytes_held() if self.memory is not None else {}

    def open(self, table: str, partition: int) -> RocksDBPartitionStore:
        path = self.path(table, partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        return RocksDBPartitionStore(path, memory=self.memory, name=f"table {table!r} partition {partition}",
                                     disk=self.disk)

    def destroy(self, table: str, partition: int) -> None:
        shutil.rmtree(self.path(table, partition), ignore_errors=True)

    def open_read_only(self, table: str, partition: int) -> RocksDBPartitionStore | None:
        """A read-only view (no lock: works beside a running worker), or None if there is no store."""
        path = self.path(table, partition)
        if not (path / "CURRENT").exists():
            return None
        return RocksDBPartitionStore(path, read_only=True)

    def stored_partitions(self, table: str) -> dict[int, tuple[int | None, float]]:
        kept: dict[int, tuple[int | None, float]] = {}
        for number in self.local_partitions(table):
            path = self.path(table, number)
            try:
                store = self.open_read_only(table, number)
            except StoreError:
                continue  # unreadable: opened for real, it is rebuilt
            if store is None:
                continue
            try:
                offset = store.changelog_offset()
            finally:
                store.close()
            kept[number] = (offset, max((f.stat().st_mtime for f in path.iterdir()), default=0.0))
        return kept

    def local_partitions(self, table: str) -> list[int]:
        folder = self.root / table
        if not folder.is_dir():
            return []
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _no_space(what: str, message: str) -> str:
    return (f"{what}: its filesystem is full ({message}); free space there and start the worker again: it "
            "goes on from what the store and its changelog hold")
