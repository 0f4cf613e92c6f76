"""Leases: which partitions this worker owns now, each under the generation it was assigned in.

Every assignment of a partition is a new Lease. Every event carries the lease it was dispatched under (as its
offset tracker: a Lease is one), and once that lease is over the event is dropped wherever it is: at dispatch,
when an agent takes it from its mailbox, and at the table write. So an event of a partition this worker no
longer owns is never applied, even if the partition comes back to this worker in a later generation: the
event's lease is not the new one.

A lease goes ACTIVE -> REVOKING -> ENDED, or ACTIVE -> ENDED when the partition was lost:
- ACTIVE: events are dispatched and applied.
- REVOKING: the group wants the partition back and this worker is still its owner: nothing more is
  dispatched, the events agents already hold may finish and write, then the partition is checkpointed.
- ENDED: nothing of it is dispatched, applied, flushed or committed any more.
The two states that matter on the per-event path are plain booleans (`dispatching`, `ended`).
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

from engine.tasks.offsets import OffsetTracker

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP


class LeaseState(enum.Enum):
    ACTIVE = "active"
    REVOKING = "revoking"
    ENDED = "ended"


class Lease(OffsetTracker):
    """One partition's assignment: its generation, its state, and (inherited) its offsets."""

    __slots__ = ("_times", "abandoned", "dispatching", "ended", "generation", "stream_time", "tp")

    def __init__(self, tp: TP, generation: int) -> None:
        super().__init__()
        self.tp = tp
        self.generation = generation
        self.dispatching = True
        self.ended = False
        self._times: deque[tuple[int, int]] = deque()  # (last offset of a batch, its largest event time)
        self.stream_time: int | None = None  # the largest event time of the records processed
        # Records fetched and tracked but never handed to an agent, because the lease stopped dispatching
        # meanwhile (the fetch loop was waiting for room in a mailbox): a revoke does not wait for them.
        self.abandoned = 0

    def observe(self, last_offset: int, event_time_ms: int) -> None:
        """A batch up to `last_offset` was dispatched; its largest event time is `event_time_ms`. It counts
        towards stream time once every record of it is processed (filtered out included)."""
        self._times.append((last_offset, event_time_ms))

    def processed_time(self) -> int | None:
        """Stream time: the largest event time of the batches processed to their end (Kafka Streams advances
        it on every record the task processes, whatever the agent did with it)."""
        times, position = self._times, self.position
        while times and position is not None and times[0][0] < position:
            _, at = times.popleft()
            if self.stream_time is None or at > self.stream_time:
                self.stream_time = at
        return self.stream_time

    async def drained(self) -> None:
        """Return once every record dispatched under this lease is acked, or the lease ended."""
        while self.in_flight and not self.ended:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.on_drained = partial(_wake, waiter)
            try:
                await waiter
            finally:
                self.on_drained = None

    @property
    def state(self) -> LeaseState:
        if self.ended:
            return LeaseState.ENDED
        return LeaseState.ACTIVE if self.dispatching else LeaseState.REVOKING

    def revoke(self) -> None:
        """ACTIVE -> REVOKING: stop dispatching; events already taken may finish."""
        self.dispatching = False

    def end(self) -> None:
        """-> ENDED: nothing of this generation is applied, flushed or committed any more."""
        self.dispatching = False
        self.ended = True
        if self.on_drained is not None:
            self.on_drained()  # nobody waits for an ended lease

    def __repr__(self) -> str:
        return f"<Lease {self.tp.topic}[{self.tp.partition}] gen {self.generation} {self.state.value}>"


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Leases:
    """The leases of the partitions assigned to this worker, by partition. `current` is the plain dict,
    read by the fetch loop for every batch."""

    def __init__(self) -> None:
        self.current: dict[TP, Lease] = {}
        self._generation = 0

    def grant(self, tps: Collection[TP]) -> list[Lease]:
        """New leases for `tps` (a new generation), replacing and ending any older ones."""
        self._generation += 1
        granted = []
        for tp in tps:
            old = self.current.get(tp)
            if old is not None:
                old.end()
            lease = self.current[tp] = Lease(tp, self._generation)
            granted.append(lease)
        return granted

    def revoke(self, tps: Collection[TP]) -> list[Lease]:
        """Stop dispatching `tps`; returns their leases (still current until `end`)."""
        revoking = [lease for tp in tps if (lease := self.current.get(tp)) is not None]
        for lease in revoking:
            lease.revoke()
        return revoking

    def end(self, tps: Collection[TP]) -> list[Lease]:
        """End the leases of `tps` and forget them."""
        ended = [lease for tp in tps if (lease := self.current.pop(tp, None)) is not None]
        for lease in ended:
            lease.end()
        return ended

    def live(self) -> list[Lease]:
        """Leases not ended (active or revoking): what a checkpoint may commit."""
        return [lease for lease in self.current.values() if not lease.ended]
