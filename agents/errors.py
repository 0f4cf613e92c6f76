"""Errors of the actor kernel.

    AgentsError
    ├── MailboxClosed        put/get on a mailbox that was closed (shutdown)
    ├── Fatal                raised by a behaviour to stop its supervisor at once, without a restart
    ├── Crashed              a crash its message explains whole (a process's exit): restarted, no traceback
    └── MaxRestartsExceeded  an actor crashed more often than its restart policy allows
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import timedelta


class AgentsError(Exception):
    """Root of the actor kernel's errors."""


class MailboxClosed(AgentsError):
    """The mailbox was closed: no more messages will be delivered."""


class Fatal(AgentsError):
    """A behaviour gives up: its supervisor escalates instead of restarting it."""


class Crashed(AgentsError):
    """A child crashed for a reason its message says whole (a child process's exit status: its own log says
    why): restarted as any crash, logged without a traceback, which would show only the supervisor's code."""


class MaxRestartsExceeded(AgentsError):
    """An actor crashed more than `max_restarts` times within `within`; its supervisor gave up."""

    def __init__(self, actor: str, max_restarts: int, within: timedelta, last: BaseException) -> None:
        self.actor = actor
        self.max_restarts = max_restarts
        self.within = within
        self.last = last
        super().__init__(
            f"actor {actor!r} crashed more than {max_restarts} times within "
            f"{within.total_seconds():g}s; last error: {type(last).__name__}: {last}"
        )
