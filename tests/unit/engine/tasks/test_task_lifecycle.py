"""A task's life (engine.tasks.lifecycle): the legal transitions, and an illegal one refused by name."""

from __future__ import annotations

import pytest

from engine.commit.cut import TaskCut
from engine.errors import IllegalTaskTransition
from engine.tasks.active import ActiveTask
from engine.tasks.lifecycle import TaskState


def test_an_active_task_is_created_restored_run_and_closed() -> None:
    task = ActiveTask(3)
    assert task.state is TaskState.CREATED
    assert not task.ready
    assert not task.closed
    task.restoring()
    assert task.state is TaskState.RESTORING
    assert not task.ready
    task.open()
    assert task.state is TaskState.RUNNING
    assert task.ready
    task.close()
    assert task.state is TaskState.CLOSED
    assert task.closed
    assert not task.ready


@pytest.mark.parametrize("steps", [0, 1, 2])
def test_a_task_closes_from_every_state_but_closed(steps: int) -> None:
    task = ActiveTask(0)
    if steps >= 1:
        task.restoring()
    if steps >= 2:
        task.open()
    task.close()
    assert task.closed
    with pytest.raises(IllegalTaskTransition, match="task 0 cannot go from closed to closed"):
        task.close()


def test_illegal_transitions_are_refused_naming_the_task_and_both_states() -> None:
    task = ActiveTask(7)
    with pytest.raises(IllegalTaskTransition, match="task 7 cannot go from created to running"):
        task.open()
    task.restoring()
    with pytest.raises(IllegalTaskTransition, match="from restoring to restoring"):
        task.restoring()
    task.open()
    with pytest.raises(IllegalTaskTransition, match="from running to restoring"):
        task.restoring()


def test_a_task_owns_its_state_manager_from_set_up_to_close_and_hands_it_back() -> None:
    from engine.app import App
    from engine.stores.memory import MemoryStoreBackend
    from engine.tables.state import StateManager

    class Stores:
        backend = MemoryStoreBackend()

        def open_store(self, table: object, number: int) -> object:
            return self.backend.open("counts", number)

    app = App("lifecycle", broker="memory://")
    table = app.Table("counts", default=int)
    state = StateManager("task 2", Stores())  # type: ignore[arg-type]
    state.open([(table, 2)])
    task = ActiveTask(2)
    task.restoring(state)
    assert 2 not in table.active, "nothing of it is read before it is set up"
    task.open()
    part = table.active[2]
    assert part.store is state.store(table, 2)
    assert task.close() is state
    assert 2 not in table.active
    assert task.partitions == []
    assert task.state_manager is None


def test_a_running_task_whose_commit_failed_fails_then_closes() -> None:
    task = ActiveTask(2)
    task.restoring()
    task.open()
    task.drop(TaskCut(task))
    assert task.state is TaskState.FAILED
    assert not task.ready, "checkpoints leave it out"
    assert not task.closed, "the task manager closes it (rewound or lost)"
    task.close()
    assert task.closed
