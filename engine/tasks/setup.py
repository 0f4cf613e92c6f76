"""Setting tasks up before any of their events is processed: their producers started (under exactly-once
that fences every earlier owner of each task), then their committed offsets read and sought to (after the
fence: earlier commits are final), then their tables' stores restored; a stateless app's tasks too, so that a
committed offset the broker no longer has is said and followed the same way (engine.tasks.starts).

While no broker answers (one restarting: the clients a set-up starts, unlike the worker's own, have no
connection to keep trying on) the set-up is tried again until it succeeds or a rebalance cancels it. Each
step can be taken again: producers are started for the tasks still without one, offsets sought again,
stores restored from where they are."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from engine.errors import BrokerUnavailable
from engine.events import describe
from engine.tasks.active import start_producers
from engine.tasks.lifecycle import TaskState

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from engine.commit.guarantee import Guarantee
    from engine.events import TP
    from engine.tables.manager import TableManager
    from engine.tasks.active import ActiveTask
    from engine.tasks.starts import Starts
    from engine.transport.base import Consumer

log = logging.getLogger(__name__)

SET_UP_RETRY = 1.0  # seconds between two tries of a set-up that found no broker (one restarting)


class TaskSetUp:
    """How a worker sets its assigned tasks up."""

    def __init__(self, *, active: Mapping[int, ActiveTask], consumer: Consumer, starts: Starts,
                 guarantee: Guarantee, tables: TableManager | None, table_sources: Collection[str]) -> None:
        """`active`: the worker's active tasks, by number (each try sets up the ones there then: a task
        rewound meanwhile is a new one); `starts`: where each partition starts (the worker's, which /status
        shows); `table_sources`:
        tables' source topics, whose positions are their stores'."""
        self.active = active
        self.consumer = consumer
        self.starts = starts
        self.guarantee = guarantee
        self.tables = tables
        self.table_sources = table_sources

    async def run(self, tps: set[TP]) -> None:
        """Set the tasks of the partitions `tps` up, trying again while no broker answers."""
        waiting_since: float | None = None
        while True:
            try:
                await self._once(tps)
            except BrokerUnavailable as exc:
                if waiting_since is None:
                    waiting_since = time.monotonic()
                    log.warning("setting up %s: %s; trying again every %.0f s", describe(tps), exc,
                                SET_UP_RETRY)
                await asyncio.sleep(SET_UP_RETRY)
                continue
            if waiting_since is not None:
                log.info("set up %s after %.1f s without a broker", describe(tps),
                         time.monotonic() - waiting_since)
            return

    async def _once(self, tps: set[TP]) -> None:
        tasks = [self.active[n] for n in sorted({tp.partition for tp in tps})]
        new_producer = self.guarantee.task_producer
        starting = [task for task in tasks if task.producer is None]
        if new_producer is not None and starting:
            await start_producers(new_producer, starting)
        starts, committed = await self.starts.seek(self.consumer, tps)  # (after the fence)
        for task in tasks:  # what the group committed is this worker's last commit until it commits itself
            for tp, lease in task.leases.items():  # (unless it is gone: the partition starts elsewhere)
                if lease.committed is None and tp in committed and starts.get(tp) == committed[tp]:
                    lease.mark_committed(committed[tp])
        restoring = [task for task in tasks if task.state is TaskState.RESTORING]
        if self.tables is not None and self.guarantee.stores_follow_commits:
            for task in restoring:
                if task.state_manager is not None:
                    task.state_manager.rebuild_ahead_of(committed)
        if self.tables is not None:
            sources = {tp: offset for tp, offset in starts.items() if tp.topic in self.table_sources}
            states = [task.state_manager for task in restoring if task.state_manager is not None]
            await self.tables.restore(states, sources)
        for task in restoring:
            if task.state is TaskState.RESTORING:  # (not closed meanwhile)
                task.open()
