"""Deleting what the app has read from its repartition topics (Kafka Streams' repartition purge).

Repartition topics have no time retention (engine.topology.plan: records in transit keep the event's time,
and reprocessing old events must not lose them), so without this they would grow forever. Every interval,
each worker deletes, in the repartition partitions of its active tasks, the records before the offset its
last checkpoint committed: those were read, processed and committed, and are never read again (a task that
moves resumes from the committed offset; a reset rewinds only the app's source topics, and deletes the
repartition topics).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agents import Service
from engine.activity import Activity
from engine.errors import TransportError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from engine.events import TP
    from engine.tasks.active import ActiveTask
    from engine.transport.base import Admin

log = logging.getLogger(__name__)


def purgeable(tasks: Mapping[int, ActiveTask], topics: Collection[str], done: Mapping[TP, int]
              ) -> dict[TP, int]:
    """For each repartition partition (of `topics`) of a ready task: its committed offset, where it moved
    past what was purged already (`done`)."""
    found: dict[TP, int] = {}
    for task in tasks.values():
        if not task.ready or task.closed:
            continue
        for tp, lease in task.leases.items():
            committed = lease.committed
            if tp.topic in topics and not lease.ended and committed is not None \
                    and committed > done.get(tp, 0):
                found[tp] = committed
    return found


class RepartitionPurge(Service):
    """Every `interval` seconds, deletes the committed records of this worker's repartition partitions."""

    def __init__(self, tasks: Mapping[int, ActiveTask], topics: Collection[str],
                 admin_factory: Callable[[], Admin], interval: float, activity: Activity | None = None
                 ) -> None:
        """`activity`: the worker's (engine.activity): once nothing is left to delete, the next round waits
        for the next commit (or records fetched, or timer run)."""
        super().__init__("repartition-purge")
        self._activity = activity if activity is not None else Activity()
        self.tasks = tasks
        self.topics = frozenset(topics)
        self._admin_factory = admin_factory
        self.interval = interval
        self.purged: dict[TP, int] = {}  # the offset each partition was purged up to

    async def on_start(self) -> None:
        if self.topics:
            self.spawn(self._run(), "purge")

    async def _run(self) -> None:
        rounds = self._activity.rounds(self.interval)
        idle = False
        while True:
            await rounds.next(idle=idle)
            idle = not await self.purge()

    async def purge(self) -> bool:
        """Delete what can be; whether there was anything to delete."""
        before = purgeable(self.tasks, self.topics, self.purged)
        if not before:
            return False
        admin = self._admin_factory()
        try:
            await admin.delete_records(before)
        except TransportError as exc:  # the next round deletes up to a newer offset anyway
            log.warning("could not delete the read records of %d repartition partitions: %s", len(before),
                        exc)
            return True
        finally:
            await admin.close()
        self.purged.update(before)
        return True
