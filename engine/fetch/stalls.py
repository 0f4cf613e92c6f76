"""Where each ready task's partitions stand, for the stall watch (engine.monitors.watchdog) and `/status`:
what moves, what waits, and why a partition may wait (paused, parked, unanswered fetches, not fetched)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from engine.events import TP
    from engine.streams.quiesce import Quiesce
    from engine.tasks.active import ActiveTask
    from engine.tasks.pauses import Pauses
    from engine.transport.base import Consumer

# Seconds without an answer to a fetch of a partition that is fetched from (not paused) after which the stall
# watch counts it as waiting: a fetch is answered within fetch_max_wait (0.5 s) even when nothing is new.
FETCH_UNANSWERED = 15.0


@dataclass(frozen=True)
class PartitionState:
    """Where one partition of a ready task stands."""

    tp: TP
    position: int | None  # the next offset to commit: everything before it processed (None: nothing yet)
    committed: int | None  # what the last checkpoint committed
    in_flight: int  # records handed to agents and not finished
    buffered: int  # records fetched and held back for timestamp order
    lag: int | None  # records on the broker not fetched yet, as of the last fetch (None: not known)
    paused: tuple[str, ...]  # why it is not fetched from: pauses' reasons, "parked" (a full mailbox)
    unanswered: float | None  # seconds without an answer to a fetch, once past FETCH_UNANSWERED
    in_assignment: bool  # in the consumer's assignment (a ready task's partition that is not gets nothing)

    @property
    def waiting(self) -> bool:
        """Whether work waits for it: records buffered, in flight, on the broker, or it is not fetched."""
        return bool(self.buffered or self.in_flight or self.lag or self.unanswered is not None
                    or not self.in_assignment)

    def text(self) -> str:
        tp = self.tp
        return (f"{tp.topic}[{tp.partition}] at {self.position}, {self.in_flight} in flight, "
                f"{self.buffered} buffered, lag {'unknown' if self.lag is None else self.lag}"
                + (f", paused ({', '.join(self.paused)})" if self.paused else "")
                + (f", no fetch answered for {self.unanswered:.0f} s" if self.unanswered is not None else "")
                + ("" if self.in_assignment else ", not in the consumer's assignment"))


@dataclass(frozen=True)
class TaskState:
    """Where a ready task stands: a token that changes whenever it moves (records acked or handed over),
    whether work waits for it, its partitions, its timestamp order's state (of a task reading several
    topics in order), and whether agents are quiesced for a checkpoint."""

    token: object
    partitions: tuple[PartitionState, ...]
    ordering: str | None
    quiesced: bool

    @property
    def waiting(self) -> bool:
        return any(partition.waiting for partition in self.partitions)

    @property
    def where(self) -> str:
        """Each partition's state, and what else may hold the task, as the stall watch and `/status` say."""
        parts = [partition.text() for partition in self.partitions]
        if self.ordering is not None:
            parts.append(f"timestamp order: {self.ordering}")
        if self.quiesced:
            parts.append("agents quiesced for a checkpoint")
        return "; ".join(parts)


async def task_states(tasks: Mapping[int, ActiveTask], consumer: Consumer, pauses: Pauses,
                      parked: Callable[[Collection[TP]], bool], quiesce: Quiesce | None
                      ) -> dict[int, TaskState]:
    """Each ready task's state (`parked`: whether a partition's batch waits for room in a mailbox)."""
    states: dict[int, TaskState] = {}
    now = time.time()
    fetching = consumer.assignment()
    for number, task in sorted(tasks.items()):
        if not task.ready or task.closed:
            continue
        inputs = task.inputs
        moved, parts = [], []
        for tp, lease in sorted(task.leases.items()):
            buffered = inputs.buffered(tp) if inputs is not None and tp in inputs.inputs else 0
            paused = (*sorted(pauses.reasons(tp)), *(("parked",) if parked((tp,)) else ()))
            # A partition fetched from (not paused) whose fetches the broker stopped answering: its lag is as
            # of its last answer, and may read 0 however much waits on the broker.
            fetched_at = consumer.fetched_at(tp)
            unanswered = None if fetched_at is None or paused else now - fetched_at
            moved.append((lease.position, lease.in_flight, buffered))
            lag = await consumer.lag(tp)
            parts.append(PartitionState(
                tp, lease.position, lease.committed, lease.in_flight, buffered, lag, paused,
                unanswered if unanswered is not None and unanswered > FETCH_UNANSWERED else None,
                tp in fetching))
        states[number] = TaskState(tuple(moved), tuple(parts),
                                   task.release.state.value if inputs is not None else None,
                                   quiesce is not None and quiesce.closed)
    return states
