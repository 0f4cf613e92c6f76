"""Per-partition offset tracking for at-least-once: commit only what every agent finished.

Events of a partition are dispatched in offset order but may finish out of order (several agents, several
instances). The commit point is one past the last offset such that it and everything dispatched before it
are acked. A record read by several agents is acked once by each; it is done when all of them acked.
Pure and loop-free: tested without Kafka.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


class OffsetTracker:
    __slots__ = ("_done", "_pending", "_shares", "committed", "on_drained", "position")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()
        self._done: set[int] = set()
        self._shares: dict[int, int] = {}  # acks still expected for offsets several agents received
        self.position: int | None = None  # next offset to commit; None until something finished
        self.committed: int | None = None  # what the last checkpoint committed
        # Called when the last record in flight is acked, for whoever waits for that (engine.tasks.leases).
        self.on_drained: Callable[[], None] | None = None

    def track(self, offset: int, shares: int = 1) -> None:
        """Record that `offset` was dispatched to `shares` agents (offsets arrive in increasing order)."""
        self._pending.append(offset)
        if shares > 1:
            self._shares[offset] = shares

    def track_many(self, offsets: list[int]) -> None:
        """`track` of each (a batch handed to one agent)."""
        self._pending.extend(offsets)

    def ack(self, offset: int) -> None:
        shares = self._shares
        if shares and offset in shares:
            left = shares[offset] - 1
            if left:
                shares[offset] = left
                return
            del shares[offset]
        pending = self._pending
        if pending and pending[0] == offset:
            pending.popleft()
            done = self._done
            if done:  # (acked out of order before: usually none, and the loop's test is skipped)
                while pending and pending[0] in done:
                    offset = pending.popleft()
                    done.discard(offset)
            self.position = offset + 1
            if not pending and self.on_drained is not None:
                self.on_drained()
        else:
            self._done.add(offset)

    def ack_run(self, first: int, last: int, count: int) -> bool:
        """Ack `count` records at once, `first` to `last`, if they are the oldest in flight, one after
        another, none shared with another agent and none acked out of order: one agent's events of a batch,
        acked together when its fused pipeline is done with them (engine.fused), instead of one `ack` call
        each. False (nothing acked) where that does not hold: the caller acks each."""
        pending = self._pending
        if (self._shares or self._done or len(pending) < count or pending[0] != first
                or pending[count - 1] != last):
            return False
        if len(pending) == count:
            pending.clear()
        else:
            take = pending.popleft
            for _ in range(count):
                take()
        self.position = last + 1
        if not pending and self.on_drained is not None:
            self.on_drained()
        return True

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def committable(self) -> int | None:
        """The offset to commit now, or None if nothing new finished since the last commit."""
        if self.position is None or self.position == self.committed:
            return None
        return self.position

    def mark_committed(self, offset: int) -> None:
        self.committed = offset

    def resume_point(self) -> int | None:
        """Where reading resumes after the last commit: the committed offset, or before any commit the first
        record fetched (a task starts at its partition's committed offset); None while neither is known."""
        if self.committed is not None:
            return self.committed
        return self._pending[0] if self._pending else None
