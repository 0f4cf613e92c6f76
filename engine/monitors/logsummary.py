"""Repeated log lines summarised: a broker restart makes aiokafka log the same connection error thousands of
times a minute (one per request it retries), which buries everything else a worker says. Each cause (logger,
level and message template, so the same error about any node or partition counts as one) is logged the first
time; repeats within `interval` seconds are counted instead, and the next line of that cause after the
interval says how many were left out.

A few of aiokafka's error lines are about an error it retries by itself, and which a healthy start meets
on a new cluster: the group's coordinator is not known yet (the cluster creates its offsets topic at the
first group's request), and a topic just created has partitions without a leader yet. With a retriable
error, those lines are logged at INFO (summarised the same way): a healthy start prints no ERROR. The same
lines with an error that is not retriable stay errors.

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
# aiokafka's lines (their templates) about an error that it retries by itself.
RETRIED = frozenset({
    "Group Coordinator Request failed: %s",  # consumer.group_coordinator: until the coordinator is known
    "Failed fetch offsets from %s: %s",  # consumer.fetcher: at its next round
})


class RepeatSummary(logging.Filter):
    def __init__(self, interval: float = INTERVAL, prefixes: tuple[str, ...] = SUMMARISED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval = interval
        self._prefixes = prefixes
        self._clock = clock
        # cause (logger, level, template, whether retried) -> (logged at, left out)
        self._causes: dict[tuple[str, int, str, bool], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(self._prefixes):
            return True
        retried = _retried(record)
        cause = (record.name, record.levelno, str(record.msg), retried)
        now = self._clock()
        logged_at, left_out = self._causes.get(cause, (None, 0))
        if logged_at is not None and now - logged_at < self._interval:
            self._causes[cause] = (logged_at, left_out + 1)
            return False
        self._causes[cause] = (now, 0)
        if left_out and logged_at is not None:
            record.msg = f"{record.msg} [and {left_out} more like it in the last {now - logged_at:.0f}s]"
        if retried:
            record.msg = f"{record.msg} (transient: retried)"
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


def _retried(record: logging.LogRecord) -> bool:
    """One of aiokafka's lines about an error it retries, with a retriable error (aiokafka's errors say)."""
    args = record.args if isinstance(record.args, tuple) else ()
    return str(record.msg) in RETRIED and any(getattr(arg, "retriable", False) is True for arg in args)


def summarise_repeats(interval: float = INTERVAL) -> None:
    """Put the summary on every handler of the root logger (after logging is configured)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatSummary) for f in handler.filters):
            handler.addFilter(RepeatSummary(interval))
