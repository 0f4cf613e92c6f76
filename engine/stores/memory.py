"""memory://: stores kept in a dict per partition, for tests and the demo. Data outlives close/open within
one backend object, like files would, so the same contract holds as for RocksDB."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from engine.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from engine.events import TP


class MemoryPartitionStore:
    def __init__(self, data: dict[bytes, bytes], meta: dict[str, Any]) -> None:
        self._data = data
        self._meta = meta
        self._open = True

    def _check(self) -> None:
        if not self._open:
            raise StoreError("store is closed")

    def get(self, key: bytes) -> bytes | None:
        self._check()
        return self._data.get(key)

    def write(self, updates: Mapping[bytes, bytes | None], changelog_offset: int | None,
              inputs: Mapping[TP, int] | None = None) -> None:
        self._check()
        data = self._data
        for key, value in updates.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        if changelog_offset is not None:
            self._meta["offset"] = changelog_offset
        if inputs:
            self._meta["inputs"] = {**self._meta.get("inputs", {}), **inputs}

    def input_offsets(self) -> dict[TP, int]:
        return dict(self._meta.get("inputs", {}))

    def changelog_offset(self) -> int | None:
        return self._meta.get("offset")

    def changelog_identity(self) -> bytes | None:
        return self._meta.get("identity")

    def set_changelog_identity(self, identity: bytes) -> None:
        self._meta["identity"] = identity

    def items(self, start: bytes | None = None, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        self._check()
        for key in sorted(self._data):
            if start is not None and key < start:
                continue
            if end is not None and key >= end:
                break
            value = self._data.get(key)
            if value is not None:
                yield key, value

    def approximate_len(self) -> int:
        return len(self._data)

    def disk_bytes(self) -> int:
        return 0

    def snapshot(self) -> MemoryPartitionStore:
        """A copy, detached from later writes."""
        self._check()
        return MemoryPartitionStore(dict(self._data), dict(self._meta))

    def close(self) -> None:
        self._open = False


class MemoryStoreBackend:
    blocking = False

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._partitions: dict[tuple[str, int], tuple[dict[bytes, bytes], dict[str, Any]]] = {}

    def open(self, table: str, partition: int) -> MemoryPartitionStore:
        data, meta = self._partitions.setdefault((table, partition), ({}, {}))
        return MemoryPartitionStore(data, meta)

    def destroy(self, table: str, partition: int) -> None:
        self._partitions.pop((table, partition), None)

    def memory_bytes(self) -> dict[str, int]:
        return {}  # Python's own objects, in the process's memory with the rest

    def stored_partitions(self, table: str) -> dict[int, tuple[int | None, float]]:
        return {number: (meta.get("offset"), time.time())
                for (name, number), (_, meta) in self._partitions.items() if name == table}
