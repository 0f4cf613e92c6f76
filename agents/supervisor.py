"""One-for-one supervision with a restart limit.

A child is a coroutine factory. When its coroutine raises, the supervisor logs the error and calls the factory
again after a backoff (the policy's: fixed, or doubled with each crash counted); the crash is counted, and
more than `max_restarts` crashes within `within` means something is broken for good: the supervisor stops
restarting, records the failure and wakes whoever waits on `failed` (the worker, which then stops with that
error). Never a silent stall: a child that gives up is always visible.

A child that returns normally is done and is not restarted. A child that raises `Fatal` escalates at once.
A `Crashed` error says all there is to say in its message: it is logged in one line, without a traceback.
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

from agents.errors import Crashed, Fatal, MaxRestartsExceeded
from agents.service import Service, ServiceState

log = logging.getLogger(__name__)

ChildFactory = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True)
class RestartPolicy:
    """How often a crashed child may be restarted before its supervisor gives up, and how long it waits
    before each restart: `backoff`, or with `max_backoff`, `backoff` doubled for each earlier crash
    counted within `within`, at most `max_backoff` (a process that cannot start is not restarted in a
    tight loop)."""

    max_restarts: int = 10
    within: timedelta = timedelta(minutes=1)
    backoff: timedelta = timedelta(milliseconds=100)
    max_backoff: timedelta | None = None

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, not {self.max_restarts}")
        if self.within <= timedelta(0):
            raise ValueError(f"within must be a positive duration, not {self.within}")
        if self.max_backoff is not None and self.max_backoff < self.backoff:
            raise ValueError(f"max_backoff must be at least backoff, not {self.max_backoff}")

    def delay(self, crashes: int) -> float:
        """Seconds to wait before restarting a child with `crashes` crashes counted (1 for the first)."""
        if self.max_backoff is None:
            return self.backoff.total_seconds()
        doubled: float = self.backoff.total_seconds() * 2 ** (crashes - 1)
        return min(doubled, self.max_backoff.total_seconds())


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
        self.last_crash: tuple[str, BaseException] | None = None  # the child that crashed last, and why
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
                trace = None if isinstance(exc, Crashed) else exc
                if len(crashes) > self.policy.max_restarts:
                    failure = MaxRestartsExceeded(name, self.policy.max_restarts, self.policy.within, exc)
                    log.error("%s: %s", self.name, failure, exc_info=trace)
                    self.fail(failure)
                    return
                self.restarts += 1
                self.last_crash = (name, exc)
                delay = self.policy.delay(len(crashes))
                log.warning(
                    "%s: %s crashed (%s: %s); restart %d of at most %d within %gs, in %gs",
                    self.name, name, type(exc).__name__, exc, len(crashes),
                    self.policy.max_restarts, window, delay, exc_info=trace,
                )
                await asyncio.sleep(delay)
