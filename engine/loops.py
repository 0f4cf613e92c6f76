"""The event loop a worker runs on (uvloop lives here and only here): uvloop when it is installed (the
extra `engine-streams[fast]`), else asyncio's own; the `event_loop` setting picks one ("auto", "uvloop",
"asyncio"). What uvloop gives is measured in benchmarks/README.md. And how a process's entry point on a loop
stops on SIGTERM and SIGINT (`stop_on_signals`)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING, TypeVar

from engine.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator
    from typing import Any

T = TypeVar("T")


def loop_factory(choice: str = "auto") -> tuple[str, Callable[[], asyncio.AbstractEventLoop]]:
    """(the loop's name, how to make one) for an `event_loop` setting."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ConfigError("setting 'event_loop' is 'uvloop', which is not installed; "
                                  "pip install 'engine-streams[fast]' (or uvloop)") from None
        else:
            return "uvloop", uvloop.new_event_loop
    return "asyncio", asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    """`asyncio.run(main)` on the chosen loop."""
    _, factory = loop_factory(choice)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running_loop_name() -> str:
    """The name of the running loop's implementation, for the worker's start-up line."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT call `stop` on the running loop instead of ending the process
    (`engine worker`'s worker, its supervisor of processes)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
