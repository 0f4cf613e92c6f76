"""aiokafka's repeated errors are summarised: the first line of a cause is logged, its repeats within the
interval are counted, and the next line after the interval says how many were left out; other loggers, other
causes and lines below WARNING pass untouched."""

from __future__ import annotations

import logging

from engine.monitors.logsummary import RepeatSummary


def test_repeats_of_one_cause_are_counted_and_reported_after_the_interval():
    now = [0.0]
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Collect()
    handler.addFilter(RepeatSummary(interval=10, clock=lambda: now[0]))
    kafka, ours = logging.getLogger("aiokafka.client.test"), logging.getLogger("engine.test.summary")
    for logger in (kafka, ours):
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.INFO)
    try:
        for node in range(1000):  # a reconnect storm: the same error about any node is one cause
            kafka.error("Unable connect to node with id %s: refused", node % 3)
            now[0] += 0.005
        kafka.warning("Heartbeat failed for group %s", "g")
        ours.error("engine's own line %d", 1)
        ours.error("engine's own line %d", 2)
        kafka.info("Unable connect to node with id %s: refused", 9)  # below WARNING: never summarised
        now[0] = 11.0
        kafka.error("Unable connect to node with id %s: refused", 1)
    finally:
        for logger in (kafka, ours):
            logger.removeHandler(handler)
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
    assert seen == [
        "Unable connect to node with id 0: refused",
        "Heartbeat failed for group g",
        "engine's own line 1",
        "engine's own line 2",
        "Unable connect to node with id 9: refused",
        "Unable connect to node with id 1: refused [and 999 more like it in the last 11s]",
    ]


class _Retriable(Exception):
    retriable = True


class _Fatal(Exception):
    retriable = False


def test_aiokafka_lines_about_an_error_it_retries_are_logged_at_info():
    """What a healthy start on a new cluster meets: no coordinator yet, a new topic without leaders yet."""
    seen: list[tuple[str, str]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.levelname, record.getMessage()))

    handler = Collect()
    handler.addFilter(RepeatSummary(interval=10, clock=lambda: 0.0))
    coordinator, fetcher = (logging.getLogger("aiokafka.consumer.group_coordinator"),
                            logging.getLogger("aiokafka.consumer.fetcher"))
    for logger in (coordinator, fetcher):
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.INFO)
    try:
        coordinator.error("Group Coordinator Request failed: %s", _Retriable("GroupCoordinatorNotAvailable"))
        fetcher.error("Failed fetch offsets from %s: %s", 1, _Retriable("NotLeaderForPartition"))
        fetcher.error("Failed fetch offsets from %s: %s", 2, _Retriable("NotLeaderForPartition"))
        coordinator.error("Group Coordinator Request failed: %s", _Fatal("GroupIdNotFound"))
        coordinator.setLevel(logging.WARNING)
        coordinator.error("Group Coordinator Request failed: %s", _Retriable("GroupCoordinatorNotAvailable"))
    finally:
        for logger in (coordinator, fetcher):
            logger.removeHandler(handler)
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
    assert seen == [
        ("INFO", "Group Coordinator Request failed: GroupCoordinatorNotAvailable (transient: retried)"),
        ("INFO", "Failed fetch offsets from 1: NotLeaderForPartition (transient: retried)"),
        ("ERROR", "Group Coordinator Request failed: GroupIdNotFound"),
    ], "repeats summarised as ever; not shown where INFO is not"
