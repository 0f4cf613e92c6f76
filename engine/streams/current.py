"""The event being processed now: one accessor, `current_event()`, for everything below and beside the
streams that needs to know which event caused what it does (a table write goes to that event's partition, a
send into its task's transaction, an `ask` holds the quiesce gate open).

Each agent instance runs in its own asyncio task, so the running task's *source* (a ContextVar) is that
instance's stream, and the stream's `current_event` attribute is the event it is processing. A stream (the
one writer: engine.streams.stream) sets `current_source` once, on its first event in a task, and from then
on only checks it and moves its attribute: a ContextVar.set per event would build a new context mapping per
event.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engine.events import Event


class EventSource(Protocol):
    """What the running task takes its events from: an agent instance's stream, or OUTSIDE."""

    @property
    def current_event(self) -> Event | None:
        """The event being processed now (None between events)."""


class Processing(Protocol):
    """What processes a run of events in one call (a fused pipeline's fold: engine.fused) is told which of
    them it is inside: an agent instance's stream, whose `current_event` the call moves event by event."""

    current_event: Event | None


class _Outside:
    """Code outside every agent (a timer, a query, a test): it processes no event."""

    __slots__ = ()
    current_event = None


OUTSIDE = _Outside()

current_source: contextvars.ContextVar[EventSource] = contextvars.ContextVar(
    "engine_current_source", default=OUTSIDE
)
_source = current_source.get


def current_event() -> Event | None:
    """The event the running agent instance is processing now (None outside agents, and between events).
    Tables read it to put a write in the partition of the event that caused it; sends, to go in its task's
    transaction. A task the agent spawned shares the agent's stream: it sees the agent's current event as
    the agent moves on, not the one it was spawned in."""
    return _source().current_event
