"""The wall clock engine reads where wall-clock time changes a result: the timestamp of a record sent
without one on the in-memory broker, crontab times, idle window closing (`close_idle_after`), a window set's
`now()`.

Why one function and not `time.time()` at each place: the test driver (engine.testing.TestDriver) runs a
worker on virtual time, and every one of those readings must follow its clock, or a test of a crontab or of
an idle window would depend on the machine's. The clock is a context variable, so it follows the asyncio
tasks of the code that set it (a driver's worker) and nothing else in the process.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

wall_clock: ContextVar[Callable[[], float]] = ContextVar("engine_wall_clock", default=time.time)


def wall_time() -> float:
    """Seconds since the epoch, by the clock of the code running now (the system's, unless a driver's)."""
    return wall_clock.get()()
