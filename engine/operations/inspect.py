"""Looking into a worker's local table stores from outside it (the CLI): sizes, and single keys.

RocksDB stores are opened read-only, which needs no lock, so this works beside a running worker.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError
from engine.partitioner import partition_for
from engine.stores import store_scheme
from engine.tables.keys import META_PREFIX, split_window_key
from engine.tables.partition import MISSING
from engine.topics import planned_partitions

if TYPE_CHECKING:
    from collections.abc import Iterable

    from engine.app import App
    from engine.settings import Settings
    from engine.stores.rocksdb import RocksDBStoreBackend
    from engine.tables.base import BaseTable


@dataclass(frozen=True)
class PartitionInfo:
    table: str
    partition: int
    keys: int
    changelog_offset: int | None
    windows: int | None = None  # a windowed table's stored (key, window) pairs; keys counts distinct keys


def disk_backend(table: BaseTable, settings: Settings) -> RocksDBStoreBackend:
    """The table's on-disk store backend under the settings' data dir (memory stores have no files)."""
    url = table.store_url or settings.store
    if store_scheme(url) != "rocksdb":
        raise ConfigError(f"table {table.name!r} lives in {url}: only rocksdb:// stores are on disk")
    from engine.stores.rocksdb import RocksDBStoreBackend

    return RocksDBStoreBackend(url, settings.app_dir)


def table_named(app: App, name: str) -> BaseTable:
    table = app.tables.get(name)
    if table is None:
        known = ", ".join(sorted(app.tables)) or "none"
        raise ConfigError(f"app {app.id!r} has no table {name!r} (tables: {known})")
    return table


def local_partitions(app: App, settings: Settings) -> list[PartitionInfo]:
    infos = []
    for table in app.tables.values():
        backend = disk_backend(table, settings)
        for number in backend.local_partitions(table.name):
            store = backend.open_read_only(table.name, number)
            if store is None:
                continue
            try:
                stored = (k for k, _ in store.items() if not k.startswith(META_PREFIX))
                if table.window is None:
                    keys, windows = sum(1 for _ in stored), None
                else:
                    starts = Counter(split_window_key(k)[0] for k in stored)  # windows per key
                    keys, windows = len(starts), sum(starts.values())
                infos.append(PartitionInfo(table.name, number, keys, store.changelog_offset(), windows))
            finally:
                store.close()
    return infos


def read_key(app: App, settings: Settings, name: str, key: Any, *, at: int | None = None,
             since: int | None = None, until: int | None = None) -> tuple[int, Any]:
    """(partition, value) of `key` in the local stores; the key's hash partition is tried first. For a
    windowed table the value is every stored window of the key, oldest first:
    [{"window_start": seconds, "window_end": seconds, "value": ...}, ...]; for a versioned table its value
    valid `at` ms (default: the latest), or with `since` or `until` (ms) its versions valid then, oldest
    first: [{"value": ..., "valid_from": seconds, "valid_to": seconds or None}, ...] (as a query answers)."""
    table = table_named(app, name)
    versioned = table.key_layout == "versioned"
    if not versioned and (at, since, until) != (None, None, None):
        raise ConfigError(f"table {name!r} is not versioned: no time to read it as of")
    backend = disk_backend(table, settings)
    encoded = table.plain_key_codec.encode(key)
    if encoded is None:
        raise ConfigError("a table key cannot be null")
    local = backend.local_partitions(table.name)
    if not local:
        raise ConfigError(
            f"no local stores of table {name!r} under {settings.app_dir}; "
            "pass the worker's --data-dir"
        )
    count = planned_partitions(table.changelog_topic, settings)
    first = partition_for(encoded, count)
    for number in [first] + [p for p in local if p != first]:
        store = backend.open_read_only(table.name, number)
        if store is None:
            continue
        try:
            if versioned:
                windowed: Any = table.windowed
                has, found = windowed.lookup(key, at=at, since=since, until=until, store=store)
                if not has:
                    found = MISSING
                elif isinstance(found, list):
                    found = [{"value": v.value, "valid_from": v.valid_from, "valid_to": v.valid_to}
                             for v in found]
            else:
                found = table.stored(store, key)
        finally:
            store.close()
        if found is not MISSING:
            return number, found if table.window is None or versioned else window_entries(found)
    return first, MISSING


def window_entries(windows: Iterable[tuple[int, int, Any]]) -> list[dict[str, Any]]:
    """Windows (start ms, end ms, value) as engine table get and GET /tables/{table}/{key} show them: the
    bounds in seconds, as WindowRange has them."""
    return [{"window_start": start / 1000, "window_end": end / 1000, "value": value}
            for start, end, value in windows]
