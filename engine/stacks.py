"""Where a suspended coroutine waits: the chain of coroutines it awaits through, as traceback lines.

asyncio's `Task.get_stack` gives only the outermost frame of a suspended task (Python 3.11 does not follow
what a coroutine awaits), which for an agent instance is always engine's own loop around the agent. What a
person needs to know of an agent stuck inside an event is the line of the agent's code it waits on, which is
at the other end of the chain: each coroutine's `cr_await` (an async generator's `ag_await`, a generator's
`gi_yieldfrom`) is the next one in, down to the future it waits for. An `async for` awaits its generator
through an `async_generator_asend`, which names its generator to the garbage collector only
(`gc.get_referents`): that is how the chain is followed into a generator agent's body.
"""

from __future__ import annotations

import gc
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

DEPTH = 50  # coroutines followed at most (a chain is a handful deep; this bounds a pathological one)


def awaiting(coro: Any) -> list[str]:
    """The frames `coro` waits in, outermost first, formatted as a traceback's lines."""
    frames: list[tuple[FrameType, int]] = []
    while coro is not None and len(frames) < DEPTH:
        frame = _frame(coro)
        if frame is None:
            break
        frames.append((frame, frame.f_lineno))
        coro = _awaited(coro)
    return traceback.StackSummary.extract(frames).format()


def _frame(coro: Any) -> Any:
    for name in ("cr_frame", "ag_frame", "gi_frame"):
        frame = getattr(coro, name, None)
        if frame is not None:
            return frame
    return None


def _awaited(coro: Any) -> Any:
    for name in ("cr_await", "ag_await", "gi_yieldfrom"):
        inner = getattr(coro, name, None)
        if inner is not None:
            if type(inner).__name__ == "async_generator_asend":
                return next((g for g in gc.get_referents(inner) if hasattr(g, "ag_frame")), None)
            return inner
    return None
