"""One-for-one supervision with a restart limit.

A child is a coroutine factory. When its coroutine raises, the supervisor logs the error and calls the factory
again; the crash is counted, and more than `max_restarts` crashes within `within` means something is broken
for good: the supervisor stops restarting, records the failure and wakes whoever waits on `failed` (the
worker, which then stops with that error). Never a silent stall: a child that gives up is always visible.

A child that returns normally is done and is not restarted. A child that raises `Fatal` escalates at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agents.errors import Fatal, MaxRestartsExceeded
from agents.service import Service, ServiceState

log = logging.getLogger(__name__)

ChildFactory = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class RestartPolicy:
    """How often a crashed child may be restarted before its supervisor gives up."""

    max_restarts: int = 10
    within: timedelta = timedelta(minutes=1)
    backoff: timedelta = timedelta(milliseconds=100)

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, not {self.max_restarts}")
        if self.within <= timedelta(0):
            raise ValueError(f"within must be a positive duration, not {self.within}")


class Supervisor(Service):
    """Runs children, restarts them when they crash, and fails loudly past the restart limit."""

    def __init__(
        self,
        name: str,
        policy: RestartPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name)
        self.policy = policy or RestartPolicy()
        self.restarts = 0
        self._clock = clock
        self._pending: list[tuple[str, ChildFactory]] = []
        self._children_tasks: list[asyncio.Task[Any]] = []

    def supervise(self, name: str, factory: ChildFactory) -> None:
        """Add a child; it starts with the supervisor, or at once if the supervisor already runs."""
        if self.state in (ServiceState.STARTING, ServiceState.RUNNING) and not self._pending:
            self._children_tasks.append(self.spawn(self._run(name, factory), name))
        else:
            self._pending.append((name, factory))

    async def on_start(self) -> None:
        for name, factory in self._pending:
            self._children_tasks.append(self.spawn(self._run(name, factory), name))
        self._pending.clear()

    async def wait_children(self, timeout: float | None) -> bool:
        """Wait for every child to finish; True if they all did within `timeout` seconds."""
        tasks = [t for t in self._children_tasks if not t.done()]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    async def _run(self, name: str, factory: ChildFactory) -> None:
        crashes: deque[float] = deque()
        window = self.policy.within.total_seconds()
        while True:
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Fatal as exc:
                log.error("%s: %s gave up: %s", self.name, name, exc)
                self.fail(exc)
                return
            except Exception as exc:
                now = self._clock()
                crashes.append(now)
                while crashes and now - crashes[0] > window:
                    crashes.popleft()
                if len(crashes) > self.policy.max_restarts:
                    failure = MaxRestartsExceeded(name, self.policy.max_restarts, self.policy.within, exc)
                    log.error("%s: %s", self.name, failure, exc_info=exc)
                    self.fail(failure)
                    return
                self.restarts += 1
                log.warning(
                    "%s: %s crashed (%s: %s); restart %d of at most %d within %gs",
                    self.name, name, type(exc).__name__, exc, len(crashes),
                    self.policy.max_restarts, window, exc_info=exc,
                )
                await asyncio.sleep(self.policy.backoff.total_seconds())
