"""How a worker's periodic services (the commit loop, the stuck-event watchdog, the repartition purge) sleep
while they have nothing to do, instead of waking every interval to find nothing.

What gives them work begins with an activity the worker sees: records fetched, a timer's run, a commit.
Each one signals `Activity`; each service runs its rounds through its own `Rounds`, and after a round that
found nothing to do (the service says so) it sleeps until the next signal, then until its next round. Rounds
keep their times: each comes a whole number of intervals after the end of the one before, as if the rounds
in between had run and found nothing.

Why: on virtual time (engine.testing) a worker advanced by a day would otherwise wake every service at
every interval (tens of thousands of steps, seconds of a test); this way the steps follow what happens, not
how long it takes. On a live worker it only saves idle wake-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import math


class Activity:
    """Tells every listening service that something happened that may give it work."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[asyncio.Event] = []

    def signal(self) -> None:
        for listener in self._listeners:
            listener.set()

    def rounds(self, interval: float) -> Rounds:
        """The rounds of one more service, every `interval` seconds."""
        listener = asyncio.Event()
        self._listeners.append(listener)
        return Rounds(listener, interval)


class Rounds:
    """One service's rounds: every `interval` seconds while it has work, none while it has none."""

    __slots__ = ("_interval", "_woken")

    def __init__(self, woken: asyncio.Event, interval: float) -> None:
        self._woken = woken
        self._interval = interval

    async def next(self, *, idle: bool = False, wake_after: float | None = None) -> None:
        """Return at the next round: `interval` seconds from now, or, if the round just ended found nothing
        to do (`idle`), at the first round time after the next activity (one that happened during the round
        counts: the round may have missed it), or after `wake_after` seconds if that comes first (the time
        the service knows it will have work without any activity)."""
        loop = asyncio.get_running_loop()
        ended = loop.time()
        if idle:
            if wake_after is None:
                await self._woken.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(wake_after, 0.0)):
                        await self._woken.wait()
        waited = loop.time() - ended
        rounds = max(math.ceil(waited / self._interval), 1)
        await asyncio.sleep(rounds * self._interval - waited)
        self._woken.clear()  # the round starts: what happens from now on is for the next
