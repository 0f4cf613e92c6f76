"""Services: things that start, run and stop in a known order.

A small lifecycle of our own, with mode-streaming underneath doing the ordering: children start after their
parent's `on_start`, in the order they were added, and stop in reverse after the parent's `on_stop`. mode
stays private to this package; callers see `Service`, `ServiceState` and `spawn`.

`spawn` is the only way a service starts a background task: every task belongs to its service, and `stop`
cancels and awaits whatever is still running (before `on_stop`), so nothing is orphaned.

One failure path: a spawned task that raises fails its service (`fail`), and a failure climbs to the root,
so whoever runs the tree (the worker) waits on the root's `failed` alone and never looks healthy while a
background task is dead. Work that should be restarted instead runs under a Supervisor, which fails its
service only past its restart limit. `Fatal` is a failure already explained to the user: not logged again.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING, Any, TypeVar

import mode

from agents.errors import Fatal

if TYPE_CHECKING:
    from collections.abc import Coroutine

log = logging.getLogger(__name__)

S = TypeVar("S", bound="Service")


class ServiceState(enum.Enum):
    INIT = "init"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


_ALLOWED = {
    ServiceState.INIT: {ServiceState.STARTING, ServiceState.STOPPED},
    ServiceState.STARTING: {ServiceState.RUNNING, ServiceState.STOPPING},
    ServiceState.RUNNING: {ServiceState.STOPPING},
    ServiceState.STOPPING: {ServiceState.STOPPED},
    ServiceState.STOPPED: set(),
}


class _ModeBridge(mode.Service):
    """Lets mode order start/stop of the tree while our Service keeps the hooks. Its "Starting..." and
    "Stopping..." lines are DEBUG (mode's `mundane_level`): at INFO a two-agent worker logged some fifteen of
    them at every start and stop, burying what the worker itself says."""

    mundane_level = "debug"

    def __init__(self, owner: Service) -> None:
        self._owner = owner
        super().__init__()

    @property
    def label(self) -> str:
        return self._owner.name

    @property
    def shortlabel(self) -> str:
        return self._owner.name

    async def on_start(self) -> None:
        self._owner._transition(ServiceState.STARTING)
        await self._owner.on_start()

    async def on_started(self) -> None:
        self._owner._transition(ServiceState.RUNNING)
        await self._owner.on_started()

    async def on_stop(self) -> None:
        if self._owner.state in (ServiceState.STARTING, ServiceState.RUNNING):
            self._owner._transition(ServiceState.STOPPING)
        await self._owner._before_children_stop()

    async def on_shutdown(self) -> None:
        self._owner.state = ServiceState.STOPPED


class Service:
    """Base class for everything with a lifecycle: override `on_start`, `on_started`, `on_stop`."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or type(self).__name__
        self.state = ServiceState.INIT
        self._children: list[Service] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._bridge = _ModeBridge(self)
        self._parent: Service | None = None
        self.failure: BaseException | None = None
        self.failed = asyncio.Event()

    def add_child(self, child: S) -> S:
        """Start `child` after this service (in order of adding) and stop it before (in reverse)."""
        self._children.append(child)
        child._parent = self
        self._bridge.add_dependency(child._bridge)
        return child

    def fail(self, exc: BaseException) -> None:
        """Record that this service failed (the first failure is kept) and pass it up to the root."""
        if self.failure is None:
            self.failure = exc
        self.failed.set()
        if self._parent is not None:
            self._parent.fail(exc)

    async def start(self) -> None:
        if self.state is not ServiceState.INIT:
            raise RuntimeError(f"service {self.name!r} was already started ({self.state.value})")
        try:
            await self._bridge.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop this service and its children; safe to call more than once."""
        if self.state in (ServiceState.STOPPING, ServiceState.STOPPED):
            return
        if self.state is ServiceState.INIT:
            self._transition(ServiceState.STOPPED)
            return
        try:
            await self._bridge.stop()
        finally:
            self.state = ServiceState.STOPPED

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `coro` as a task owned by this service; it is cancelled and awaited on stop."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            if not isinstance(exc, Fatal):
                log.error("%s failed: %s: %s", task.get_name(), type(exc).__name__, exc, exc_info=exc)
            self.fail(exc)

    async def on_start(self) -> None:
        """Called before children start."""

    async def on_started(self) -> None:
        """Called once this service and all its children are running."""

    async def on_stop(self) -> None:
        """Called after this service's spawned tasks were cancelled, before its children stop."""

    async def _before_children_stop(self) -> None:
        # Tasks first: on_stop may close what they use (a consumer), and must not race them.
        await cancel_and_wait(list(self._tasks))
        await self.on_stop()

    def _transition(self, new: ServiceState) -> None:
        if new not in _ALLOWED[self.state]:
            raise RuntimeError(f"service {self.name!r} cannot go from {self.state.value} to {new.value}")
        self.state = new

    async def __aenter__(self: S) -> S:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.state.value}>"


async def cancel_and_wait(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` and wait for them, logging (not raising) what they died of."""
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for task, result in zip(tasks, results, strict=True):
        if isinstance(result, Exception):
            log.error("task %s failed while stopping: %r", task.get_name(), result)
