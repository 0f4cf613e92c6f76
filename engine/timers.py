"""Timers: each app timer runs as a supervised child; a crash is logged and the timer restarted, within
the agents' restart limit."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING

from agents import RestartPolicy, Supervisor
from engine.clock import wall_time

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from engine.app import Timer
    from engine.settings import Settings


def timer_supervisor(timers: list[Timer], settings: Settings,
                     is_leader: Callable[[], bool] = lambda: True) -> Supervisor:
    """`is_leader`: whether this worker is the group's leader now (for `on_leader` timers)."""
    supervisor = Supervisor("timers", RestartPolicy(
        max_restarts=settings.agent_max_restarts, within=settings.agent_restart_window))
    for timer in timers:
        supervisor.supervise(f"timer:{timer.name}", _ticker(timer, is_leader))
    return supervisor


def _ticker(timer: Timer, is_leader: Callable[[], bool]) -> Callable[[], Awaitable[None]]:
    if timer.cron is not None:
        return _cron_ticker(timer, timer.cron, is_leader)

    async def run() -> None:
        interval = timer.interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            if not timer.on_leader or is_leader():
                await timer.fun()

    return run


def _cron_ticker(timer: Timer, expression: str,
                 is_leader: Callable[[], bool]) -> Callable[[], Awaitable[None]]:
    from engine.schedule import next_fire

    def now() -> datetime:  # in the schedule's zone, or naive local time
        return datetime.fromtimestamp(wall_time(), timer.timezone)

    async def run() -> None:
        after = now()
        while True:
            fire = next_fire(expression, after)
            # Slept on the loop's clock until the wall clock says it is time (the loop's may run a little
            # ahead of it): a schedule never fires before its time, nor twice for one time; the times missed
            # while a machine slept, or while a run took longer than the period, are skipped.
            while (left := (fire - now()).total_seconds()) > 0:  # noqa: ASYNC110  # waiting for a time
                await asyncio.sleep(left)
            if not timer.on_leader or is_leader():
                await timer.fun()
            after = max(fire, now())

    return run
