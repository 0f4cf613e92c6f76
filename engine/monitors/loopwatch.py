"""The loop monitor: notices, from a thread of its own, that the event loop stopped turning.

The stuck-event watchdog (engine.monitors.watchdog) runs on the loop, so an agent that blocks the loop (a
blocking client library, `time.sleep`, a long computation without an await) silences it too, and with it the
consumer's heartbeats: past the group's session timeout the worker loses its partitions without a word about
why. This monitor's thread wakes every `interval` seconds and looks at when the loop last ran its beat; once
the loop has been still for `threshold` seconds it logs the agents inside an event (agent, topic, partition,
offset) and the stack the loop's thread is blocked in, and tells `blocked` about each event, on the loop, as
soon as it runs again (engine.tasks.poison counts the partitions lost while they were in progress). It logs
again every `threshold` seconds while the loop stays blocked.

Reading the agents' current events from the thread is safe enough for a report: the loop is blocked, so
they are not changing, and every read is of a plain attribute.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING

from agents import Service
from engine.stats import Histogram

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.events import Event

log = logging.getLogger(__name__)

BEAT = 0.1  # seconds between the loop's beats


class LoopMonitor(Service):
    def __init__(
        self,
        busy: Callable[[], list[tuple[str, Event]]],
        threshold: float,
        blocked: Callable[[str, Event, float], None],
    ) -> None:
        super().__init__("loop-monitor")
        self._busy = busy
        self.threshold = threshold
        self._blocked = blocked
        self._beat = time.monotonic()
        self.lag = Histogram()  # how much later than asked each beat ran: the loop's lag (for /metrics)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread = threading.get_ident()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def on_start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._loop = asyncio.get_running_loop()
        self._beat = time.monotonic()
        self.spawn(self._beats(), "beats")
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="engine-loop-monitor", daemon=True)
        self._thread.start()

    async def on_stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    async def _beats(self) -> None:
        while True:
            previous, self._beat = self._beat, time.monotonic()
            self.lag.observe(max(self._beat - previous - BEAT, 0.0))
            await asyncio.sleep(BEAT)

    def _watch(self) -> None:
        interval = min(self.threshold / 4, 1.0)
        reported_at = 0.0  # the beat last reported on: one report per block, again every threshold
        next_report = 0.0
        while not self._stop.wait(interval):
            beat = self._beat
            stood_for = time.monotonic() - beat
            if stood_for < self.threshold:
                continue
            first = beat != reported_at
            if first:
                reported_at, next_report = beat, 0.0
            if stood_for >= next_report:
                next_report = stood_for + self.threshold
                self.report(stood_for, first)

    def report(self, stood_for: float, first: bool = True) -> None:
        """Log the blocked loop: what is being processed, and (first time) where the loop's thread is."""
        busy = self._busy()
        events = ", ".join(f"agent {agent} at {e.topic}[{e.partition}]@{e.offset}" for agent, e in busy)
        if first:
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(not found)\n"
            log.warning("the event loop has been blocked for %.1fs (%s): nothing else runs meanwhile, "
                        "heartbeats included, and past the group's session timeout this worker loses its "
                        "partitions; the loop's thread is in:\n%s",
                        stood_for, events or "no agent inside an event", stack)
        else:
            log.warning("the event loop is still blocked, for %.1fs now (%s)", stood_for,
                        events or "no agent inside an event")
        loop = self._loop
        if loop is not None and not loop.is_closed():
            for agent, event in busy:
                loop.call_soon_threadsafe(self._blocked, agent, event, stood_for)
