"""Which running worker the current code belongs to, for the app-level objects that several workers of one App
in one process share: topics (their producer), agents (their replies) and tables (their partitions here).

A user's code names those objects at module level (`counts[word] += 1`, `await out.send(...)`), so a worker
binds itself to them when it starts. With one worker of an App in the process (the usual case) each object
keeps that worker's value in a plain attribute: nothing is looked up per event. With two (a test running two
workers of one App, a worker beside an embedded one), the attribute becomes a dispatcher that picks the value
of the worker the running code belongs to: every task a worker starts runs with `current_worker` set to it
(asyncio tasks inherit it). Code outside every worker (a test sending input, reading a table) gets the first
worker started for sends and asks, and every worker's partitions, merged, for table reads.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterator

T = TypeVar("T")

current_worker: ContextVar[object | None] = ContextVar("engine_current_worker", default=None)


@contextlib.contextmanager
def running_as(worker: object) -> Iterator[None]:
    """Run a block (and every task it starts) as code of `worker`."""
    token = current_worker.set(worker)
    try:
        yield
    finally:
        current_worker.reset(token)


class PerWorker(Generic[T]):
    """One app-level object's value per running worker, in the order the workers bound them."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[object, T] = {}

    def bind(self, worker: object, value: T) -> None:
        self._values[worker] = value

    def unbind(self, worker: object) -> None:
        self._values.pop(worker, None)

    def __len__(self) -> int:
        return len(self._values)

    def only(self) -> T | None:
        """The value while exactly one worker is bound, else None."""
        if len(self._values) == 1:
            return next(iter(self._values.values()))
        return None

    def current(self) -> T | None:
        """The value of the worker the running code belongs to; outside every worker, the first one's."""
        values = self._values
        found = values.get(current_worker.get())
        if found is None and values:
            return next(iter(values.values()))
        return found

    def inside(self) -> T | None:
        """The value of the worker the running code belongs to, or None outside every worker."""
        return self._values.get(current_worker.get())

    def values(self) -> list[T]:
        return list(self._values.values())
