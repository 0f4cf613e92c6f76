"""aiokafka's repeated errors are summarised: the first line of a cause is logged, its repeats within the
interval are counted, and the next line after the interval says how many were left out; other causes and
lines below WARNING pass untouched. The summary is a filter of aiokafka's loggers: every handler gets the
same record, and a handler's own level applies to the level the record was given."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from engine.monitors.logsummary import RepeatSummary, summarise_repeats
from engine.transport.kafka_connect import client_loggers

if TYPE_CHECKING:
    from collections.abc import Iterator


class Collect(logging.Handler):
    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.seen: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.levelname, record.getMessage()))


@pytest.fixture
def collect() -> Iterator[Collect]:
    """A handler on the root logger, for every test logger's lines; test loggers' filters removed after."""
    handler = Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    tested = [logging.getLogger(name) for name in ("aiokafka.test.client", "engine.test.summary",
                                                   "aiokafka.consumer.group_coordinator",
                                                   "aiokafka.consumer.fetcher")]
    for logger in tested:  # (whatever other tests left on their parents)
        logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for logger in {*client_loggers(), *tested}:
            logger.filters[:] = [f for f in logger.filters if not isinstance(f, RepeatSummary)]
        for logger in tested:
            logger.setLevel(logging.NOTSET)


def test_repeats_of_one_cause_are_counted_and_reported_after_the_interval(collect):
    now = [0.0]
    kafka, ours = logging.getLogger("aiokafka.test.client"), logging.getLogger("engine.test.summary")
    kafka.addFilter(RepeatSummary(interval=10, clock=lambda: now[0]))
    for node in range(1000):  # a reconnect storm: the same error about any node is one cause
        kafka.error("Unable connect to node with id %s: refused", node % 3)
        now[0] += 0.005
    kafka.warning("Heartbeat failed for group %s", "g")
    ours.error("engine's own line %d", 1)
    ours.error("engine's own line %d", 1)
    kafka.info("Unable connect to node with id %s: refused", 9)  # below WARNING: never summarised
    now[0] = 11.0
    kafka.error("Unable connect to node with id %s: refused", 1)
    assert [message for _, message in collect.seen] == [
        "Unable connect to node with id 0: refused",
        "Heartbeat failed for group g",
        "engine's own line 1",
        "engine's own line 1",
        "Unable connect to node with id 9: refused",
        "Unable connect to node with id 1: refused [and 999 more like it in the last 11s]",
    ]


class _Retriable(Exception):
    retriable = True


class _Fatal(Exception):
    retriable = False


def test_aiokafka_lines_about_an_error_it_retries_are_logged_at_info(collect):
    """What a healthy start on a new cluster meets: no coordinator yet, a new topic without leaders yet."""
    coordinator, fetcher = (logging.getLogger("aiokafka.consumer.group_coordinator"),
                            logging.getLogger("aiokafka.consumer.fetcher"))
    summary = RepeatSummary(interval=10, clock=lambda: 0.0)
    for logger in (coordinator, fetcher):
        logger.addFilter(summary)
    coordinator.error("Group Coordinator Request failed: %s", _Retriable("GroupCoordinatorNotAvailable"))
    fetcher.error("Failed fetch offsets from %s: %s", 1, _Retriable("NotLeaderForPartition"))
    fetcher.error("Failed fetch offsets from %s: %s", 2, _Retriable("NotLeaderForPartition"))
    coordinator.error("Group Coordinator Request failed: %s", _Fatal("GroupIdNotFound"))
    coordinator.setLevel(logging.WARNING)
    coordinator.error("Group Coordinator Request failed: %s", _Retriable("GroupCoordinatorNotAvailable"))
    assert collect.seen == [
        ("INFO", "Group Coordinator Request failed: GroupCoordinatorNotAvailable (transient: retried)"),
        ("INFO", "Failed fetch offsets from 1: NotLeaderForPartition (transient: retried)"),
        ("ERROR", "Group Coordinator Request failed: GroupIdNotFound"),
    ], "repeats summarised as ever; not shown where INFO is not"


def test_every_handler_gets_the_same_record_at_the_level_it_was_given(collect):
    """A handler for WARNING and above (an errors file) gets no retried line lowered to INFO, and the
    handlers beside it see the line as the others do: its text marked once, its repeats left out once."""
    errors_only, second = Collect(logging.WARNING), Collect()
    root = logging.getLogger()
    root.addHandler(errors_only)
    root.addHandler(second)
    try:
        summarise_repeats(interval=10)
        summarise_repeats(interval=10)  # installed once
        coordinator = logging.getLogger("aiokafka.consumer.group_coordinator")
        for _ in range(3):
            coordinator.error("Group Coordinator Request failed: %s", _Retriable("NotCoordinator"))
        coordinator.error("Group Coordinator Request failed: %s", _Fatal("GroupIdNotFound"))
    finally:
        root.removeHandler(errors_only)
        root.removeHandler(second)
    retried = ("INFO", "Group Coordinator Request failed: NotCoordinator (transient: retried)")
    fatal = ("ERROR", "Group Coordinator Request failed: GroupIdNotFound")
    assert errors_only.seen == [fatal]
    assert collect.seen == second.seen == [retried, fatal]


def test_each_of_aiokafkas_loggers_gets_the_summary(collect):
    """aiokafka's client logs on `aiokafka`, its modules on loggers of their own: a logger's filter sees only
    its own records, so each has the summary (the one instance: a cause counted once whichever logs it)."""
    loggers = client_loggers()
    names = {logger.name for logger in loggers}
    assert {"aiokafka", "aiokafka.conn", "aiokafka.consumer.fetcher", "aiokafka.consumer.group_coordinator",
            "aiokafka.producer.sender", "aiokafka.admin.client", "aiokafka.cluster"} <= names
    summarise_repeats()
    summaries = {id(f) for logger in loggers for f in logger.filters if isinstance(f, RepeatSummary)}
    assert len(summaries) == 1
    assert all(any(isinstance(f, RepeatSummary) for f in logger.filters) for logger in loggers)
