"""The pause between events that exactly-once checkpoints need.

A checkpoint must capture a cut where every event is either fully processed (its table writes buffered, its
sends issued, its offset acked) or not started. Agents are coroutines that may await in the middle of an
event, so with `processing_guarantee="exactly_once"` the checkpoint closes this gate: root streams stop
handing out events, the conductor stops dispatching, and the checkpoint waits until no agent is inside an
event. Then it snapshots offsets and table buffers, commits the Kafka transaction, and opens the gate.

An agent that cannot finish its event while others are paused (one that `ask`s another agent, which waits
at the gate) would stall the checkpoint, so the wait is bounded: past it the checkpoint goes ahead and logs
that this one is only at-least-once.
"""

from __future__ import annotations

import asyncio


class Quiesce:
    __slots__ = ("_idle", "_opened", "busy", "closed")

    def __init__(self) -> None:
        self.closed = False
        self.busy = 0  # agent instances inside an event (pulled, not finished)
        self._opened = asyncio.Event()
        self._opened.set()
        self._idle = asyncio.Event()

    def started(self) -> None:
        self.busy += 1

    def finished(self) -> None:
        self.busy -= 1
        if self.closed and self.busy <= 0:
            self._idle.set()

    async def wait_open(self) -> None:
        await self._opened.wait()

    async def pause(self, timeout: float) -> bool:
        """Close the gate; True once no agent is inside an event, False if that took over `timeout`."""
        self.closed = True
        self._opened.clear()
        if self.busy <= 0:
            return True
        self._idle.clear()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def resume(self) -> None:
        self.closed = False
        self._opened.set()
