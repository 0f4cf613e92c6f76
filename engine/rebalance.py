"""Rebalances: partitions assigned, revoked and lost, and what each means for events, tables and offsets.

Kafka takes partitions away in two ways, and they are handled apart:
- revoked: a rebalance asks for them back while this worker still owns them. Their leases stop dispatching
  at once, queued events are dropped (uncommitted: the next owner reads them), the events agents hold get a
  bounded wait to finish (REVOKE_WAIT, well inside the group's rebalance timeout, or the member is expelled
  and the group ping-pongs), then the partitions are checkpointed (changelogs flushed, offsets committed)
  and let go. An event still unfinished after the wait is never applied: its lease has ended.
- lost: the group moved on without this worker (its session expired: a frozen process, a long pause, a
  network split); another worker may own the partitions and be writing already. Their leases end, queued
  events and table buffers are dropped, and nothing of them is written or committed.
- assigned: new leases; tables of the partitions are recovered (the partitions stay paused meanwhile) before
  any of their events is processed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Coroutine

    from engine.checkpoint import Checkpointer
    from engine.events import TP
    from engine.leases import Leases
    from engine.tables.manager import TableManager
    from engine.transport.base import Consumer

log = logging.getLogger(__name__)

REVOKE_WAIT = 5.0  # seconds agents get to finish the events they hold when their partitions are revoked
RECOVERING = "recovering"


class Pauses:
    """Why each partition is paused; it is resumed when no reason is left (recovery, backpressure)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._reasons: dict[TP, set[str]] = {}

    def hold(self, tps: Collection[TP], reason: str) -> None:
        for tp in tps:
            self._reasons.setdefault(tp, set()).add(reason)
        self.consumer.pause(tps)

    def release(self, tps: Collection[TP], reason: str) -> None:
        free = []
        for tp in tps:
            reasons = self._reasons.get(tp)
            if reasons is not None:
                reasons.discard(reason)
                if not reasons:
                    del self._reasons[tp]
                    free.append(tp)
        if free:
            self.consumer.resume(free)

    def forget(self, tps: Collection[TP]) -> None:
        for tp in tps:
            self._reasons.pop(tp, None)


class Rebalancer:
    def __init__(
        self,
        *,
        leases: Leases,
        consumer: Consumer,
        pauses: Pauses,
        checkpoints: Checkpointer,
        tables: TableManager | None,
        drop_queued: Callable[[Collection[TP]], dict[TP, int]],
        spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]],
        revoke_wait: float = REVOKE_WAIT,
    ) -> None:
        self.leases = leases
        self.consumer = consumer
        self.pauses = pauses
        self.checkpoints = checkpoints
        self.tables = tables
        self._drop_queued = drop_queued
        self._spawn = spawn
        self.revoke_wait = revoke_wait
        self._recovery: asyncio.Task[None] | None = None
        self.stopping = False  # while the worker stops, agents have let go of their events: don't wait

    async def assigned(self, tps: set[TP]) -> None:
        log.info("assigned %d partitions: %s", len(tps), fmt(tps))
        self.pauses.forget(tps)
        self.leases.grant(tps)
        if self.tables is not None and tps:
            # Tables of these partitions must be recovered before their events are processed.
            self.pauses.hold(tps, RECOVERING)
            self._recovery = self._spawn(self._recover(tps), "recover")

    async def _recover(self, tps: set[TP]) -> None:
        assert self.tables is not None
        await self.tables.assign({tp.partition for tp in tps})
        still = {tp for tp in tps if (lease := self.leases.current.get(tp)) is not None and lease.dispatching}
        self.pauses.release(still, RECOVERING)
        log.info("tables ready; processing %d partitions", len(still))

    async def revoked(self, tps: set[TP]) -> None:
        """Still the owner: finish what agents hold (bounded), checkpoint, let go."""
        log.info("revoked %d partitions: %s", len(tps), fmt(tps))
        started = time.monotonic()
        leases = self.leases.revoke(tps)
        dropped = self._drop_queued(tps)
        deadline = started + (0 if self.stopping else self.revoke_wait)
        while time.monotonic() < deadline and any(  # noqa: ASYNC110  # acks come from many places; polling is simplest
            lease.in_flight > dropped.get(lease.tp, 0) for lease in leases
        ):
            await asyncio.sleep(0.01)
        unfinished = [lease.tp for lease in leases if lease.in_flight > dropped.get(lease.tp, 0)]
        if unfinished:
            log.warning("agents did not finish their events of %s within %.1fs of the revoke; those events "
                        "are left to the partitions' next owner", fmt(unfinished), self.revoke_wait)
        async with self.checkpoints.lock:
            try:
                await self.checkpoints.run_locked(self.revoke_wait, only=tps)
            except Exception as exc:
                log.warning("checkpoint on revoke failed (%s); the next owner reprocesses from the last "
                            "commit", exc)
            self._let_go(tps)
        log.info("revoke of %d partitions done in %.2fs", len(tps), time.monotonic() - started)

    async def lost(self, tps: set[TP]) -> None:
        """No longer the owner (the session expired): drop everything of `tps`, write and commit nothing."""
        log.warning("lost %d partitions (this worker's group session expired; another worker may own them "
                    "now): %s; their uncommitted work is dropped", len(tps), fmt(tps))
        self.leases.end(tps)  # at once: nothing of them is applied from here on
        self._drop_queued(tps)
        async with self.checkpoints.lock:  # a checkpoint in flight finishes (or fails) first
            if self.tables is not None:
                self.tables.drop({tp.partition for tp in tps})
            self._let_go(tps)

    def _let_go(self, tps: Collection[TP]) -> None:
        """End the leases and close the tables of `tps`, in one step (no write can land between)."""
        self.leases.end(tps)
        self.pauses.forget(tps)
        if self.tables is not None:
            if self._recovery is not None and not self._recovery.done():
                self._recovery.cancel()  # a rebalance during recovery: it resumes from the stores later
            self.tables.revoke({tp.partition for tp in tps})


def fmt(tps: Collection[TP]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{t}{sorted(p)}" for t, p in sorted(by_topic.items()))
