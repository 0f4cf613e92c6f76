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

The filter goes on aiokafka's loggers themselves (`summarise_repeats`), not on a handler: a logger's filters
run once per record, before any handler sees it, so every handler gets the same record (summarised, at
its final level) and each handler's own level applies to that level: a handler kept for WARNING and above
never gets a line lowered to INFO. (A handler's filter runs after the logger compared the record's level
with the handler's, and changes the record under the handlers after it.) A logger's filters see only what
is logged on that logger, not what its children pass up, hence one shared filter on each of aiokafka's
loggers. `engine worker` installs it, and so can an application that runs a Worker itself.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

INTERVAL = 10.0  # seconds during which repeats of one cause are counted, not logged
# aiokafka's lines (their templates) about an error that it retries by itself.
RETRIED = frozenset({
    "Group Coordinator Request failed: %s",  # consumer.group_coordinator: until the coordinator is known
    "Failed fetch offsets from %s: %s",  # consumer.fetcher: at its next round
})


class RepeatSummary(logging.Filter):
    """A filter for the loggers whose repeated lines are summarised (one instance shared by all of them)."""

    def __init__(self, interval: float = INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval = interval
        self._clock = clock
        # cause (logger, level, template, whether retried) -> (logged at, left out)
        self._causes: dict[tuple[str, int, str, bool], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
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
    """Put one summary on each of aiokafka's loggers (any time: the handlers need not be configured yet).
    A logger that has one keeps it, so a second call changes nothing."""
    from engine.transport.kafka_connect import client_loggers  # aiokafka imported: its loggers exist

    summary = RepeatSummary(interval)
    for logger in client_loggers():
        if not any(isinstance(f, RepeatSummary) for f in logger.filters):
            logger.addFilter(summary)
