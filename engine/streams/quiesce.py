"""The pause between events that exactly-once checkpoints need.

A checkpoint must capture a cut where every event is either fully processed (its table writes buffered, its
sends issued, its offset acked) or not started. Agents are coroutines that may await in the middle of an
event, so with `processing_guarantee="exactly_once"` the checkpoint closes this gate: root streams stop
handing out events, the conductor stops dispatching, and the checkpoint waits until no agent is inside an
event. Then it snapshots offsets and table buffers, commits the Kafka transaction, and opens the gate.

An agent inside an event may `ask` another agent, which must run to answer: with the gate closed it
never would, and the checkpoint would wait for the asker until its timeout. So an ask from inside an event
holds the gate open: a checkpoint first waits for the asks in flight to be answered, and if one starts
while the gate is closed, it reopens the gate until that one is answered too (nothing was snapshot yet: the
cut is taken only once the gate is closed and no agent is inside an event). The wait stays bounded: past
its timeout the checkpoint goes ahead without the tasks whose events are still in progress (their
transactions stay open, engine.commit.checkpoint). (The request and the reply themselves travel outside
transactions: engine.processing.replies.)
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engine.events import Event


class Inside(Protocol):
    """An agent instance's stream as the gate sees it: whose it is, and the event it is inside."""

    @property
    def agent_name(self) -> str: ...

    @property
    def current_event(self) -> Event | None: ...


class Quiesce:
    __slots__ = ("_changed", "_inside", "_opened", "asks", "closed", "pausing")

    def __init__(self) -> None:
        self.closed = False
        self.pausing = False  # a checkpoint is waiting for its cut
        self._inside: set[Inside] = set()  # streams whose agents are inside an event (pulled, not finished)
        self.asks = 0  # asks from inside an event waiting for their answer
        self._opened = asyncio.Event()
        self._opened.set()
        self._changed = asyncio.Event()  # what a pause waits on: the last event finished, or an ask changed

    @property
    def busy(self) -> int:
        """Agent instances inside an event."""
        return len(self._inside)

    def started(self, stream: Inside) -> None:
        self._inside.add(stream)

    def finished(self, stream: Inside) -> None:
        inside = self._inside
        inside.discard(stream)
        if self.closed and not inside:
            self._changed.set()

    def events_inside(self) -> list[tuple[str, Event]]:
        """(agent, event) of every agent instance inside an event now: what a checkpoint that went on
        without them leaves out (their tasks' transactions stay open)."""
        return [(stream.agent_name, event) for stream in self._inside
                if (event := stream.current_event) is not None]

    def ask_started(self) -> None:
        self.asks += 1
        self._changed.set()

    def ask_finished(self) -> None:
        self.asks -= 1
        if self.pausing and self.asks <= 0:
            # Closed here, not when the pause wakes up: an agent asking event after event would otherwise
            # have its next ask out before then, every time, and starve the checkpoint.
            self._close()
        self._changed.set()

    async def wait_open(self) -> None:
        await self._opened.wait()

    async def pause(self, timeout: float, stuck: int = 0) -> bool:
        """Close the gate; True once at most `stuck` agents are inside an event (those the checkpoint already
        knows are stuck in one: it does not wait for them again), False if that took over `timeout` (the
        gate is closed either way)."""
        self.pausing = True
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if self.asks <= 0:
                        self._close()
                        if self.busy <= stuck:
                            return True
                    self._changed.clear()
                    await self._changed.wait()
                    if self.asks > 0 and self.closed:  # an agent inside an event asked another agent:
                        self.resume()  # the answer needs the gate open
        except TimeoutError:
            self._close()
            return False
        finally:
            self.pausing = False

    def _close(self) -> None:
        self.closed = True
        self._opened.clear()

    def resume(self) -> None:
        self.closed = False
        self._opened.set()
