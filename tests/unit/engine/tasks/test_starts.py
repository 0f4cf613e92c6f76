"""Where a partition starts when its task is set up, and the jump when its committed offset is gone."""

from __future__ import annotations

from engine.events import TP
from engine.tasks.starts import Jump, start_at

WORDS0 = TP("words", 0)


def test_a_committed_offset_in_the_log_is_where_the_partition_goes_on():
    assert start_at(WORDS0, 500, 100, 900, latest=False) == (500, None)
    assert start_at(WORDS0, 900, 100, 900, latest=True) == (900, None), "at the end: nothing new yet"


def test_nothing_committed_follows_auto_offset_reset_without_a_jump():
    assert start_at(WORDS0, None, 100, 900, latest=False) == (100, None)
    assert start_at(WORDS0, None, 100, 900, latest=True) == (900, None)


def test_a_committed_offset_below_the_log_follows_auto_offset_reset_and_counts_what_it_skips():
    start, jump = start_at(WORDS0, 40, 100, 900, latest=False)
    assert (start, jump) == (100, Jump(WORDS0, 40, 100))
    assert jump is not None
    assert jump.skipped == 60, "deleted by retention before they were read"
    assert jump.describe() == "words[0] from 40 to 100 (60 records skipped)"
    start, jump = start_at(WORDS0, 40, 100, 900, latest=True)
    assert start == 900
    assert jump is not None
    assert jump.skipped == 860, "with latest, the records still in the log are skipped too"


def test_a_committed_offset_past_the_end_of_a_recreated_topic_starts_it_again():
    start, jump = start_at(WORDS0, 5000, 0, 30, latest=False)
    assert start == 0
    assert jump is not None
    assert jump.skipped == 0
