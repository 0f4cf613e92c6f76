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
- assigned: new leases; the partitions stay paused until they are set up: under exactly-once each task's
  transactional producer is started first (fencing the previous owner, engine.transactions) and only then
  are the committed offsets read and sought to; then the tables are recovered.
- a task whose transaction did not commit is rewound: if this worker is no longer a member of the group's
  generation (a newer owner may exist) it is lost; otherwise (the broker restarted, the transaction timed
  out, a fence by the broker's transaction timeout) its uncommitted work is dropped and it is set up again
  from its last commit, as if newly assigned, while the worker goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from engine.errors import MembershipLost, ProducerFenced
from engine.poison import PoisonRecords
from engine.transactions import TransactionsFailed

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Coroutine

    from engine.checkpoint import Checkpointer
    from engine.events import TP
    from engine.leases import Lease, Leases
    from engine.tables.manager import TableManager
    from engine.transactions import TaskProducers
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
        producers: TaskProducers | None = None,
        revoke_wait: float = REVOKE_WAIT,
        reset_to_end: bool = False,
        poison: PoisonRecords | None = None,
    ) -> None:
        self.poison = poison if poison is not None else PoisonRecords()
        self.reset_to_end = reset_to_end  # auto_offset_reset="latest": never committed, start at the end
        self.producers = producers
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
        log.info("assigned %d partitions: %s", len(tps), describe(tps))
        self.pauses.forget(tps)
        self.leases.grant(tps)
        if (self.tables is not None or self.producers is not None) and tps:
            # Fenced and recovered before any of their events is processed.
            self.pauses.hold(tps, RECOVERING)
            self._recovery = self._spawn(self._recover(tps), "recover")

    async def _recover(self, tps: set[TP]) -> None:
        numbers = {tp.partition for tp in tps}
        if self.producers is not None:
            await self.producers.assign(numbers)  # fences every earlier owner of these tasks ...
            await self._seek_committed(tps)  # ... so what they committed is final when we read it
        if self.tables is not None:
            await self.tables.assign(numbers)
        resumable = {tp for tp in tps
                     if (lease := self.leases.current.get(tp)) is not None and lease.dispatching}
        self.pauses.release(resumable, RECOVERING)
        log.info("tables ready; processing %d partitions", len(resumable))

    async def _seek_committed(self, tps: set[TP]) -> None:
        committed = await self.consumer.committed(tps)
        fresh = [tp for tp, offset in committed.items() if offset is None]
        bounds = await self.consumer.offsets(fresh) if fresh else {}
        for tp, offset in committed.items():
            if offset is None:
                offset = bounds[tp][1] if self.reset_to_end else bounds[tp][0]
            self.consumer.seek(tp, offset)

    async def revoked(self, tps: set[TP]) -> None:
        """Still the owner: finish what agents hold (bounded), checkpoint, let go."""
        log.info("revoked %d partitions: %s", len(tps), describe(tps))
        self._count_losses(tps)
        started = time.monotonic()
        leases = self.leases.revoke(tps)
        dropped = self._drop_queued(tps)
        deadline = started + (0 if self.stopping else self.revoke_wait)
        def unfinished(lease: Lease) -> bool:  # agents hold events of it (not dropped, not abandoned)
            return lease.in_flight > dropped.get(lease.tp, 0) + lease.abandoned

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
                    self._spawn(self.tasks_failed(others), "rewind")
            except Exception as exc:
                log.warning("checkpoint on revoke failed (%s); the next owner reprocesses from the last "
                            "commit", exc)
            self._let_go(tps)
        if self.producers is not None:
            await self.producers.release({tp.partition for tp in tps})
        log.info("revoke of %d partitions done in %.2fs", len(tps), time.monotonic() - started)

    async def lost(self, tps: set[TP], why: str = "this worker's group session expired") -> None:
        """No longer the owner: drop everything of `tps`, write and commit nothing."""
        log.warning("lost %d partitions (%s; another worker may own them now): %s; their uncommitted work "
                    "is dropped", len(tps), why, describe(tps))
        self._count_losses(tps)
        await self._forget(tps)

    def _count_losses(self, tps: Collection[TP]) -> None:
        """Records in progress while the loop was blocked lose their partition once more (engine.poison)."""
        for tp, offset, losses in self.poison.lost(tps):
            log.warning("%s[%d] was taken from this worker while offset %d, which blocked the event loop, "
                        "was processed (%d of %d times before it is set aside)", tp.topic, tp.partition,
                        offset, losses, self.poison.limit)

    async def _forget(self, tps: Collection[TP], *, rebalancing: bool = True) -> None:
        """Drop the uncommitted work of `tps` (queued events, table buffers, the open transactions) and let
        them go; nothing of it is written or committed."""
        self.leases.end(tps)  # at once: nothing of them is applied from here on
        self._drop_queued(tps)
        async with self.checkpoints.lock:  # a checkpoint in flight finishes (or fails) first
            self._let_go(tps, rebalancing=rebalancing)  # closing a table partition drops its buffers
        if self.producers is not None:
            await self.producers.release({tp.partition for tp in tps})

    async def tasks_failed(self, failed: dict[int, BaseException]) -> None:
        """These tasks' transactions did not commit. If another worker owns them now: lost. Otherwise:
        rewound to their last commit and set up again.

        Setting a task up again starts its transactional producer anew, which fences whoever else holds its
        id: that must never be a newer owner. The broker fences a producer both when a newer one starts with
        its id and when it aborts a transaction open longer than the transaction timeout (an agent stuck in
        an event), and a commit can fail because this worker was frozen past its session. Only the group
        tells these apart: while this worker is still a member of the group's current generation, no other
        member has been given its tasks."""
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
                            "their open transactions (an event took longer than the transaction timeout)",
                            timed_out)
        owned = [tp for tp in self.leases.current if tp.partition in failed]
        lost = {tp for tp in owned if tp.partition in fenced}
        if lost:
            await self.lost(lost, "their transactions did not commit and this worker left the group")
            self.pauses.hold(lost, "lost")  # the group takes them away at its next rebalance
        retry = {tp for tp in owned if tp.partition not in fenced}
        if not retry:
            return
        log.warning("rewinding %s to their last commit: their transactions did not commit (%s)",
                    describe(retry),
                    "; ".join(f"task {n}: {e}" for n, e in sorted(failed.items()) if n not in fenced))
        await self._forget(retry, rebalancing=False)
        await self.assigned(retry)

    def _let_go(self, tps: Collection[TP], *, rebalancing: bool = True) -> None:
        """End the leases and close the tables of `tps`, in one step (no write can land between); their
        unflushed table writes and window state go with the table partitions."""
        self.leases.end(tps)
        self.pauses.forget(tps)
        if rebalancing and self._recovery is not None and not self._recovery.done():
            self._recovery.cancel()  # a rebalance during set-up: it resumes from the stores later
        if self.tables is not None:
            self.tables.revoke({tp.partition for tp in tps})


def describe(tps: Collection[TP]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{t}{sorted(p)}" for t, p in sorted(by_topic.items()))
