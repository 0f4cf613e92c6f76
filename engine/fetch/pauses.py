"""Why each partition of the worker's consumer is paused: it is resumed once no reason is left.

A partition is paused while its task is set up (recovering) and while an agent's mailbox has no room for its
batches (backpressure), for either or both; resuming it for one reason must not undo the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP
    from engine.transport.base import Consumer


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

    def reasons(self, tp: TP) -> set[str]:
        """Why `tp` is paused now (empty: it is not)."""
        return set(self._reasons.get(tp, ()))

    def forget(self, tps: Collection[TP]) -> None:
        for tp in tps:
            self._reasons.pop(tp, None)
