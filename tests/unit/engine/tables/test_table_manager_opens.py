"""The table manager opens a task's RocksDB stores off the event loop (a task set up while others run leaves
the loop to them), each taken out of the inventory of stores kept on disk before the first opens (a clean-up
meanwhile cannot delete one about to open), and a corrupt one rebuilt empty as a store opened on the loop
is."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import engine
from engine.events import TP
from engine.tables.manager import TableManager
from engine.tables.state import StateManager


def manager_of(app: engine.App, tmp_path: Any) -> TableManager:
    settings = app.settings({"data_dir": str(tmp_path), "store": "rocksdb://"})
    manager = TableManager(list(app.tables.values()), transport=None, settings=settings,  # type: ignore[arg-type]
                           admin_factory=lambda: None,  # type: ignore[arg-type, return-value]
                           request_rebalance=lambda: None)
    return manager


async def test_a_tasks_stores_open_in_a_thread_each_out_of_the_inventory_first(tmp_path):
    app = engine.App("opens", broker="memory://unused")
    tables = [app.Table(f"t{n}", default=int, key_type=str, value_type=int) for n in range(3)]
    manager = manager_of(app, tmp_path)
    kept = {TP(table.changelog_topic.name, 1): (7, time.time()) for table in tables}
    manager.on_disk.update(kept)
    threads: set[str] = set()
    inventory_when_first_opened: list[set[TP]] = []
    backend = manager._backend(tables[0])
    open_here = backend.open

    def open_watched(table: str, partition: int) -> Any:
        threads.add(threading.current_thread().name)
        if not inventory_when_first_opened:
            inventory_when_first_opened.append(set(manager.on_disk))
        return open_here(table, partition)

    backend.open = open_watched  # type: ignore[method-assign]
    state = StateManager("task 1", manager)
    beats = 0

    async def beat() -> None:
        nonlocal beats
        while True:
            beats += 1
            await asyncio.sleep(0)

    beating = asyncio.ensure_future(beat())
    try:
        await state.open_off_loop([(table, 1) for table in tables])
    finally:
        beating.cancel()
    assert threading.current_thread().name not in threads  # (every open in a thread of the loop's pool)
    assert inventory_when_first_opened == [set()]  # all three claimed before the first open
    assert sorted(state.stores) == sorted(kept)
    assert beats > 0  # the loop turned while they opened
    state.close()


async def test_a_corrupt_store_opened_off_the_loop_is_rebuilt_empty(tmp_path):
    app = engine.App("opens-corrupt", broker="memory://unused")
    table = app.Table("counts", default=int, key_type=str, value_type=int)
    manager = manager_of(app, tmp_path)
    store = manager.open_store(table, 0)
    store.write({b"k": b"1"}, 5)
    store.close()
    path = manager._backend(table).path(table.name, 0)  # type: ignore[attr-defined]
    for sst in [*path.glob("*.sst"), *path.glob("CURRENT")]:
        sst.write_bytes(b"not rocksdb")
    state = StateManager("task 0", manager)
    await state.open_off_loop([(table, 0)])
    [(_, reopened)] = state.stores.values()
    assert dict(reopened.items()) == {}
    assert reopened.changelog_offset() is None  # rebuilt: recovery replays the whole changelog
    state.close()
