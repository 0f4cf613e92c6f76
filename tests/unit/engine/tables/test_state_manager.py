"""A task's state manager (engine.tables.state) on fakes: its stores opened once, rebuilt empty, read as
table partitions, followed (its own changelogs only, or every store for the global tables), applying a
source topic's runs, and closed into the inventory of stores kept on disk; a table partition's unsent work
put back under newer writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.app import App
from engine.events import TP
from engine.stores.memory import MemoryStoreBackend
from engine.tables.partition import TablePartition
from engine.tables.state import StateManager


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    offset: int


class Stores:
    """The table manager's side: a memory backend, and what was opened, deleted and closed."""

    def __init__(self) -> None:
        self.backend = MemoryStoreBackend()
        self.opened: list[tuple[str, int]] = []
        self.destroyed: list[tuple[str, int]] = []
        self.closed: list[TP] = []

    def open_store(self, table: Any, number: int) -> Any:
        self.opened.append((table.name, number))
        return self.backend.open(table.name, number)

    def destroy_store(self, table: Any, number: int) -> None:
        self.destroyed.append((table.name, number))
        self.backend.destroy(table.name, number)

    def closed_store(self, table: Any, tp: TP, store: Any) -> None:
        self.closed.append(tp)
        store.close()


def tables() -> tuple[Any, Any]:
    app = App("state", broker="memory://")
    return app.Table("counts", default=int), app.Table("profiles", source_topic="profiles")


def test_stores_open_once_and_become_the_active_tasks_table_partitions() -> None:
    counts, profiles = tables()
    stores = Stores()
    state = StateManager("task 3", stores)  # type: ignore[arg-type]
    state.open([(counts, 3), (profiles, 3)])
    state.open([(counts, 3)])
    assert stores.opened == [("counts", 3), ("profiles", 3)], "an open store is kept, not reopened"
    parts = {table.name: part for table, part in state.partitions()}
    assert {name: part.number for name, part in parts.items()} == {"counts": 3, "profiles": 3}
    assert parts["counts"].store is state.store(counts, 3)


def test_a_follower_keeps_only_own_changelogs_current_but_for_the_global_tables() -> None:
    counts, profiles = tables()
    task = StateManager("task 0", Stores())  # type: ignore[arg-type]
    task.open([(counts, 0), (profiles, 0)])
    assert set(task.followed()) == {TP(counts.changelog_topic.name, 0)}, "a source topic: its task applies it"
    every = StateManager("global tables", Stores(), follows_sources=True)  # type: ignore[arg-type]
    every.open([(counts, 0), (profiles, 0)])
    assert set(every.followed()) == {TP(counts.changelog_topic.name, 0), TP("profiles", 0)}


def test_a_source_run_is_applied_to_its_tables_store_and_counts_in_the_position() -> None:
    counts, profiles = tables()
    state = StateManager("task 1", Stores())  # type: ignore[arg-type]
    state.open([(counts, 1), (profiles, 1)])
    assert state.position() == 0
    assert state.apply_source("profiles", [Record(b"k", b"1", 41), Record(b"j", b"2", 42)])
    store = state.store(profiles, 1)
    assert store is not None
    assert store.changelog_offset() == 42
    assert store.get(b"j") == b"2"
    assert state.position() == 43
    assert not state.apply_source("other-topic", [Record(b"k", b"1", 0)])
    assert not state.apply_source("profiles", [])


def test_a_store_that_does_not_fit_is_rebuilt_empty_and_closing_hands_every_store_back() -> None:
    counts, profiles = tables()
    stores = Stores()
    state = StateManager("task 2", stores)  # type: ignore[arg-type]
    state.open([(counts, 2), (profiles, 2)])
    tp = TP(counts.changelog_topic.name, 2)
    old = state.store(counts, 2)
    assert old is not None
    old.write({b"k": b"1"}, 7)
    fresh = state.rebuild(tp)
    assert stores.destroyed == [("counts", 2)]
    assert fresh.changelog_offset() is None
    assert fresh.get(b"k") is None
    state.close_sources()
    assert stores.closed == [TP("profiles", 2)], "a source table's store closes when its task stops running"
    state.close()
    assert stores.closed == [TP("profiles", 2), tp]
    assert state.stores == {}


def test_unsent_work_goes_back_under_newer_writes() -> None:
    counts, _ = tables()
    part = TablePartition(0, MemoryStoreBackend().open("counts", 0), counts.value_codec)
    part.set("a", 1)
    part.set("b", 1)
    part.meta[b"m"] = b"old"
    part.late = [Record(b"x", b"1", 1)]  # type: ignore[list-item]
    writes, meta = part.take_buffer(), part.take_meta()
    late = part.take_late()
    part.set("a", 2)  # written while the checkpoint ran
    part.put_back(writes, meta, [(b"w", b"v", 5)], late)
    assert part.buffer == {"a": 2, "b": 1}, "the newer write wins"
    assert part.meta == {b"m": b"old"}
    assert part.flushing is None
    assert part.take_closes() == [(b"w", b"v", 5)]
    assert [record.offset for record in part.take_late()] == [1]


def test_a_store_that_reflects_input_past_where_its_task_resumes_is_rebuilt_and_said(caplog) -> None:
    """Under exactly-once a store holds only committed writes, with the input offsets they committed with:
    one ahead of where its task resumes reflects a commit the broker lost (engine.tables.state)."""
    counts, profiles = tables()
    stores = Stores()
    state = StateManager("task 3", stores)  # type: ignore[arg-type]
    state.open([(counts, 3), (profiles, 3)])
    words, clicks = TP("words", 3), TP("clicks", 3)
    state.store(counts, 3).write({b"a": b"5"}, 7, {words: 120, clicks: 40})  # type: ignore[union-attr]
    state.store(counts, 3).write({b"a": b"6"}, 8, {words: 130})  # type: ignore[union-attr]
    state.store(profiles, 3).write({b"p": b"1"}, 2, {words: 100})  # type: ignore[union-attr]
    assert state.store(counts, 3).input_offsets() == {words: 130, clicks: 40}  # type: ignore[union-attr]

    assert state.rebuild_ahead_of({words: 130, clicks: 40}) == [], "where it resumes: kept"
    assert state.rebuild_ahead_of({TP("other", 3): 0}) == [], "inputs of no start here: kept"
    assert stores.destroyed == []
    with caplog.at_level("WARNING", logger="engine.tables.state"):
        rebuilt = state.rebuild_ahead_of({words: 110, clicks: 40})
    assert rebuilt == [TP(counts.changelog_topic.name, 3)], "only the store ahead of its input"
    assert stores.destroyed == [("counts", 3)]
    assert list(state.store(counts, 3).items()) == []  # type: ignore[union-attr]
    assert state.store(counts, 3).input_offsets() == {}  # type: ignore[union-attr]
    assert "words[3] at 130, resuming at 110" in caplog.text
    assert "task 3" in caplog.text
