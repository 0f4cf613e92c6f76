"""Poison records (pure accounting) and the loop monitor that names what blocks the event loop."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from engine.errors import PoisonRecord
from engine.events import TP
from engine.monitors.loopwatch import LoopMonitor
from engine.tasks.poison import Cause, PoisonRecords

WORDS0 = TP("words", 0)
WORDS1 = TP("words", 1)


def test_a_record_reaches_its_verdict_after_the_limit_of_losses_of_its_partition():
    poison = PoisonRecords(limit=3)
    for round_ in range(1, 4):
        poison.suspect(WORDS0, 50, "count", 12.0)
        assert poison.lost({WORDS0, WORDS1}) == [(WORDS0, 50, round_)]
        if round_ < 3:
            assert poison.verdict(WORDS0, 50) is None
            assert poison.buried == set()
    assert poison.buried == {WORDS0}
    assert poison.verdict(WORDS0, 49) is None, "only that record"
    verdict = poison.verdict(WORDS0, 50)
    assert verdict is not None
    agent, error = verdict
    assert agent == "count"
    assert isinstance(error, PoisonRecord)
    assert str(error).startswith("words[0] was taken from this worker 3 times while agent 'count' processed "
                                 "offset 50, which blocked the event loop for 12.0s")
    assert poison.buried == set(), "dealt with once"
    assert poison.verdict(WORDS0, 50) is None


def test_a_loss_counts_only_the_records_suspected_since_the_last_loss_and_only_of_lost_partitions():
    poison = PoisonRecords(limit=2)
    poison.suspect(WORDS0, 7, "count", 3.0)
    assert poison.lost({WORDS1}) == [], "another partition's loss"
    assert poison.lost({WORDS0}) == [(WORDS0, 7, 1)]
    assert poison.lost({WORDS0}) == [], "a loss without a block during the record counts nothing"
    assert poison.verdict(WORDS0, 7) is None


def test_a_record_that_held_its_transaction_open_past_the_timeout_is_blamed_for_that():
    poison = PoisonRecords(limit=2)
    for round_ in (1, 2):
        poison.suspect(WORDS1, 40, "count", 4.5, Cause.OPEN_TRANSACTION)
        assert poison.lost({WORDS1}) == [(WORDS1, 40, round_)]
    verdict = poison.verdict(WORDS1, 40)
    assert verdict is not None
    assert str(verdict[1]) == (
        "words[1] lost its task's transaction 2 times while agent 'count' processed offset 40, which kept "
        "the transaction open for 4.5s, past the transaction timeout (the broker aborts a transaction open "
        "that long; an event must finish well within `transaction_timeout`); the record is set aside so "
        "that its partition moves on")


def test_a_suspect_whose_offset_was_committed_since_counts_no_loss():
    poison = PoisonRecords(limit=1)
    poison.suspect(WORDS0, 7, "count", 4.0, Cause.OPEN_TRANSACTION)
    poison.suspect(WORDS0, 9, "count", 4.0, Cause.OPEN_TRANSACTION)
    poison.committed(WORDS1, 100)
    poison.committed(WORDS0, 8)  # 7 was processed and committed: it never comes back
    assert poison.lost({WORDS0}) == [(WORDS0, 9, 1)]
    assert poison.buried == {WORDS0}


async def test_the_loop_monitor_names_the_event_and_the_blocking_stack_from_its_thread(caplog):
    class Event:
        topic, partition, offset = "words", 0, 50

    blocked: list[tuple[str, int, float]] = []
    def seen(agent: str, event: Event, seconds: float) -> None:
        blocked.append((agent, event.offset, seconds))

    monitor = LoopMonitor(lambda: [("count", Event())], 0.3, blocked=seen)  # type: ignore[arg-type]
    await monitor.start()
    try:
        with caplog.at_level(logging.WARNING, logger="engine.monitors.loopwatch"):
            time.sleep(1.0)  # the agent's blocking call  # noqa: ASYNC251
            for _ in range(100):  # the report reaches the loop once it runs again
                if blocked:
                    break
                await asyncio.sleep(0.01)
    finally:
        await monitor.stop()
    assert blocked
    assert blocked[0][:2] == ("count", 50)
    assert blocked[0][2] >= 0.3
    report = caplog.records[0].getMessage()
    assert report.startswith("the event loop has been blocked for")
    assert "agent count at words[0]@50" in report
    assert "time.sleep(1.0)" in report, "the line the loop's thread is blocked in"


async def test_the_loop_monitor_says_nothing_while_the_loop_turns(caplog):
    # The threshold leaves room for a busy machine (the whole suite beside a broker on 2 cores) to hold the
    # process back now and then: only a loop that stopped turning counts.
    monitor = LoopMonitor(lambda: [], 1.5, blocked=lambda *_: pytest.fail("not blocked"))
    await monitor.start()
    with caplog.at_level(logging.WARNING, logger="engine.monitors.loopwatch"):
        for _ in range(40):
            await asyncio.sleep(0.05)
    await monitor.stop()
    assert caplog.records == []
