"""An asyncio event loop on virtual time, for the test driver: time moves only when the driver moves it, and
"everything this input causes is done" is a fact the loop knows, not a guess.

How: the loop is asyncio's own selector loop, with two changes through its public seams. Its clock
(`time()`) is a number the driver sets. Its selector never waits: asyncio asks the selector to wait only
when no callback is ready, and for as long as until its next timer; that moment is exactly "idle at this
time". There the selector either jumps the clock to that timer (while the driver lets time run up to a
limit) or stops the loop. So `asyncio.sleep`, `wait_for`, timeouts and every timer of a worker run on the
virtual clock, in order, without real sleeping, and a loop that never idles (a coroutine spinning on
`sleep(0)`) is caught by a bound on the iterations instead of hanging the test.

Real I/O has no place here: a coroutine waiting on a socket looks idle to this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from typing import Any

# Loop iterations in a row without becoming idle, after which the driver gives up: no app needs this many
# steps for one input, while a coroutine spinning on `sleep(0)` reaches it soon: the test fails, not hangs.
MAX_BUSY_STEPS = 200_000


class NeverIdle(RuntimeError):
    """The app kept the loop busy without ever waiting: a coroutine spinning without sleeping."""


class _Clock:
    """The virtual time and how far the loop may move it."""

    __slots__ = ("limit", "now")

    def __init__(self, start: float) -> None:
        self.now = start
        self.limit = start


class _NeverWaitingSelector(selectors.DefaultSelector):
    """Polls without waiting; where asyncio would wait, moves the clock to the next timer or stops the
    loop."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None
        self.busy_steps = 0
        self.spinning = False
        self.steps = 0  # loop iterations in all

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.steps += 1
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:  # callbacks are ready (or a timer is due): run them
            self.busy_steps += 1
            if self.busy_steps > MAX_BUSY_STEPS and self.loop is not None:
                self.spinning = True
                self.loop.stop()
            return ready
        self.busy_steps = 0
        clock = self.clock
        if timeout is not None and clock.now + timeout <= clock.limit:
            clock.now += timeout  # idle until a timer that is within the limit: jump to it
        else:
            clock.now = clock.limit  # idle until after the limit: done for now
            assert self.loop is not None
            self.loop.stop()
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose time is virtual, moved by `run_until_idle`: `time()` counts seconds from
    the loop's start (small numbers keep timers exact: near the epoch's 1.7e9 s a float steps by 2.4e-7 s,
    coarser than asyncio's clock resolution), `wall_time()` is `start` plus that."""

    def __init__(self, start: float) -> None:
        self.start = start
        self._clock = _Clock(0.0)
        self._never_waiting = _NeverWaitingSelector(self._clock)
        super().__init__(self._never_waiting)
        self._never_waiting.loop = self

    def time(self) -> float:
        return self._clock.now

    def wall_time(self) -> float:
        """Seconds since the epoch on the virtual clock."""
        return self.start + self._clock.now

    @property
    def steps(self) -> int:
        """How many iterations the loop has run: the cost of what ran on it, whatever time it covered."""
        return self._never_waiting.steps

    def run_until_idle(self, seconds: float = 0.0) -> None:
        """Run every callback and timer due up to `seconds` from now, moving time timer by timer, and return
        when nothing is left to do before that; time is then `seconds` later."""
        if seconds < 0:
            raise ValueError(f"time cannot go back ({seconds} s)")
        self._clock.limit = self._clock.now + seconds
        self._never_waiting.busy_steps = 0
        self._never_waiting.spinning = False
        self.run_forever()
        if self._never_waiting.spinning:
            raise NeverIdle(f"the app never became idle: {MAX_BUSY_STEPS:,} loop steps in a row without "
                            "waiting (a coroutine spinning without sleeping, e.g. `while ...: await "
                            "asyncio.sleep(0)`)")

    def _stop_moving(self, _task: asyncio.Task[Any]) -> None:
        self._clock.limit = self._clock.now  # what it ran for is done: time need not move further

    def run_task(self, coro: Any, *, within: float = 0.0) -> Any:
        """Run `coro` as a task to its end, letting time move up to `within` seconds for it; its result.
        A coroutine still waiting then (for an event nothing will cause, or for longer) is cancelled and
        reported."""
        task = self.create_task(coro)
        task.add_done_callback(self._stop_moving)
        self.run_until_idle(within)
        if not task.done():
            task.cancel()
            self.run_until_idle()
            raise TimeoutError(f"{coro.__qualname__} was still waiting after {within:g} s of virtual time")
        return task.result()

    def cancel_all(self) -> None:
        """Cancel every task still on the loop and let them finish (before closing it: a driver whose app
        failed, or never became idle, leaves some)."""
        tasks = asyncio.all_tasks(self)
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(NeverIdle):  # a task that ignores its cancellation: left to the GC
                self.run_until_idle()
