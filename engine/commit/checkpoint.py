"""Checkpoints: one at a time, each a cut through offsets, table buffers and sends, committed or aborted.

The at-least-once rule: a partition's offset is committed only after everything the events before it caused
is durable. A checkpoint therefore
1. takes the cut (OPEN -> PREPARED): each active task's (engine.tasks) committable offsets and its table
   partitions' buffered writes and closed windows, in one synchronous step, so no event lands half in and
   half out;
2. has each task send its writes to the changelogs in its transaction (engine.commit.transactions) and makes
   the cut durable as the guarantee says (engine.commit.guarantee): at-least-once flushes what agents sent and
   commits those transactions, after asking the group whether this worker still belongs to it; exactly-once
   commits each task's transaction with everything agents sent in it and its source offsets (-> SENT). The
   changelog transactions are what fence a worker frozen mid-flush: the partitions' new owner started the same
   tasks' producers, so its stale records are aborted, never read;
3. writes the stores with the changelog offsets the records got, commits the offsets (at-least-once) and
   marks them committed on the leases (-> COMMITTED).
If step 2 fails the cut is ABORTED: its buffers go back under newer writes (nothing was committed past
them), to be sent by the next checkpoint.

Single flight, by construction: every checkpoint (the commit interval, a revoke, the final one on stop, a
lost partition's clean-up) runs under one lock, so two never interleave: a producer has one transaction in
flight, and a partition one flushing buffer.

Exactly-once needs agents between events when the cut is taken: the checkpoint closes the quiesce gate
(engine.streams.quiesce) and waits, bounded, for the agents inside an event. Past the bound it goes on without
the tasks those events belong to: their offsets, buffered writes and closed windows stay out of the cut and
their transactions stay open (whatever the event sent so far is in there), while every other task commits. The
guarantee never weakens: a task commits only at a point where none of its events is half done. Later
checkpoints do not wait for an event already found stuck; they skip its task again until it finishes. If the
broker aborts the open transaction meanwhile (its transaction timeout), the task's next commit fails and the
task is rewound to its last commit (engine.tasks.manager).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.errors import CheckpointError, TransactionAborted, TransactionsFailed, TransportError
from engine.stats import Histogram

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from engine.commit.cut import CutTask, TaskCut
    from engine.commit.guarantee import Guarantee
    from engine.events import TP, Event
    from engine.tables.base import BaseTable
    from engine.tracing import Tracing
    from engine.transport.base import Consumer

log = logging.getLogger(__name__)


class CheckpointState(enum.Enum):
    OPEN = "open"
    PREPARED = "prepared"
    SENT = "sent"
    COMMITTED = "committed"
    ABORTED = "aborted"


_NEXT = {
    CheckpointState.OPEN: {CheckpointState.PREPARED},
    CheckpointState.PREPARED: {CheckpointState.SENT, CheckpointState.ABORTED},
    CheckpointState.SENT: {CheckpointState.COMMITTED},
    CheckpointState.COMMITTED: set(),
    CheckpointState.ABORTED: set(),
}


@dataclass
class Checkpoint:
    """One cut: each task's part (offsets with their leases, table writes)."""

    cuts: list[TaskCut] = field(default_factory=list)
    state: CheckpointState = CheckpointState.OPEN
    failed: dict[int, BaseException] = field(default_factory=dict)  # tasks whose transaction did not commit

    def to(self, state: CheckpointState) -> None:
        if state not in _NEXT[self.state]:
            raise CheckpointError(f"checkpoint cannot go from {self.state.value} to {state.value}")
        self.state = state

    @property
    def empty(self) -> bool:
        return all(cut.empty for cut in self.cuts)

    def offsets(self) -> dict[TP, int]:
        return {tp: offset for cut in self.cuts for tp, (_, offset) in cut.offsets.items()}


class Checkpointer:
    def __init__(
        self,
        *,
        tasks: Mapping[int, CutTask],
        consumer: Consumer,
        guarantee: Guarantee,
        global_tables: Collection[BaseTable] = (),
        held: Callable[[str, Event], None] = lambda agent, event: None,
        committed: Callable[[Mapping[TP, int]], None] = lambda offsets: None,
        tracing: Tracing | None = None,
    ) -> None:
        """`held`: told of each event a cut goes on without (and its agent): its task's transaction stays
        open; `committed`: told the offsets each checkpoint committed; `tracing`: where the span of a
        checkpoint that commits something or fails goes."""
        self.tracing = tracing
        self.tasks = tasks  # the task manager's active tasks
        self._held = held
        self._committed = committed
        self.global_tables = [t for t in global_tables if t.has_own_changelog]
        self.consumer = consumer
        self.guarantee = guarantee
        self.lock = asyncio.Lock()
        self.durations = Histogram()  # seconds per checkpoint, pause included (for /metrics)
        self.failures = 0
        self.current: Checkpoint | None = None  # the one between its cut and its end, for /status

    async def run(self, pause_timeout: float, only: Collection[TP] | None = None) -> Checkpoint:
        """Checkpoint (the offsets of `only`, or of every task); one at a time."""
        async with self.lock:
            return await self.run_locked(pause_timeout, only)

    async def run_locked(self, pause_timeout: float, only: Collection[TP] | None = None) -> Checkpoint:
        """`run` for a caller that already holds `lock`."""
        guarantee = self.guarantee
        if guarantee.commits_every_task:
            only = None
        started = time.perf_counter()
        began = time.time_ns()  # (the clock spans are stamped with)
        inside: Sequence[tuple[str, Event]] = ()
        try:
            inside = await guarantee.pause(pause_timeout)
            for agent, event in inside:
                self._held(agent, event)
            try:
                cut = await self._checkpoint(only, frozenset(event.partition for _, event in inside))
            finally:
                guarantee.resume()
        except Exception as exc:
            self.failures += 1
            if self.tracing is not None:
                self.tracing.checkpoint(began, {"engine.checkpoint.held_tasks": len(inside)}, exc)
            raise
        finally:
            self.durations.observe(time.perf_counter() - started)
        if self.tracing is not None and not cut.empty:
            self.tracing.checkpoint(began, {"engine.checkpoint.tasks": len(cut.cuts),
                                            "engine.checkpoint.partitions": len(cut.offsets()),
                                            "engine.checkpoint.held_tasks": len(inside)})
        return cut

    async def _checkpoint(self, only: Collection[TP] | None, held: frozenset[int]) -> Checkpoint:
        """One cut; the tasks `held` (exactly-once: an event of theirs is in progress) stay out of it."""
        cut = Checkpoint([task.cut(only) for number, task in sorted(self.tasks.items())
                          if number not in held and task.ready])
        if cut.cuts:
            self._adopt_global_writes(cut)
        cut.to(CheckpointState.PREPARED)
        self.current = cut
        try:
            return await self._commit(cut)
        finally:
            self.current = None

    async def _commit(self, cut: Checkpoint) -> Checkpoint:
        """Send and commit a prepared cut, as the guarantee says, then complete it."""
        guarantee = self.guarantee
        if cut.empty and not guarantee.commits_empty_cuts:
            cut.to(CheckpointState.SENT)
            cut.to(CheckpointState.COMMITTED)
            return cut
        try:
            await guarantee.before_send(self.consumer)
            failed: dict[int, BaseException] = {}
            for part in cut.cuts:
                try:
                    await part.task.send(part)
                except TransactionAborted as exc:  # its transaction takes no more records: failed
                    failed[part.task.number] = exc
            failed = await guarantee.commit(self.consumer, cut.cuts, failed)
            if failed:
                raise TransactionsFailed(failed)
        except TransactionsFailed as exc:
            # Per task: the tasks that committed are done; the failed ones roll back to their last commit
            # (their writes are dropped, not retried: their events are processed again).
            self._split(cut, exc.failed)
        except BaseException:
            cut.to(CheckpointState.ABORTED)
            for part in cut.cuts:
                part.task.abort(part)
            raise
        cut.to(CheckpointState.SENT)
        for part in cut.cuts:
            part.task.complete(part)
        committed = True
        offsets = cut.offsets()
        try:  # the stores hold the data; only the offsets may lag: retried next time
            await guarantee.commit_offsets(self.consumer, offsets)
        except TransportError as exc:
            log.warning("commit of %d partitions failed (%s); will retry", len(offsets), exc)
            committed = False
        if committed:
            for part in cut.cuts:
                part.task.offsets_committed(part)
            self._committed(offsets)
        cut.to(CheckpointState.COMMITTED)
        if cut.failed:
            raise TransactionsFailed(cut.failed)
        return cut

    def _adopt_global_writes(self, cut: Checkpoint) -> None:
        """Writes agents made to global tables (any key, from any task's event) belong to no task: each
        partition's go with the task of its number if it is in this cut, else with the first task that is.
        Under exactly-once they therefore commit with that task's offsets, not necessarily with those of
        the events that made them (docs/tables.md: global tables)."""
        by_number = {task_cut.task.number: task_cut for task_cut in cut.cuts}
        first = cut.cuts[0]
        for table in self.global_tables:
            for number, partition in table.active.items():
                owner = by_number.get(number, first)
                owner.task.take(owner, table, partition)

    @staticmethod
    def _split(cut: Checkpoint, failed: dict[int, BaseException]) -> None:
        """Take the failed tasks out of `cut`: their writes are discarded, their offsets not marked, and each
        of them stops until it is rewound (`CutTask.drop`)."""
        cut.failed = dict(failed)
        for part in cut.cuts:
            if part.task.number in failed:
                part.task.drop(part)
        cut.cuts = [part for part in cut.cuts if part.task.number not in failed]
