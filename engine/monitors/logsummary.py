"""Repeated log lines summarised: a broker restart makes aiokafka log the same connection error thousands of
times a minute (one per request it retries), which buries everything else a worker says. Each cause (logger,
level and message template, so the same error about any node or partition counts as one) is logged the first
time; repeats within `interval` seconds are counted instead, and the next line of that cause after the
interval says how many were left out.

The filter goes on a handler (`summarise_repeats`), so it sees the records of every logger below the root;
`engine worker` installs it, and so can an application that runs a Worker itself.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

INTERVAL = 10.0  # seconds during which repeats of one cause are counted, not logged
SUMMARISED = ("aiokafka",)  # loggers (and their children) whose repeats are summarised


class RepeatSummary(logging.Filter):
    def __init__(self, interval: float = INTERVAL, prefixes: tuple[str, ...] = SUMMARISED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval = interval
        self._prefixes = prefixes
        self._clock = clock
        self._causes: dict[tuple[str, int, str], tuple[float, int]] = {}  # cause -> (logged at, left out)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(self._prefixes):
            return True
        cause = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        logged_at, left_out = self._causes.get(cause, (None, 0))
        if logged_at is not None and now - logged_at < self._interval:
            self._causes[cause] = (logged_at, left_out + 1)
            return False
        self._causes[cause] = (now, 0)
        if left_out and logged_at is not None:
            record.msg = f"{record.msg} [and {left_out} more like it in the last {now - logged_at:.0f}s]"
        return True


def summarise_repeats(interval: float = INTERVAL) -> None:
    """Put the summary on every handler of the root logger (after logging is configured)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatSummary) for f in handler.filters):
            handler.addFilter(RepeatSummary(interval))
