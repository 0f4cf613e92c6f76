"""Why each partition of the worker's consumer is paused: it is resumed once no reason is left.

A partition is paused while its task is set up (recovering) and while an agent's mailbox has no room for its
batches (backpressure), for either or both; resuming it for one reason must not undo the other.

Some reasons only hold a partition back (`keep_fetched`): its records stay fetched in the consumer and are
not taken until no reason is left. That is for a task's timestamp order, which stops taking an input with
much buffered while another input catches up, and wants it again soon after: a pause would drop what was
fetched of it and fetch it again, and the task would wait for that fetch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP
    from engine.transport.base import Consumer


class Pauses:
    """Why each partition is paused or held back; it is resumed (let through) when no reason is left."""

    def __init__(self, consumer: Consumer, keep_fetched: Collection[str] = ()) -> None:
        self.consumer = consumer
        self.keep_fetched = frozenset(keep_fetched)
        self._reasons: dict[TP, set[str]] = {}

    def hold(self, tps: Collection[TP], reason: str) -> None:
        for tp in tps:
            self._reasons.setdefault(tp, set()).add(reason)
        if reason in self.keep_fetched:
            self.consumer.hold_back(tps)
        else:
            self.consumer.pause(tps)

    def release(self, tps: Collection[TP], reason: str) -> None:
        resumed, let_through = [], []
        for tp in tps:
            reasons = self._reasons.get(tp)
            if reasons is None or reason not in reasons:
                continue
            reasons.discard(reason)
            if not reasons:
                del self._reasons[tp]
            if reason in self.keep_fetched:
                if not reasons & self.keep_fetched:
                    let_through.append(tp)
            elif not reasons - self.keep_fetched:
                resumed.append(tp)
        if resumed:
            self.consumer.resume(resumed)
        if let_through:
            self.consumer.let_through(let_through)

    def reasons(self, tp: TP) -> set[str]:
        """Why `tp` is paused or held back now (empty: it is not)."""
        return set(self._reasons.get(tp, ()))

    def forget(self, tps: Collection[TP]) -> None:
        """Drop the reasons of partitions assigned anew or closed (the consumer's pauses end with its
        assignment; what it holds back is let through here)."""
        held = [tp for tp in tps if self._reasons.pop(tp, set()) & self.keep_fetched]
        if held:
            self.consumer.let_through(held)
