"""Stores: where a table partition's state lives, bytes to bytes, with the changelog offset it reflects.

The offset is written in the same atomic batch as the data it describes: after a crash, a partition's store
and its offset always agree, so recovery replays exactly from there. Keys iterate in byte order (windowed
tables rely on this to keep one key's windows together).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from engine.events import TP


class StoreView(Protocol):
    """What a reader needs: key-ordered data and the changelog offset it reflects, which always agree.

    A store opened read-only and a snapshot are views that stay fixed while the live store moves on."""

    def changelog_offset(self) -> int | None:
        """The offset of the last changelog record this view reflects, or None for a new store."""

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Key-ordered pairs with start <= key < end (None: unbounded)."""

    def get(self, key: bytes) -> bytes | None: ...

    def approximate_len(self) -> int: ...

    def close(self) -> None: ...


class PartitionStore(StoreView, Protocol):
    def disk_bytes(self) -> int:
        """Bytes of its files on disk (0 for a store in memory): what the worker's page shows."""
        ...

    def changelog_identity(self) -> bytes | None:
        """The id of the changelog topic this store reflects (None: not recorded)."""

    def set_changelog_identity(self, identity: bytes) -> None:
        """Record which changelog topic this store reflects (a recreated topic has another id)."""

    def write(self, updates: Mapping[bytes, bytes | None], changelog_offset: int | None,
              inputs: Mapping[TP, int] | None = None) -> None:
        """Apply puts (bytes) and deletes (None), and record `changelog_offset` and `inputs` if given,
        atomically. `inputs`: where the task that wrote this resumes reading each of its input partitions
        ((topic, partition) -> offset), as the commit that made these writes durable recorded it; each
        partition's last recorded offset is kept."""

    def input_offsets(self) -> dict[TP, int]:
        """The input offsets recorded by `write` ((topic, partition) -> the offset its task resumes at once
        the data here is committed): what a task set up under exactly-once checks the store against. Empty
        for a store only restored or followed (a changelog record says nothing of the input)."""

    def snapshot(self) -> StoreView:
        """A point-in-time view of the data and its offset, unaffected by later writes (close it)."""


class StoreBackend(Protocol):
    url: str
    # Whether opening a store waits on the disk (a RocksDB open reads its files; benchmarks/README.md has the
    # figure): a task set up while others run opens those off the event loop (engine.tables.manager).
    blocking: bool

    def open(self, table: str, partition: int) -> PartitionStore: ...

    def destroy(self, table: str, partition: int) -> None:
        """Delete a partition's data (the store must be closed): it is rebuilt from the changelog."""

    def memory_bytes(self) -> dict[str, int]:
        """Memory the backend's stores hold outside Python's objects, by part (RocksDB: `total` charged to
        the shared budget, of which `memtables`): what `/metrics` shows beside the process's own size, so
        that a worker's memory can be told apart from its stores' caches filling their budget."""

    def stored_partitions(self, table: str) -> dict[int, tuple[int | None, float]]:
        """The partitions of `table` with a store kept here (none open): each store's changelog offset and
        when it was last written (epoch seconds). What a restarted worker tells the assignor it holds."""
