"""Stores behind one Protocol; `open_store_backend` picks one by URL (memory:// or rocksdb://)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import ConfigError
from engine.stores.base import PartitionStore, StoreBackend, StoreCorrupt, StoreError, StoreView

if TYPE_CHECKING:
    from pathlib import Path


def open_store_backend(url: str, data_dir: Path, memory: int | None = None) -> StoreBackend:
    """`memory`: bytes a RocksDB backend's stores share (None: RocksDB's defaults, per store; for short-lived
    readers such as the CLI's)."""
    scheme = url.split("://", 1)[0]
    if scheme == "memory":
        from engine.stores.memory import MemoryStoreBackend

        return MemoryStoreBackend(url)
    if scheme == "rocksdb":
        from engine.stores.rocksdb import RocksDBStoreBackend

        return RocksDBStoreBackend(url, data_dir, memory)
    raise ConfigError(f"unknown store {url!r}; use rocksdb:// or memory://")


__all__ = [
    "PartitionStore", "StoreBackend", "StoreCorrupt", "StoreError", "StoreView", "open_store_backend",
]
