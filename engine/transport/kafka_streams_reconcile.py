"""A streams group's member bringing what it owns to what the broker assigns it (KIP-1071's reconciliation),
one change at a time, beside its heartbeat loop (engine.transport.kafka_streams_member), never in it.

Lost tasks first (the broker gave them away: closed dirty), then revoked ones (checkpointed and closed while
every other task goes on, then reported at once, so that their next owner gets them), then assigned ones
(set up while the others go on). A newer target heard meanwhile is reconciled next.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from engine.assignor import Assignment

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from engine.assignor import Placement
    from engine.events import TP
    from engine.transport.base import PartitionsCallback
    from engine.transport.kafka_streams_tasks import TaskSet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """What the broker says this member may own now."""

    active: TaskSet
    standby: TaskSet
    warmup: TaskSet


NOTHING = Target(frozenset(), frozenset(), frozenset())


class Reassign(Protocol):
    """What the member asks of its consumer: read exactly these partitions from now on, the `new` ones held
    (not fetched) until `release` (their tasks are being set up), every other one where it was."""

    def reassign(self, tps: set[TP], new: set[TP]) -> None: ...

    def release(self, tps: set[TP]) -> None: ...


class Reconciliation:
    """What a member is assigned (`target`, the broker's last word; None: not heard since joining) and what
    it owns of it (`owned`, what its heartbeats report), brought together in a task of its own."""

    def __init__(self, *, placement: Placement, reassign: Reassign,
                 partitions: Callable[[Collection[int]], set[TP]], on_assigned: PartitionsCallback | None,
                 on_revoked: PartitionsCallback | None, on_lost: PartitionsCallback | None,
                 owners: Callable[[], dict[int, str]], members: Callable[[], frozenset[str]],
                 acknowledge: Callable[[], None],
                 failed: Callable[[BaseException], None]) -> None:
        """`partitions`: the partitions of tasks; `owners`: where each task is active, as last heard;
        `acknowledge`: heartbeat now (a change to report); `failed`: a failure that stops the member."""
        self.target: Target | None = None
        self.owned = NOTHING
        self.lost_pending = False  # the broker gave this member's tasks away: they are lost first
        self._placement = placement
        self._reassign = reassign
        self._partitions = partitions
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self._owners = owners
        self._members = members
        self._acknowledge = acknowledge
        self._failed = failed
        self._running: asyncio.Task[None] | None = None

    def pending(self) -> bool:
        """Whether there is a change to reconcile."""
        return self.target is not None and (self.target != self.owned or self.lost_pending)

    def soon(self) -> None:
        """Reconcile in the background (a pass under way takes a newer target next)."""
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._run())

    def cancel(self) -> None:
        if self._running is not None and not self._running.done():
            self._running.cancel()

    async def _run(self) -> None:
        try:
            while True:
                if self.lost_pending:
                    self.lost_pending = False
                    lost = self.owned.active
                    self.owned = NOTHING
                    self._reassign.reassign(set(), set())
                    if lost:
                        await _call(self._on_lost or self._on_revoked, self._partitions(lost))
                    continue
                target = self.target
                if target is None or target == self.owned:
                    return
                # The task manager hears the assignment first (the standbys it names, where tasks are
                # queried), as a classic member hears it before its partitions change.
                assignment = Assignment(active=target.active, standby=target.standby | target.warmup,
                                        owners=dict(self._owners()), warming=target.warmup,
                                        members=self._members())
                if assignment != self._placement.current:
                    self._placement.assignment_received(assignment)
                revoked = self.owned.active - target.active
                if revoked:
                    await _call(self._on_revoked, self._partitions(revoked))
                    kept = self.owned.active - revoked
                    self.owned = Target(kept, self.owned.standby, self.owned.warmup)
                    self._reassign.reassign(self._partitions(kept), set())
                    self._acknowledge()  # at once: the next owner waits for it
                    continue
                new = target.active - self.owned.active
                fresh = self._partitions(new)
                # The new partitions stay paused until the task manager set them up: it seeks each to its
                # committed offset after its producers' fence, when every earlier commit is final (a read
                # here, before the fence, could be older, and one that met a broker restarting would stop
                # the member; the set-up waits a broker out).
                self._reassign.reassign(self._partitions(target.active), fresh)
                try:
                    await _call(self._on_assigned, fresh)
                finally:
                    self._reassign.release(fresh)
                self.owned = target
                self._acknowledge()
        except Exception as exc:
            log.error("reconciling the streams group's assignment failed: %r", exc, exc_info=exc)
            self._failed(exc)


async def _call(callback: Callable[[set[TP]], Awaitable[None]] | None, tps: set[TP]) -> None:
    if callback is not None:
        await callback(tps)
