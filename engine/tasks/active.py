"""An active task: everything of one partition number assigned to this worker, and its part of a checkpoint.

Tables are partitioned like the streams that write them, so partition n of every source topic, partition n
of every table (plain or windowed: buffers, window state, late records, closed windows not yet sent) and the
transaction all of it commits in (`<app>-task-<n>`, engine.commit.transactions) belong together: they are task
n. A task holds them for one assignment (the generation of its leases); when it closes, nothing of it is left
anywhere else, so a later owner of n, here or elsewhere, starts from what was committed and nothing more.

A checkpoint asks each task for its cut (`cut`: its leases' committable offsets and its table partitions'
buffered writes, closed windows and late records, in one synchronous step), has it `send` them in its
transaction, commits the transaction as the guarantee says (engine.commit.guarantee), then `complete`s it: the
stores are written with the changelog offsets the records got. A cut whose checkpoint failed as a whole is
`abort`ed (its writes go back under newer ones, sent by the next checkpoint); a task whose own transaction
failed has its cut `drop`ped and fails with it: nothing more of it is applied, sent or committed until the
task manager rewinds it (its events are processed again) or lets it go.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING

from engine.commit.cut import TableWrites, TaskCut
from engine.errors import PartitionMigrated
from engine.events import TP
from engine.tables.partition import DELETED
from engine.tasks.lifecycle import Lifecycle, TaskState
from engine.tasks.release import TaskRelease

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from engine.events import RawRecord
    from engine.tables.base import BaseTable
    from engine.tables.partition import Closed, TablePartition
    from engine.tables.state import StateManager
    from engine.tasks.inputs import TaskInputs
    from engine.tasks.leases import Lease
    from engine.transport.base import Producer


class ActiveTask(Lifecycle):
    """Task `number` while assigned here: its leases (one per source partition numbered n), its table
    partitions once recovered, and its producer (started, fencing every earlier owner, before anything of
    the task is read). Its life: engine.tasks.lifecycle."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.leases: dict[TP, Lease] = {}
        self.producer: Producer | None = None
        # Since when (the monotonic clock) its transaction is open: its producer's start, then its last
        # commit here. An event held past the transaction timeout gets it aborted (engine.tasks.poison).
        self.transaction_opened: float | None = None
        self.partitions: list[tuple[BaseTable, TablePartition]] = []
        self.state_manager: StateManager | None = None  # its stores (engine.tables.state), once set up
        # With a table's source topic or a stream-stream join's streams among its inputs: its buffered
        # batches, which the task releases in timestamp order (`release`).
        self.inputs: TaskInputs | None = None
        self.release = TaskRelease(self)

    def __repr__(self) -> str:
        return (f"<ActiveTask {self.number}: {self.state.value}, {len(self.leases)} partitions, "
                f"{len(self.partitions)} tables>")

    # -- lifecycle (driven by the task manager) -----------------------------------------------------

    def restoring(self, state_manager: StateManager | None = None) -> None:
        """Its set-up starts (producer, offsets, the stores of `state_manager`, open and to be restored);
        its partitions stay paused until `open`."""
        self.to(TaskState.RESTORING)
        self.state_manager = state_manager

    def open(self) -> None:
        """The task is set up (its producer started, its offsets sought, the stores of its state manager
        restored): from now on its events read and write their table partitions, and checkpoints include
        it."""
        self.to(TaskState.RUNNING)
        state_manager = self.state_manager
        self.partitions = state_manager.partitions() if state_manager is not None else []
        for table, part in self.partitions:
            table.attach(part)

    def close(self) -> StateManager | None:
        """End every lease and take the table partitions out of their tables, buffers and window state
        with them: nothing of the task is applied, sent or committed any more (a clean close checkpoints
        first). Returns its state manager, stores open, for the task manager to keep warm or close; its
        producer is stopped by the task manager (`stop_producer`)."""
        self.to(TaskState.CLOSED)
        self._let_go()
        state_manager, self.state_manager = self.state_manager, None
        return state_manager

    def _let_go(self) -> None:
        """End every lease and take the table partitions out of their tables, buffers and window state with
        them: from here on no event of the task is applied, and no checkpoint has anything of it."""
        if self.inputs is not None:
            self.inputs.clear()  # never dispatched nor tracked: the next owner reads them
        for lease in self.leases.values():
            lease.end()
        for table, part in self.partitions:
            table.detach(part)
        self.partitions = []

    def apply_source(self, topic: str, records: list[RawRecord]) -> bool:
        """Apply a run of a table's source topic to this task's partition of the table (the topic is its
        changelog: data and offset in one batch); False unless the task runs here with that table."""
        state_manager = self.state_manager
        return self.ready and state_manager is not None and state_manager.apply_source(topic, records)

    async def stop_producer(self) -> None:
        """After the last commit, or once lost (its open transaction is aborted by the next owner's fence)."""
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.stop()

    # -- its part of a checkpoint -------------------------------------------------------------------

    def at_rest_until(self) -> float | None:
        """Until when (wall clock) checkpoints have nothing of this task to do unless new records or a
        timer's run give them some: None if they have now (something in flight, buffered or uncommitted),
        math.inf if only activity will, else the time the clock alone gives a windowed table work
        (`close_idle_after`: a window closes or expires). Read after a checkpoint, not per event."""
        if any(lease.in_flight or lease.committable() is not None
               for lease in self.leases.values() if not lease.ended):
            return None
        if self.inputs is not None and self.inputs.buffering:
            return None
        until = math.inf
        for table, part in self.partitions:
            if part.writes() or part.meta or part.late or part.unsent_closes:
                return None
            if table.windowed is not None:
                at = table.windowed.clock_work_at(part)
                if at is not None:
                    until = min(until, at)
        return until

    def cut(self, only: Collection[TP] | None = None) -> TaskCut:
        """The committable offsets (of the partitions `only`, if given) and every table partition's buffered
        writes. Windowed tables first advance stream time to what the task's leases processed (the events
        that did not write the table included), then close and expire windows."""
        cut = TaskCut(self)
        for tp, lease in self.leases.items():
            if not lease.ended and (only is None or tp in only):
                offset = lease.committable()
                if offset is not None:
                    cut.offsets[tp] = (lease, offset)
        for table, part in self.partitions:
            if table.windowed is not None:  # every checkpoint: an idle partition's time may move too
                times = [at for topic in table.writers
                         if (writer := self.leases.get(TP(topic, self.number))) is not None
                         and (at := writer.processed_time()) is not None]
                table.windowed.advance(part, max(times) if times else None)
            self.take(cut, table, part)
        return cut

    @staticmethod
    def take(cut: TaskCut, table: BaseTable, part: TablePartition) -> None:
        """Add a table partition's buffered writes to `cut` (a windowed one's closed windows and late
        records too, once it closed and expired windows as of its stream time)."""
        closes: list[Closed] = []
        late: list[RawRecord] = []
        windowed = table.windowed
        if windowed is not None:
            closes = windowed.close_windows(part)  # before expiry can delete them
            windowed.expire(part)
            late = part.take_late()
        if part.writes() or part.meta or closes or late:
            cut.writes.append(TableWrites(table, part, part.take_buffer(), part.take_meta(), closes, late))

    async def send(self, cut: TaskCut) -> None:
        """Put the cut's writes on the changelogs (deletes as tombstones), its closed windows and late
        records on their topics, all in the task's transaction. Raises TransactionAborted when the broker
        aborted the transaction (it takes no more records)."""
        if not cut.writes:
            return
        producer = self.producer
        if producer is None:
            raise PartitionMigrated(f"task {self.number} has no producer: it is not owned here any more")
        for item in cut.writes:
            table = item.table
            encode_value = table.value_codec.encode
            for key, value in item.writes.items():
                item.encoded[table.locate(key)[0]] = None if value is DELETED else encode_value(value)
            item.encoded.update(item.meta)
            if item.encoded:
                item.last = await producer.send_batch(table.changelog_topic.name, item.part.number,
                                                      list(item.encoded.items()))
            windowed = table.windowed
            if item.closes and windowed is not None and windowed.closed_topic is not None:
                await producer.send_batch(windowed.closed_topic.name, item.part.number,
                                          [(key, value) for key, value, _ in item.closes],
                                          [at for _, _, at in item.closes])
            if item.late and windowed is not None and windowed.late_topic is not None:
                late = windowed.late_topic.name
                for record in item.late:
                    await producer.send(late, record.key, record.value, headers=list(record.headers),
                                        timestamp_ms=record.timestamp)

    def complete(self, cut: TaskCut) -> None:
        """The cut committed: write each batch to its store with the changelog offset it got and the input
        offsets it committed with (what a set-up under exactly-once checks the store against:
        engine.tasks.manager), and mark the offsets committed on the leases (once they are:
        `offsets_committed`)."""
        inputs = cut.committable()
        for item in cut.writes:
            if item.last is not None:  # (else only closed windows or late records were sent)
                assert item.last.done()
                item.part.store.write(item.encoded, item.last.result(), inputs)
                item.table.changelog_records += len(item.encoded)
            if item.closes:
                item.table.count_closed(item.part, len(item.closes))
            if item.table.windowed is not None:
                item.table.windowed.stored(item.part, item.writes)
            item.part.flushed()

    def offsets_committed(self, cut: TaskCut) -> None:
        self.transaction_opened = time.monotonic()  # (a new transaction from here)
        for lease, offset in cut.offsets.values():
            lease.mark_committed(offset)

    def drop(self, cut: TaskCut) -> None:
        """The task's transaction did not commit: the task fails (engine.tasks.lifecycle), the cut's writes
        with it. Its events since its last commit are processed again once the task manager rewinds it. Until
        then nothing of it may go on: the events after the cut would read its tables without the dropped
        writes, and any later checkpoint (a revoke's, the final one) would commit their offsets, which cover
        the dropped events too, and the open transaction, which holds part of the cut (at-least-once: counts
        below the truth for good). So its leases end now, its buffers go, and checkpoints leave it out."""
        for item in cut.writes:
            item.part.flushed()
        self.to(TaskState.FAILED)
        self._let_go()

    @staticmethod
    def abort(cut: TaskCut) -> None:
        """The checkpoint failed before anything committed: put the writes back under newer ones, to be sent
        by the next checkpoint."""
        for item in cut.writes:
            item.part.put_back(item.writes, item.meta, item.closes, item.late)


async def start_producers(make: Callable[[int], Producer], tasks: list[ActiveTask]) -> None:
    """Start a producer for each task (under exactly-once each start fences every earlier owner of the
    task's transactional id and aborts what it left open) and give it to the task. A producer whose task
    closed meanwhile is stopped; if any start failed, the first failure is raised after the others are
    settled, and a cancellation (a rebalance during set-up) stops them all."""
    producers = [make(task.number) for task in tasks]
    try:
        results = await asyncio.gather(*(p.start() for p in producers), return_exceptions=True)
    except asyncio.CancelledError:
        await asyncio.gather(*(p.stop() for p in producers), return_exceptions=True)
        raise
    failure = None
    for task, producer, result in zip(tasks, producers, results, strict=True):
        if isinstance(result, BaseException) or task.closed:
            failure = failure or (result if isinstance(result, BaseException) else None)
            await producer.stop()
        else:
            task.producer = producer
            task.transaction_opened = time.monotonic()
    if failure is not None:
        raise failure
