"""The tasks' checkpoints (engine.commit.checkpoint) as the task manager runs them: every commit interval
while a task has anything to commit, on request (a live export, a test, the final stop), and what each tells
back (records held open past the transaction timeout are suspects, committed offsets end suspicion)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from engine.clock import wall_time
from engine.commit.checkpoint import Checkpointer
from engine.errors import EngineError, MembershipLost, TransactionsFailed
from engine.events import TP
from engine.streams.current import current_event
from engine.tasks.poison import Cause, PoisonRecords

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Coroutine, Mapping

    from engine.activity import Activity
    from engine.commit.guarantee import Guarantee
    from engine.events import Event
    from engine.tables.base import BaseTable
    from engine.tasks.active import ActiveTask
    from engine.tracing import Tracing
    from engine.transport.base import Consumer

log = logging.getLogger(__name__)


class Commits:
    """The checkpoints of a worker's active tasks."""

    def __init__(self, *, tasks: Mapping[int, ActiveTask], consumer: Consumer, guarantee: Guarantee,
                 global_tables: Collection[BaseTable],
                 commit_interval: float, poison: PoisonRecords, activity: Activity,
                 transaction_timeout: float | None,
                 failed: Callable[[dict[int, BaseException]], Coroutine[Any, Any, None]],
                 spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]],
                 tracing: Tracing | None = None) -> None:
        """`failed`: what becomes of tasks
        whose transactions did not commit (the task manager's rewind); `spawn`: runs it in the background
        when a checkpoint asked for (not the loop's) failed."""
        self.tasks = tasks
        self.guarantee = guarantee
        self.commit_interval = commit_interval
        self.poison = poison
        self.activity = activity
        self.transaction_timeout = transaction_timeout
        self._failed = failed
        self._spawn = spawn
        self.checkpoints = Checkpointer(tasks=tasks, consumer=consumer, guarantee=guarantee,
                                        global_tables=global_tables, held=self._held,
                                        committed=self._committed, tracing=tracing)

    @property
    def pause_timeout(self) -> float:
        """How long an exactly-once checkpoint waits for agents to reach a pause between events."""
        return self.commit_interval * 2 + 1

    async def loop(self) -> None:
        """Checkpoint every commit interval. Checkpoints skipped because the group's coordinator cannot
        confirm this worker's membership (away, or the broker restarting) are said once, and counted when
        one runs again: one line per outage, not one per interval."""
        rounds = self.activity.rounds(self.commit_interval)
        rest_until: float | None = None
        skipped = 0
        while True:
            # Every commit interval while a task has anything to commit; otherwise from the next records
            # fetched, timer run or commit on (engine.activity), or from when the clock alone closes or
            # expires windows (`close_idle_after`), whichever comes first.
            await rounds.next(idle=rest_until is not None,
                              wake_after=None if rest_until in (None, math.inf) else rest_until - wall_time())
            # Shielded: stopping the worker cancels this loop, and a checkpoint cancelled halfway would not
            # know whether its transaction committed (aiokafka shields the commit itself), put its closed
            # windows back, and the final checkpoint would emit them again. Cancelled, the loop leaves the
            # checkpoint to finish; the final one waits for it on the checkpoint lock.
            running = asyncio.ensure_future(self.checkpoints.run(self.pause_timeout))
            try:
                await asyncio.shield(running)
            except asyncio.CancelledError:
                running.add_done_callback(_log_failure)
                raise
            except MembershipLost as exc:
                if not skipped:
                    log.warning("checkpoint skipped: %s; skipped until it is confirmed again", exc)
                skipped += 1
                rest_until = None  # (tried again at the next interval: what it would commit is still there)
                continue
            except TransactionsFailed as exc:
                await self._failed(exc.failed)
            if skipped:
                log.info("checkpoints run again, after %d skipped", skipped)
                skipped = 0
            rest_until = self._at_rest_until()

    def _at_rest_until(self) -> float | None:
        """Until when no task has work for a checkpoint (ActiveTask.at_rest_until); None if one has now."""
        until = math.inf
        for task in self.tasks.values():
            at = task.at_rest_until()
            if at is None:
                return None
            until = min(until, at)
        return until

    async def checkpoint(self) -> dict[TP, int]:
        """Checkpoint now (live exports, tests and the final stop use it); one at a time with every other.
        Returns where each active input partition resumes after it (its tasks' tables reflect the events
        before), for the partitions where that is known; read as it completes, before any later event.

        Under exactly-once a checkpoint waits for every agent to be between events, so one asked for from
        inside an event would wait for its own caller: refused, with the way out."""
        if self.guarantee.quiesce is not None and current_event() is not None:
            raise EngineError("a checkpoint cannot be run from inside an event under exactly_once (it waits "
                              "for every agent to finish its event, this one included); run it from a timer "
                              "or outside the agents")
        try:
            await self.checkpoints.run(self.pause_timeout)
        except TransactionsFailed as exc:  # (the failed tasks stopped: rewound, or let go, as after any)
            self._spawn(self._failed(exc.failed), "rewind")
            raise
        return {tp: offset for task in self.tasks.values() if task.ready
                for tp, lease in task.leases.items()
                if not lease.ended and (offset := lease.resume_point()) is not None}

    def _held(self, agent: str, event: Event) -> None:
        """A checkpoint went on without `event`'s task. Held open past the transaction timeout, its
        transaction is aborted by the broker and the task fenced when the event ends: the event is a suspect
        (engine.tasks.poison). How long the transaction has been open is counted from the task's last commit
        here (or its producer's start): the broker's count starts later, at the transaction's first record,
        so a record that outlasts it is never missed."""
        task = self.tasks.get(event.partition)
        if self.transaction_timeout is None or task is None or task.transaction_opened is None:
            return
        seconds = time.monotonic() - task.transaction_opened
        if seconds >= self.transaction_timeout:
            self.poison.suspect(TP(event.topic, event.partition), event.offset, agent, seconds,
                                Cause.OPEN_TRANSACTION)

    def _committed(self, offsets: Mapping[TP, int]) -> None:
        for tp, offset in offsets.items():
            self.poison.committed(tp, offset)
        if offsets:
            self.activity.signal()  # (committed records of repartition topics can be purged)


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("the checkpoint in flight at stop failed: %s", task.exception())
