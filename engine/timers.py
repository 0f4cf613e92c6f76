"""Timers: each app timer runs as a supervised child; a crash is logged and the timer restarted, within
the agents' restart limit."""

from __future__ import annotations

import asyncio
import math
from datetime import datetime
from typing import TYPE_CHECKING

from agents import RestartPolicy, Supervisor
from engine.activity import Activity
from engine.clock import wall_time

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from engine.schedule import Timer
    from engine.settings import Settings


def timer_supervisor(timers: list[Timer], settings: Settings,
                     is_leader: Callable[[], bool] = lambda: True, activity: Activity | None = None
                     ) -> Supervisor:
    """`is_leader`: whether this worker is the group's leader now (for `on_leader` timers); `activity`: the
    worker's (engine.activity), told of every timer's run (its writes and sends are for the next commit)."""
    supervisor = Supervisor("timers", RestartPolicy(
        max_restarts=settings.agent_max_restarts, within=settings.agent_restart_window))
    signal = (activity if activity is not None else Activity()).signal
    for timer in timers:
        supervisor.supervise(f"timer:{timer.name}", _ticker(timer, is_leader, signal))
    return supervisor


def _ticker(timer: Timer, is_leader: Callable[[], bool], ran: Callable[[], None]
            ) -> Callable[[], Awaitable[None]]:
    if timer.cron is not None:
        return _cron_ticker(timer, timer.cron, is_leader, ran)
    if timer.aligned:
        return _aligned_ticker(timer, is_leader, ran)

    async def run() -> None:
        interval = timer.interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            if not timer.on_leader or is_leader():
                await timer.fun()
                ran()

    return run


def _cron_ticker(timer: Timer, expression: str, is_leader: Callable[[], bool],
                 ran: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    from engine.schedule import next_fire

    def after(moment: float) -> float:  # in the schedule's zone, or naive local time
        return next_fire(expression, datetime.fromtimestamp(moment, timer.timezone)).timestamp()

    return _wall_clock_ticker(timer, after, is_leader, ran)


def _aligned_ticker(timer: Timer, is_leader: Callable[[], bool], ran: Callable[[], None]
                    ) -> Callable[[], Awaitable[None]]:
    interval = timer.interval.total_seconds()

    def after(moment: float) -> float:  # the next multiple of the interval since the epoch
        return (math.floor(moment / interval) + 1) * interval

    return _wall_clock_ticker(timer, after, is_leader, ran)


def _wall_clock_ticker(timer: Timer, after: Callable[[float], float], is_leader: Callable[[], bool],
                       ran: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """Runs `timer` at the wall-clock times `after` gives (the first time strictly after a time)."""

    async def run() -> None:
        last = wall_time()
        while True:
            fire = after(last)
            # Slept on the loop's clock until the wall clock says it is time (the loop's may run a little
            # ahead of it): a schedule never fires before its time, nor twice for one time; the times missed
            # while a machine slept, or while a run took longer than the period, are skipped.
            while (left := fire - wall_time()) > 0:  # noqa: ASYNC110  # waiting for a time
                await asyncio.sleep(left)
            if not timer.on_leader or is_leader():
                await timer.fun()
                ran()
            last = max(fire, wall_time())

    return run
