"""A task releasing its inputs in timestamp order: the task chooses its next records (Kafka Streams'
PartitionGroup, owned by its StreamTask).

A task with a table's source topic or a stream-stream join's streams among its inputs is given its fetched
batches (`buffer`) and asked to release them (`run`). It takes the runs its buffers' order allows
(engine.tasks.inputs: the oldest head first, KIP-695's readiness rule, ties to the table's records) and
releases them in that order:

- A stream's runs go to agents through whoever fetched them (`Delivery`, engine.fetch.handover): consecutive
  runs for one mailbox are decoded and handed over together, a run that cannot be gathered is dispatched
  alone.
- A table's run is applied to its store by the task, once every event of the task handed over before it
  was processed (and not while the quiesce gate is closed), so each event sees the table as of its own time,
  over a backlog as live. Until then the task waits in the background (WAITING) and releases nothing. Once
  applied, the run goes to the agents that read the table's topic, if any (a table join following the
  table's changes): they see each change with the table already holding it, as they would its changelog.
- The topics from which several agents use one table (the topology's `serial`: the inventory example's
  shipments and sales, both keeping `stock`) are released in timestamp order too, and a run of one of them
  goes to its agent only once the events of the task's other such topics are processed: the table sees the
  events of both in timestamp order, over a backlog as live, as one Kafka Streams task processes all its
  inputs. The task waits for them as for a table's run; a choice of runs never mixes two such topics
  (TaskInputs.next_runs, `apart`), so what waits was not taken.
- While a batch of the task is parked (its mailbox full), nothing else of the task is released: an agent
  reading two of its inputs would otherwise get one's next records before the other's parked ones. The
  fetch asks the task to go on once the batch is handed over (`unparked`).

An input with much buffered (ORDERING_BUFFERS times max_poll_records) is held back (left out of the
consumer's fetches, what was fetched of it kept) until the task released it down to one fetch's worth:
memory stays bounded while another input catches up.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Collection, Coroutine, Mapping, Sequence

    from engine.events import TP, RawRecord
    from engine.streams.quiesce import Quiesce
    from engine.tasks.active import ActiveTask
    from engine.tasks.inputs import TaskInputs
    from engine.tasks.leases import Lease
    from engine.tasks.pauses import Pauses

    Run = tuple[TP, list[RawRecord]]

log = logging.getLogger(__name__)

ORDERING = "ordering"  # the Pauses reason of an input held back while it has much buffered
ORDERING_BUFFERS = 4  # held back with more than this many times max_poll_records buffered
FETCH_WAIT_WARNING = 30.0  # seconds a task's inputs wait for an empty input's records before a warning


class ReleaseState(enum.Enum):
    """Where a task's release stands: IDLE until asked (by the fetch loop, or once a parked batch is handed
    over), RELEASING while it hands runs over, WAITING while a table's run waits in the background for the
    events before it; a task is released by one of them at a time."""

    IDLE = "idle"
    RELEASING = "releasing"
    WAITING = "waiting"


class Handover(Protocol):
    """One pass of a task's release handing its streams' runs to agents (gathering runs for one mailbox
    across calls, until `flush`)."""

    async def deliver(self, runs: Sequence[Run], start: int) -> int:
        """Hand over `runs` from `start` on (a run of a partition revoked meanwhile dropped) until one is a
        table's (the task applies it) or a batch of the task is parked; returns where it stopped
        (len(runs) when all went). Where each partition's runs go is looked up once per `runs` (start 0)."""
        ...

    async def flush(self) -> None:
        """Hand over what was gathered."""
        ...

    async def applied(self, records: list[RawRecord], lease: Lease) -> bool:
        """Hand a table's run, applied to its store, to the agents that read the table's topic (a join
        following the table's changes, engine.tables.joins), tracked on `lease` until each acked it; False
        if no agent reads it."""
        ...


class Delivery(Protocol):
    """What a task's release needs of the fetching that fed it (engine.fetch.handover)."""

    async def lag(self, tp: TP) -> int | None:
        """Records of `tp` on the broker not fetched yet (None: not known yet)."""
        ...

    def handover(self, leases: Mapping[TP, Lease]) -> Handover:
        """A hand-over for one pass of the release of the task with these leases."""
        ...

    def parked(self, tps: Collection[TP]) -> bool:
        """Whether a batch of one of `tps` waits for room in a mailbox."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `coro` in the background, owned (awaited on stop) by the delivery."""
        ...


@dataclass(frozen=True, slots=True)
class Ordering:
    """What every task's release works with on one worker."""

    delivery: Delivery
    pauses: Pauses
    limit: int  # max_poll_records: about how many records one choice of runs takes
    quiesce: Quiesce | None  # the exactly-once gate: a table run that waited for events waits for it too
    serial: frozenset[str] = frozenset()  # topics from which several agents use one table


class TaskRelease:
    """The timestamp-ordered release of one task's inputs (`task.inputs`), and where it stands."""

    __slots__ = ("_task", "state")

    def __init__(self, task: ActiveTask) -> None:
        self._task = task
        self.state = ReleaseState.IDLE

    def buffer(self, tp: TP, records: list[RawRecord], ordering: Ordering) -> None:
        """Buffer records fetched of the input `tp`; hold it back while it has much buffered."""
        inputs = self._task.inputs
        assert inputs is not None
        inputs.add(tp, records)
        if inputs.buffered(tp) > ordering.limit * ORDERING_BUFFERS:
            ordering.pauses.hold([tp], ORDERING)  # bounded memory while the task's other inputs lag

    @property
    def due(self) -> bool:
        """Whether a release may start: none of the task's is under way or waits, and the task runs (while
        it is set up its partitions' positions are not sought yet, and asking their lag would wait for a
        position only the set-up gives)."""
        return self.state is ReleaseState.IDLE and self._task.ready

    def due_at(self, now: float) -> float | None:
        """The next loop time after `now` at which a release may go on or warn without new records (None:
        only records make it go on): the fetch loop waits no longer for them."""
        inputs = self._task.inputs
        return inputs.due(now, FETCH_WAIT_WARNING) if inputs is not None else None

    async def run(self, ordering: Ordering) -> None:
        """Release what the buffers' order allows, if a release is `due`."""
        if self._take_turn():
            await self._release(ordering)

    def unparked(self, ordering: Ordering) -> None:
        """A batch of the task was handed over after waiting for room: go on releasing (it stopped for it)."""
        if self._take_turn():
            ordering.delivery.spawn(self._release(ordering), f"ordering:{self._task.number}")

    def _take_turn(self) -> bool:
        """IDLE -> RELEASING if a release is `due`, in one step with the check: the release that starts
        later (spawned) holds its turn from now, so that the fetch loop's meanwhile finds it taken. Two
        releases of one task at once would interleave their runs, a partition's records out of order."""
        if not self.due:
            return False
        self.state = ReleaseState.RELEASING
        return True

    async def _release(self, ordering: Ordering) -> None:
        """Release the buffered runs in timestamp order, for as long as the order is known (the task's turn
        taken: RELEASING)."""
        task = self._task
        inputs = task.inputs
        assert inputs is not None
        assert self.state is ReleaseState.RELEASING
        delivery = ordering.delivery
        loop = asyncio.get_running_loop()
        # Consecutive runs for one mailbox (a stream-stream join's two streams, merged into one agent's
        # stream) are handed over together, each partition's records decoded in one call: interleaved by
        # time, runs are of one or two records, and a decode and a hand-over each cost more than the records.
        handover = delivery.handover(task.leases)
        try:
            while not task.closed:
                empty = inputs.empty()
                lags = {tp: await delivery.lag(tp) for tp in empty} if empty else {}
                now = loop.time()
                runs = inputs.next_runs(lags, now, ordering.limit, ordering.serial)
                if not runs:
                    if overdue := inputs.overdue(now, FETCH_WAIT_WARNING):
                        log.warning("task %d: its inputs, processed in timestamp order, have waited %.0f s "
                                    "for records not fetched yet of %s; they go on once those are fetched",
                                    task.number, FETCH_WAIT_WARNING, ", ".join(
                                        f"{tp.topic}[{tp.partition}] ({lags.get(tp)} on the broker)"
                                        for tp in overdue))
                    break
                if not await self._release_runs(runs, handover, ordering):
                    break
            await handover.flush()  # (every way out of the loop but an exception)
        finally:
            if self.state is ReleaseState.RELEASING:  # (WAITING: a table run waits in the background)
                self.state = ReleaseState.IDLE

    async def _release_runs(self, runs: list[Run], handover: Handover, ordering: Ordering) -> bool:
        """Release `runs` (in their order); False if the task must stop releasing (what is left of them is
        put back first)."""
        task = self._task
        inputs = task.inputs
        assert inputs is not None
        limit, pauses = ordering.limit, ordering.pauses
        for tp in {tp for tp, _ in runs}:
            if inputs.buffered(tp) <= limit:
                pauses.release([tp], ORDERING)
        if ordering.serial and await self._others_busy(runs, handover, ordering):
            return self._wait(runs, ordering)  # until the other agents of the table processed what they hold
        index = 0
        while (index := await handover.deliver(runs, index)) < len(runs):
            if ordering.delivery.parked(task.leases):
                # A batch of this task waits for room in a mailbox: nothing of the task may overtake it (an
                # agent reading two of its inputs would get them out of order). `unparked` goes on.
                _unread(inputs, runs[index:])
                return False
            tp, records = runs[index]  # a table's run
            lease = task.leases.get(tp)
            if lease is None or not lease.dispatching:
                index += 1
                continue  # revoked meanwhile: never applied
            await handover.flush()
            if any(other.in_flight for other in task.leases.values()):
                return self._wait(runs[index:], ordering)  # (this table run too) until they are processed
            if not task.apply_source(tp.topic, records):
                lease.track_many([record.offset for record in records])  # never applied: never committed
            elif not await handover.applied(records, lease):
                for record in records:  # no agent reads the table's topic: done once applied
                    lease.track(record.offset)
                    lease.ack(record.offset)
            index += 1
        return True

    def _wait(self, runs: Sequence[Run], ordering: Ordering) -> bool:
        """Put `runs` back and release them in the background once the events of the task handed over so
        far were processed (`_after_in_flight`); False: this release stops."""
        assert self._task.inputs is not None
        _unread(self._task.inputs, runs)
        self.state = ReleaseState.WAITING
        ordering.delivery.spawn(self._after_in_flight(ordering), f"ordering:{self._task.number}")
        return False

    async def _others_busy(self, runs: Sequence[Run], handover: Handover, ordering: Ordering) -> bool:
        """Whether `runs` are of a serial topic while events of another serial topic of the task are still
        being processed (what was gathered for them is handed over first: from then on they are tracked)."""
        mine = next((tp.topic for tp, _ in runs if tp.topic in ordering.serial), None)
        if mine is None:
            return False
        await handover.flush()
        return any(lease.in_flight for at, lease in self._task.leases.items()
                   if at.topic in ordering.serial and at.topic != mine)

    async def _after_in_flight(self, ordering: Ordering) -> None:
        """Wait until every event of the task handed over so far was processed and the quiesce gate is open,
        then release again (the table run that waited first)."""
        task = self._task
        try:
            for lease in list(task.leases.values()):
                await lease.drained()
            quiesce = ordering.quiesce
            if quiesce is not None and quiesce.closed:
                await quiesce.wait_open()
        except BaseException:
            self.state = ReleaseState.IDLE
            raise
        if task.closed:
            self.state = ReleaseState.IDLE
            return
        self.state = ReleaseState.RELEASING  # WAITING -> RELEASING: the turn stays this release's
        await self._release(ordering)


def _unread(inputs: TaskInputs, runs: Sequence[Run]) -> None:
    """Put runs taken but not released back in front of their buffers, as they were."""
    for tp, records in reversed(runs):
        inputs.unread(tp, records)
