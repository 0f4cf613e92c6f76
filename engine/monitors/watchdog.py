"""The stuck-event watchdog: names an agent that has been inside one event for too long.

A slow or stuck agent holds back only its own partitions (the conductor pauses a partition whose mailbox is
full and keeps fetching the rest), so without a word from someone it would stall them silently. Nothing is
added to the per-event path: every few seconds the watchdog samples the event each agent instance is inside;
one found inside the same event for longer than `stuck_event_warning` is logged with the agent, topic,
partition and offset, and again each time that long passes while it stays stuck.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from agents import Service

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.events import Event

log = logging.getLogger(__name__)


class Watchdog(Service):
    def __init__(
        self,
        busy: Callable[[], list[tuple[str, Event]]],
        threshold: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("watchdog")
        self._busy = busy
        self.threshold = threshold
        self._clock = clock
        self._since: dict[int, tuple[Event, float, float]] = {}  # id(event) -> (event, first seen, warn at)

    async def on_start(self) -> None:
        self.spawn(self._watch(), "watch")

    async def _watch(self) -> None:
        interval = min(self.threshold / 2, 5.0)
        while True:
            await asyncio.sleep(interval)
            for message in self.sample():
                log.warning("%s", message)

    def sample(self) -> list[str]:
        """Look once; returns the warnings due now (one per stuck event, repeated every `threshold`)."""
        now = self._clock()
        seen: dict[int, tuple[Event, float, float]] = {}
        messages = []
        for agent, event in self._busy():
            entry = self._since.get(id(event))
            if entry is None or entry[0] is not event:  # new (or an id reused by a new event)
                entry = (event, now, now + self.threshold)
            _, first, due = entry
            if now >= due:
                due = now + self.threshold
                messages.append(
                    f"agent {agent} has been processing {event.topic}[{event.partition}]@{event.offset} for "
                    f"{now - first:.0f}s; the partitions it serves wait behind it (the others keep flowing)"
                )
            seen[id(event)] = (event, first, due)
        self._since = seen
        return messages
