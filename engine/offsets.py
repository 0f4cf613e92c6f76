"""Per-partition offset tracking for at-least-once: commit only what every agent finished.

Events of a partition are dispatched in offset order but may finish out of order (several agents, several
instances). The commit point is one past the last offset such that it and everything dispatched before it
are acked. Pure and loop-free: tested without Kafka.
"""

from __future__ import annotations

from collections import deque


class OffsetTracker:
    __slots__ = ("_done", "_pending", "committed", "position")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()
        self._done: set[int] = set()
        self.position: int | None = None  # next offset to commit; None until something finished
        self.committed: int | None = None  # what the last checkpoint committed

    def track(self, offset: int) -> None:
        """Record that `offset` was dispatched (offsets arrive in increasing order)."""
        self._pending.append(offset)

    def ack(self, offset: int) -> None:
        pending = self._pending
        if pending and pending[0] == offset:
            pending.popleft()
            done = self._done
            while pending and pending[0] in done:
                offset = pending.popleft()
                done.discard(offset)
            self.position = offset + 1
        else:
            self._done.add(offset)

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
