"""The table manager opens a task's RocksDB stores off the event loop (a task set up while others run leaves
the loop to them), each taken out of the inventory of stores kept on disk before the first opens (a clean-up
meanwhile cannot delete one about to open), and a corrupt one rebuilt empty as a store opened on the loop
is. The standbys' stores open and close in threads too, one change of them at a time."""

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


async def test_standby_stores_open_and_close_in_threads_and_a_task_becoming_active_waits_for_the_settle(
        tmp_path):
    """A settle of the standbys opens their stores, and closes those no longer wanted (RocksDB flushes as it
    closes), in threads: the tasks running go on meanwhile. A task becoming active while a settle opens its
    standby's stores waits for that step and takes them, opened once; before, a second open of the same
    store failed on RocksDB's lock."""
    from engine.tasks.standbys import Standbys

    app = engine.App("standby-opens", broker="memory://unused")
    table = app.Table("counts", default=int, key_type=str, value_type=int)
    table.bind(worker := object(), 4, {})  # (its partition count: a task's partitions of it)
    manager = manager_of(app, tmp_path)
    backend = manager._backend(table)
    threads: list[tuple[str, int, bool]] = []  # (what, partition, on the loop's thread)
    loop_thread = threading.current_thread().name
    open_here = backend.open

    def open_watched(name: str, partition: int) -> Any:
        threads.append(("open", partition, threading.current_thread().name == loop_thread))
        time.sleep(0.05)  # (a slow disk: the other change is under way meanwhile)
        store = open_here(name, partition)
        close_here = store.close

        def close_watched() -> None:
            threads.append(("close", partition, threading.current_thread().name == loop_thread))
            close_here()

        store.close = close_watched  # type: ignore[method-assign]
        return store

    backend.open = open_watched  # type: ignore[method-assign]
    standbys = Standbys(manager)
    active: list[int] = []
    await standbys.settle(lambda: {0, 1}, lambda: active, lambda: [])
    assert sorted(standbys.tasks) == [0, 1]
    settling = asyncio.ensure_future(standbys.settle(lambda: {1, 2}, lambda: active, lambda: []))
    await asyncio.sleep(0.01)  # (the settle is closing 0, then opening 2)
    active.append(2)  # (as the task manager does before it asks for the task's state)
    state = await standbys.for_active(2)
    await settling
    assert sorted(standbys.tasks) == [1]  # 2 became active, its standby recycled
    assert sorted(state.stores) == [TP(table.changelog_topic.name, 2)]
    assert threads == [("open", 0, False), ("open", 1, False), ("close", 0, False), ("open", 2, False)]
    state.close()
    standbys.close()
    table.unbind(worker)


async def test_a_settle_cancelled_while_a_store_opens_in_its_thread_leaves_that_store_closed(tmp_path):
    """A worker stopping cancels a settle whose store is opening in a thread: the open goes on there, and the
    store it opens is closed then. Before, nothing closed it: RocksDB's lock was held until the collector
    freed it (for good while anything referred to it: the next open of it failed, "in use by this
    process"), and its close's flush skipped."""
    from engine.tasks.standbys import Standbys

    app = engine.App("standby-cancel", broker="memory://unused")
    table = app.Table("counts", default=int, key_type=str, value_type=int)
    table.bind(worker := object(), 4, {})
    manager = manager_of(app, tmp_path)
    backend = manager._backend(table)
    open_here = backend.open
    opened = threading.Event()
    closed: list[int] = []

    def open_slowly(name: str, partition: int) -> Any:
        time.sleep(0.2)
        store = open_here(name, partition)
        close_here = store.close

        def close_watched() -> None:
            closed.append(partition)
            close_here()

        store.close = close_watched  # type: ignore[method-assign]
        opened.set()
        return store

    backend.open = open_slowly  # type: ignore[method-assign]
    standbys = Standbys(manager)
    settling = asyncio.ensure_future(standbys.settle(lambda: {3}, lambda: [], lambda: []))
    await asyncio.sleep(0.05)  # (its store opening in a thread)
    settling.cancel()
    await asyncio.gather(settling, return_exceptions=True)
    assert standbys.tasks == {}
    deadline = time.monotonic() + 5
    while not closed:  # the thread's open goes on without the settle; then the store is closed on the loop
        assert time.monotonic() < deadline, "the store opened for a cancelled settle was never closed"
        await asyncio.sleep(0.01)
    assert opened.is_set()
    assert closed == [3]
    open_here(table.name, 3).close()  # (not "in use by this process")
    table.unbind(worker)
