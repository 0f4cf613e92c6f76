"""The task manager: turns the group's assignments into tasks, and closes them the way they were taken away.

Kafka takes partitions away in two ways, and they are handled apart:
- revoked: a rebalance asks for them back while this worker still owns them. Their leases stop dispatching
  at once, queued events are dropped (uncommitted: the next owner reads them), the events agents hold get a
  bounded wait to finish (REVOKE_WAIT, well inside the group's rebalance timeout, or the member is expelled
  and the group ping-pongs), then the tasks are checkpointed and closed clean. An event still unfinished
  after the wait is never applied: its lease has ended.
- lost: the group moved on without this worker (its session expired: a frozen process, a long pause, a
  network split); another worker may own the partitions and be writing already. Their tasks are closed
  dirty: queued events and table buffers are dropped, nothing of them is written or committed.
- assigned: a new task per partition number (its leases a new generation); the partitions stay paused until
  the task is set up: its producer is started first (under exactly-once that fences the previous owner,
  engine.commit.transactions), only then are the committed offsets read and sought to, then its table
  partitions are recovered (a standby task of the same number is recycled: its stores stay open, only the tail
  is replayed). Then the partitions resume.
- a task whose transaction did not commit is rewound: if this worker is no longer a member of the group's
  generation (a newer owner may exist) it is lost; otherwise (the broker restarted, the transaction timed
  out, a fence by the broker's transaction timeout) it is closed dirty and set up again from its last
  commit, as if newly assigned, while the worker goes on.

It also runs the checkpoints (engine.commit.checkpoint) over its active tasks: every commit interval, on
revoke, for a live export, and a final one when the worker stops, after which every task closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from agents import Service, ServiceState
from engine.activity import Activity
from engine.errors import MembershipLost, ProducerFenced, TransactionsFailed
from engine.events import TP, describe
from engine.stats import Histogram
from engine.tasks.active import ActiveTask
from engine.tasks.commits import Commits
from engine.tasks.history import AssignmentHistory
from engine.tasks.inputs import InputPlan
from engine.tasks.lifecycle import TaskState
from engine.tasks.poison import PoisonRecords
from engine.tasks.setup import TaskSetUp
from engine.tasks.standbys import Standbys
from engine.tasks.starts import Starts

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from engine.assignor import Assignment
    from engine.commit.guarantee import Guarantee
    from engine.stores import PartitionStore
    from engine.tables.base import BaseTable
    from engine.tables.manager import TableManager
    from engine.tables.state import StateManager
    from engine.tasks.leases import Lease, Leases
    from engine.tasks.pauses import Pauses
    from engine.tasks.standby import StandbyTask
    from engine.tracing import Tracing
    from engine.transport.base import Consumer

log = logging.getLogger(__name__)

REVOKE_WAIT = 5.0  # seconds agents get to finish the events they hold when their partitions are revoked
RECOVERING = "recovering"


class TaskManager(Service):
    def __init__(
        self,
        *,
        leases: Leases,
        consumer: Consumer,
        pauses: Pauses,
        guarantee: Guarantee,
        tables: TableManager | None,
        drop_queued: Callable[[Collection[TP]], dict[TP, int]],
        commit_interval: float = 1.0,
        revoke_wait: float = REVOKE_WAIT,
        reset_to_end: bool = False,
        poison: PoisonRecords | None = None,
        inputs: InputPlan | None = None,
        active: dict[int, ActiveTask] | None = None,
        on_settled: Callable[[], None] = lambda: None,
        transaction_timeout: float | None = None,
        activity: Activity | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        """`active`: the worker's map of active tasks, which this keeps (the conductor and the guarantee read
        it); `inputs`: which topics tasks take in timestamp order; `on_settled`: called when a change of
        ownership finished; `transaction_timeout`: the broker's for the tasks' transactions (exactly-once),
        past which an event that holds its task's transaction open makes the broker abort it (poison);
        `activity`: the worker's (engine.activity), which wakes the commit loop and is told of commits;
        `tracing`: where the spans of checkpoints and changes of ownership go."""
        super().__init__("tasks")
        self.activity = activity if activity is not None else Activity()
        self.tracing = tracing
        self.inputs = inputs if inputs is not None else InputPlan()
        self.table_sources = self.inputs.table_sources  # source topics of tables: read from their start
        self.active: dict[int, ActiveTask] = active if active is not None else {}
        self.standbys = Standbys(tables) if tables is not None else None
        self.assignment: Assignment | None = None  # the group's last word on this worker
        self.poison = poison if poison is not None else PoisonRecords()
        # Where each partition of a task being set up starts, and those whose committed offset was gone
        # (engine.tasks.starts): the worker's /status shows them.
        self.starts = Starts(from_start=self.table_sources, latest=reset_to_end)
        self.guarantee = guarantee
        self.leases = leases
        self.consumer = consumer
        self.pauses = pauses
        self.commits = Commits(
            tasks=self.active, consumer=consumer, guarantee=guarantee,
            global_tables=[t for t in tables.tables.values() if t.is_global] if tables is not None else (),
            commit_interval=commit_interval, poison=self.poison, activity=self.activity,
            transaction_timeout=transaction_timeout, failed=self.tasks_failed, spawn=self.spawn,
            tracing=tracing)
        self.checkpoints = self.commits.checkpoints
        self.tables = tables
        self.set_up = TaskSetUp(active=self.active, consumer=consumer, starts=self.starts,
                                guarantee=guarantee, tables=tables, table_sources=self.table_sources)
        self._drop_queued = drop_queued
        self.revoke_wait = revoke_wait
        # The set-ups under way, with their partitions: one per assignment (a streams group's member is given
        # tasks while others are still being set up).
        self._recoveries: dict[asyncio.Task[None], set[TP]] = {}
        # One change of ownership at a time: the group's callbacks (assigned, revoked, lost) and the rewind
        # of tasks whose commit failed, so that a rewind never sets up partitions a revoke is taking away.
        self._ownership = asyncio.Lock()
        # For /metrics: assignments heard, and how long each change of ownership kept moving partitions
        # from being processed (from the revoke, or the assignment, to their tables being ready).
        self.rebalances = 0
        self.history = AssignmentHistory()  # what they moved, for the worker's page
        self.stalls = Histogram()
        self._moving_since: float | None = None
        self.on_settled = on_settled

    @property
    def stopping(self) -> bool:
        """While the worker stops, agents have let go of their events: a revoke does not wait for them."""
        return self.state is not ServiceState.RUNNING

    # -- checkpoints --------------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.spawn(self.commits.loop(), "commit")

    async def on_stop(self) -> None:
        if self.failure is None:
            try:
                await self.checkpoints.run(0)
            except Exception as exc:
                log.error("final checkpoint failed: %s", exc)
        await self.close_all()

    async def checkpoint(self) -> dict[TP, int]:
        """Checkpoint now (engine.tasks.commits.Commits.checkpoint)."""
        return await self.commits.checkpoint()

    # -- what the group's assignor tells this worker ------------------------------------------------

    def on_assignment(self, assignment: Assignment) -> None:
        """The group's assignment for this worker (heard before its partitions are assigned)."""
        self.assignment = assignment
        self.rebalances += 1
        self.history.heard(assignment.active, assignment.standby, time.time())  # (warming ones included)
        if self.tables is not None:
            self.tables.warming = assignment.warming
        log.info("assignment: active %s, standby %s, warming up %s", sorted(assignment.active),
                 sorted(assignment.standby - assignment.warming), sorted(assignment.warming))

    # -- assigned -----------------------------------------------------------------------------------

    async def assigned(self, tps: set[TP]) -> None:
        if self.state in (ServiceState.STOPPING, ServiceState.STOPPED):
            return  # (a streams group's member may still hear an assignment while the worker stops)
        async with self._ownership:
            with self._traced("assigned", tps):
                await self._or_fail(self._assigned(tps), "setting up the assigned partitions")

    def _traced(self, kind: str, tps: Collection[TP]) -> contextlib.AbstractContextManager[None]:
        """The span of a change of ownership, when the worker traces."""
        return self.tracing.rebalance(kind, tps) if self.tracing is not None else contextlib.nullcontext()

    async def _or_fail(self, step: Awaitable[None], what: str) -> None:
        """Run a step of a rebalance (the consumer's callbacks); its failure (a store that cannot be opened
        or written) stops the worker. The consumer calling it (aiokafka) would only log it and go on, its
        partitions half set up."""
        try:
            await step
        except Exception as exc:
            log.error("%s failed: %s: %s", what, type(exc).__name__, exc, exc_info=exc)
            self.fail(exc)

    def _moving(self) -> None:
        if self._moving_since is None:
            self._moving_since = time.monotonic()

    def _moved(self) -> None:
        if self._moving_since is not None:
            self.stalls.observe(time.monotonic() - self._moving_since)
            self._moving_since = None
        self.activity.signal()  # (tasks set up: their restored windows may close by the clock)
        self.on_settled()

    async def _assigned(self, tps: set[TP]) -> None:
        if tps:  # (none: a streams group's member heard only its standbys change)
            log.info("assigned %d partitions: %s", len(tps), describe(tps))
        self._moving()
        self.pauses.forget(tps)
        for lease in self.leases.grant(tps):
            task = self.active.get(lease.tp.partition)
            if task is None or task.closed:
                task = self.active[lease.tp.partition] = ActiveTask(lease.tp.partition)
            old = task.leases.get(lease.tp)
            if old is not None:
                old.end()
            task.leases[lease.tp] = lease
        for number in {tp.partition for tp in tps}:
            task = self.active[number]
            task.inputs = self.inputs.inputs(task.leases)  # (in timestamp order, or None)
        if not tps:
            if self.tables is not None:
                self.spawn(self._settle_standbys(), "standbys")
            self._moved()
            return
        fresh = [task for n in sorted({tp.partition for tp in tps})
                 if (task := self.active[n]).state is TaskState.CREATED]
        # Set up (sought from their committed offsets, fenced and recovered: engine.tasks.starts, stores
        # opened first) before any of their events is processed; a stateless app's too, so that a committed
        # offset the broker no longer has is said and followed the same way.
        self.pauses.hold(tps, RECOVERING)
        for task in fresh:
            state = await self.standbys.for_active(task.number) if self.standbys is not None else None
            if task.state is not TaskState.CREATED:  # closed while its stores opened: the worker stops
                if state is not None:
                    state.close()
                return  # (nothing more to set up: every task is closed)
            task.restoring(state)
        self._recover(tps)

    def _recover(self, tps: set[TP]) -> None:
        recovery = self.spawn(self._set_up(tps), "recover")
        self._recoveries[recovery] = tps
        recovery.add_done_callback(lambda done: self._recoveries.pop(done, None))

    async def _set_up(self, tps: set[TP]) -> None:
        await self.set_up.run(tps)
        resumable = {tp for tp in tps
                     if (lease := self.leases.current.get(tp)) is not None and lease.dispatching}
        self.pauses.release(resumable, RECOVERING)
        self._moved()
        log.info("tables ready; processing %d partitions", len(resumable))
        if self.tables is not None:  # once the tasks set up process (their partitions wait for no standby),
            self.spawn(self._settle_standbys(), "standbys")  # and apart from the set-up: a revoke meanwhile
            # cancels (and starts again) the set-up of the partitions it leaves, never a settle

    @property
    def standby(self) -> dict[int, StandbyTask]:
        """The standby tasks here (engine.tasks.standbys)."""
        return self.standbys.tasks if self.standbys is not None else {}

    @property
    def warm(self) -> dict[int, StateManager]:
        """The state managers of tasks revoked here, kept warm until the next assignment."""
        return self.standbys.warm if self.standbys is not None else {}

    async def _settle_standbys(self) -> None:
        """After an assignment: the standby tasks it names, the others' stores closed."""
        assert self.standbys is not None
        await self.standbys.settle(
            lambda: self.assignment.standby if self.assignment is not None else frozenset(),
            lambda: [n for n, task in self.active.items() if not task.closed],
            lambda: [state for _, state in self._active_states()])

    def _active_states(self) -> list[tuple[int, StateManager]]:
        return [(n, task.state_manager) for n, task in self.active.items() if task.state_manager is not None]

    def positions(self) -> dict[int, int]:
        """How far the stores of each task here have read their changelogs (Standbys.positions)."""
        return self.standbys.positions(self._active_states()) if self.standbys is not None else {}

    def standby_store(self, table: BaseTable, number: int) -> PartitionStore | None:
        """The store of a table partition this worker keeps current without owning it (a standby's, or one
        kept warm since its revoke), or None: what `?stale=ok` queries read."""
        return self.standbys.store(table, number) if self.standbys is not None else None

    # -- revoked, lost, failed ----------------------------------------------------------------------

    async def revoked(self, tps: set[TP]) -> None:
        """Still the owner: finish what agents hold (bounded), checkpoint, close clean."""
        async with self._ownership:
            with self._traced("revoked", tps):
                await self._or_fail(self._revoked(tps), "the revoke")

    async def _revoked(self, tps: set[TP]) -> None:
        log.info("revoked %d partitions: %s", len(tps), describe(tps))
        self._moving()
        self.poison.lost(tps)
        started = time.monotonic()
        leases = self.leases.revoke(tps)
        dropped = self._drop_queued(tps)
        deadline = started + (0 if self.stopping else self.revoke_wait)

        def unfinished(lease: Lease) -> bool:  # agents hold events of it (not dropped, not abandoned)
            return not lease.ended and lease.in_flight > dropped.get(lease.tp, 0) + lease.abandoned

        while time.monotonic() < deadline and any(  # noqa: ASYNC110  # acks come from many places; polling is simplest
            unfinished(lease) for lease in leases
        ):
            await asyncio.sleep(0.01)
        held = [lease for lease in leases if unfinished(lease)]
        if held:
            counts = "; ".join(f"{lease.tp.topic}[{lease.tp.partition}]: {lease.in_flight} in flight, "
                               f"{dropped.get(lease.tp, 0)} dropped, {lease.abandoned} never handed over"
                               for lease in held)
            log.warning("agents did not finish their events of %s within %.1fs of the revoke (%s); those "
                        "events are left to the partitions' next owner",
                        describe([lease.tp for lease in held]), self.revoke_wait, counts)
        async with self.checkpoints.lock:
            try:
                await self.checkpoints.run_locked(self.revoke_wait, only=tps)
            except TransactionsFailed as exc:
                log.warning("checkpoint on revoke: %s", exc)
                others = {n: e for n, e in exc.failed.items() if n not in {tp.partition for tp in tps}}
                if others:
                    self.spawn(self.tasks_failed(others), "rewind")
            except Exception as exc:
                log.warning("checkpoint on revoke failed (%s); the next owner reprocesses from the last "
                            "commit", exc)
            closed = self._close(tps)
        await self._stop_producers(closed)
        log.info("revoke of %d partitions done in %.2fs", len(tps), time.monotonic() - started)

    async def lost(self, tps: set[TP], why: str = "this worker's group session expired") -> None:
        """No longer the owner: close dirty, writing and committing nothing of `tps`."""
        async with self._ownership:
            with self._traced("lost", tps):
                await self._or_fail(self._lost(tps, why), "letting go of the lost partitions")

    async def _lost(self, tps: set[TP], why: str) -> None:
        log.warning("lost %d partitions (%s; another worker may own them now): %s; their uncommitted work "
                    "is dropped", len(tps), why, describe(tps))
        self.poison.lost(tps)
        await self._close_dirty(tps)

    async def _close_dirty(self, tps: Collection[TP], *, rebalancing: bool = True) -> None:
        """Drop the uncommitted work of `tps` (queued events, table buffers, the open transactions) and close
        their tasks; nothing of it is written or committed."""
        self.leases.end(tps)  # at once: nothing of them is applied from here on
        self._drop_queued(tps)
        async with self.checkpoints.lock:  # a checkpoint in flight finishes (or fails) first
            closed = self._close(tps, rebalancing=rebalancing)  # the table partitions go with their tasks
        await self._stop_producers(closed)

    async def tasks_failed(self, failed: dict[int, BaseException]) -> None:
        """These tasks' transactions did not commit. If another worker owns them now: lost. Otherwise:
        rewound to their last commit (closed dirty and set up again).

        Setting a task up again starts its transactional producer anew, which fences whoever else holds its
        id: that must never be a newer owner. The broker fences a producer both when a newer one starts with
        its id and when it aborts a transaction open longer than the transaction timeout (an agent stuck in
        an event), and a commit can fail because this worker was frozen past its session. Only the group
        tells these apart: while this worker is still a member of the group's current generation, no other
        member has been given its tasks."""
        # The leases of the failed commits: a revoke (and the group giving the partitions back) may come
        # before this rewinds, and the new leases' tasks did not fail.
        failing = {tp: lease for tp, lease in self.leases.current.items() if tp.partition in failed}
        try:
            await self.consumer.confirm_membership()
        except MembershipLost as exc:
            fenced = set(failed)
            log.info("tasks %s did not commit and this worker is not a member of the group (%s)",
                     sorted(fenced), exc)
        else:
            fenced = set()
            timed_out = sorted(n for n, e in failed.items() if isinstance(e, ProducerFenced))
            if timed_out:
                log.warning("tasks %s were fenced while this worker still owns them: the broker aborted "
                            "their open transactions, open longer than the transaction timeout (an event "
                            "that long, or the broker away that long)", timed_out)
        async with self._ownership:  # not in the middle of a revoke: the partitions it closed are not ours
            owned = [tp for tp, lease in failing.items() if self.leases.current.get(tp) is lease]
            with self._traced("rewind", owned):
                await self._rewind_or_lose(owned, failed, fenced)

    async def _rewind_or_lose(self, owned: list[TP], failed: dict[int, BaseException],
                              fenced: set[int]) -> None:
        lost = {tp for tp in owned if tp.partition in fenced}
        if lost:
            await self._lost(lost, "their transactions did not commit and this worker left the group")
            self.pauses.hold(lost, "lost")
            # Membership that could not be confirmed (the broker down, say) may still be the group's: then
            # no rebalance would ever come to give the partitions back (or to someone else), and they would
            # stay here, closed and paused. A rebalance asked for now settles who owns them.
            self.consumer.request_rebalance()
        retry = {tp for tp in owned if tp.partition not in fenced}
        if not retry:
            return
        log.warning("rewinding %s to their last commit: their transactions did not commit (%s)",
                    describe(retry),
                    "; ".join(f"task {n}: {e}" for n, e in sorted(failed.items()) if n not in fenced))
        self.poison.lost(retry)
        await self._close_dirty(retry, rebalancing=False)
        await self._assigned(retry)

    def _close(self, tps: Collection[TP], *, rebalancing: bool = True) -> list[ActiveTask]:
        """End the leases of `tps` and close the tasks left without one, in one step (no write can land
        between); returns the closed tasks, whose producers are still to stop."""
        self.leases.end(tps)
        self.pauses.forget(tps)
        resumed: set[TP] = set()
        if rebalancing:  # a rebalance during a set-up: its tasks that stay here are set up again
            for recovery, setting_up in list(self._recoveries.items()):
                if not recovery.done() and not setting_up.isdisjoint(tps):
                    recovery.cancel()
                    del self._recoveries[recovery]
                    resumed |= setting_up.difference(tps)
        closed = []
        for number in sorted({tp.partition for tp in tps}):
            task = self.active.get(number)
            if task is None:
                continue
            for tp in [tp for tp in tps if tp.partition == number]:
                lease = task.leases.pop(tp, None)
                if lease is not None:
                    lease.end()
            if not task.leases:
                state = task.close()
                if state is not None and self.standbys is not None:
                    self.standbys.released(number, state)
                del self.active[number]
                closed.append(task)
        if resumed:
            self._recover(resumed)
        return closed

    @staticmethod
    async def _stop_producers(tasks: list[ActiveTask]) -> None:
        await asyncio.gather(*(task.stop_producer() for task in tasks), return_exceptions=True)

    async def close_all(self) -> None:
        """The worker stops (after its final checkpoint): every task closes and stops its producer."""
        self.leases.end(list(self.leases.current))
        closed = list(self.active.values())
        for task in closed:
            state = task.close()
            if state is not None:
                state.close()
        self.active.clear()
        if self.standbys is not None:
            self.standbys.close()
        await self._stop_producers(closed)
