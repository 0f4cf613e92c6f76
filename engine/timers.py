"""Timers: each app timer runs as a supervised child; a crash is logged and the timer restarted, within
the agents' restart limit."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agents import RestartPolicy, Supervisor

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
    async def run() -> None:
        interval = timer.interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            if not timer.on_leader or is_leader():
                await timer.fun()

    return run
