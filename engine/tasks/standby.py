"""A standby task: a warm copy of task n's tables on this worker, kept current by following their changelogs.

The group's assignment (engine.assignor) names the standby tasks of each worker (`standby_replicas` per task,
or a warm-up before the task moves here). A standby task owns a state manager (engine.tables.state) whose
stores the table manager's follower keeps current. When n becomes active here the standby is recycled, not
closed: its state manager goes to the active task, stores open, and only the tail of each changelog is
replayed (Kafka Streams' "recycle").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.tasks.lifecycle import Lifecycle, TaskState

if TYPE_CHECKING:
    from engine.tables.state import StateManager


class StandbyTask(Lifecycle):
    """Task `number` as a standby here: created with its state manager, running while its stores follow
    their changelogs, closed when recycled into an active task or no longer wanted here."""

    def __init__(self, number: int, state_manager: StateManager) -> None:
        super().__init__(number)
        self.state_manager = state_manager

    def __repr__(self) -> str:
        return f"<StandbyTask {self.number}: {self.state.value}, {self.state_manager}>"

    def start(self) -> None:
        """Its stores are open and handed to the follower."""
        self.to(TaskState.RESTORING)
        self.to(TaskState.RUNNING)

    def close(self) -> StateManager:
        """Stop being a standby; returns the state manager, for the active task it recycles into or to
        close."""
        self.to(TaskState.CLOSED)
        return self.state_manager
