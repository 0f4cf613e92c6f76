"""A task's life, as a state machine with its legal transitions (Kafka Streams' task states, without the
suspended one: engine closes a revoked task once its last checkpoint ran, and a task assigned again is a new
task).

    CREATED ──▶ RESTORING ──▶ RUNNING ──▶ FAILED
       │            │            │           │
       └────────────┴────────────┴───────────┴──▶ CLOSED

- CREATED: its leases granted, nothing of it set up; its partitions are paused.
- RESTORING: being set up (an active task: its producer started, fencing earlier owners, its offsets sought,
  its stores recovered; a standby: its stores opened); its events wait.
- RUNNING: an active task's events are processed and checkpoints include it; a standby's stores follow
  their changelogs.
- FAILED: an active task whose transaction did not commit: from that moment nothing of it is applied, sent or
  committed (its leases ended, its buffers and window state dropped, its open transaction never committed),
  until the task manager rewinds it to its last commit or lets it go as lost; either closes it.
- CLOSED: nothing of it is applied, sent or committed any more (a clean close checkpointed first); its
  stores were handed to the table manager, or to the active task a standby was recycled into.

Every change goes through `Lifecycle.to`, which refuses an illegal one: a bug, never a condition to handle.
"""

from __future__ import annotations

import enum

from engine.errors import IllegalTaskTransition


class TaskState(enum.Enum):
    CREATED = "created"
    RESTORING = "restoring"
    RUNNING = "running"
    FAILED = "failed"
    CLOSED = "closed"


_NEXT = {
    TaskState.CREATED: frozenset({TaskState.RESTORING, TaskState.CLOSED}),
    TaskState.RESTORING: frozenset({TaskState.RUNNING, TaskState.CLOSED}),
    TaskState.RUNNING: frozenset({TaskState.FAILED, TaskState.CLOSED}),
    TaskState.FAILED: frozenset({TaskState.CLOSED}),
    TaskState.CLOSED: frozenset(),
}


class Lifecycle:
    """The state of one task, changed only by `to`."""

    __slots__ = ("_state", "number")

    def __init__(self, number: int) -> None:
        self.number = number
        self._state = TaskState.CREATED

    @property
    def state(self) -> TaskState:
        return self._state

    @property
    def ready(self) -> bool:
        """Set up and not closed: an active task's events are processed, checkpoints include it."""
        return self._state is TaskState.RUNNING

    @property
    def closed(self) -> bool:
        return self._state is TaskState.CLOSED

    def to(self, state: TaskState) -> None:
        if state not in _NEXT[self._state]:
            raise IllegalTaskTransition(
                f"task {self.number} cannot go from {self._state.value} to {state.value}")
        self._state = state
