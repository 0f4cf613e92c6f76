"""Stores behind one Protocol; `open_store_backend` picks one by URL (memory:// or rocksdb://)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import ConfigError, StoreCorrupt, StoreError
from engine.stores.base import PartitionStore, StoreBackend, StoreView

if TYPE_CHECKING:
    from pathlib import Path


STORE_SCHEMES = ("rocksdb", "memory")


def store_scheme(url: object) -> str | None:
    """The kind of store a store URL names (`rocksdb` or `memory`), None if it names none: the one rule,
    used where settings and tables are checked and where a backend is opened."""
    if not isinstance(url, str) or "://" not in url:
        return None
    scheme = url.split("://", 1)[0]
    return scheme if scheme in STORE_SCHEMES else None


def open_store_backend(url: str, data_dir: Path, memory: int | None = None) -> StoreBackend:
    """`memory`: bytes a RocksDB backend's stores share (None: RocksDB's defaults, per store; for short-lived
    readers such as the CLI's)."""
    scheme = store_scheme(url)
    if scheme == "memory":
        from engine.stores.memory import MemoryStoreBackend

        return MemoryStoreBackend(url)
    if scheme == "rocksdb":
        from engine.stores.rocksdb import RocksDBStoreBackend

        return RocksDBStoreBackend(url, data_dir, memory)
    raise ConfigError(f"unknown store {url!r}; use rocksdb:// or memory://")


__all__ = [
    "STORE_SCHEMES", "PartitionStore", "StoreBackend", "StoreCorrupt", "StoreError", "StoreView",
    "open_store_backend", "store_scheme",
]
