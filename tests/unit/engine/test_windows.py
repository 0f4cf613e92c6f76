"""Window maths, by hand, without an event loop."""

from datetime import timedelta

import pytest

from engine import ConfigError
from engine.windows import HoppingWindow, TumblingWindow, WindowRange


def test_tumbling_ranges_are_half_open():
    window = TumblingWindow(10)
    assert window.ranges(25) == [WindowRange(20, 30)]
    assert window.ranges(20) == [WindowRange(20, 30)]
    assert window.ranges(29.999) == [WindowRange(20, 30)]
    assert window.ranges(30) == [WindowRange(30, 40)]
    assert window.ranges(0) == [WindowRange(0, 10)]


def test_hopping_ranges_list_every_window_containing_the_time():
    window = HoppingWindow(10, 5)
    assert window.ranges(12) == [WindowRange(5, 15), WindowRange(10, 20)]
    assert window.ranges(10) == [WindowRange(5, 15), WindowRange(10, 20)]
    assert window.ranges(4.5) == [WindowRange(0, 10)]  # none starts before the epoch, as in Kafka Streams
    assert HoppingWindow(600, 60).ranges(3600) == [WindowRange(s, s + 600) for s in range(3060, 3601, 60)]
    assert len(HoppingWindow(600, 60).ranges(3601)) == 10


def test_hopping_with_a_step_that_does_not_divide_the_size():
    window = HoppingWindow(10, 4)
    assert window.ranges(9) == [WindowRange(0, 10), WindowRange(4, 14), WindowRange(8, 18)]
    assert window.ranges(12) == [WindowRange(4, 14), WindowRange(8, 18), WindowRange(12, 22)]


def test_current_is_the_newest_window_and_fractions_are_exact():
    assert HoppingWindow(10, 5).current(12) == WindowRange(10, 20)
    window = TumblingWindow(0.1)
    assert window.ranges(0.3) == [WindowRange(0.3, 0.4)]  # 0.1 + 0.2 does not move it
    assert TumblingWindow(timedelta(minutes=1)).ranges(61) == [WindowRange(60, 120)]


@pytest.mark.parametrize("window", [TumblingWindow(10, grace=3), HoppingWindow(10, 4, grace=2),
                                    HoppingWindow(7, 3)])
def test_open_starts_are_the_windows_of_a_time_not_yet_closed(window):
    """The update's one call per event against its definition: every start containing the time (counted
    here from the size and step), less those closed at stream time (end plus grace reached)."""
    size, step, grace = window.size_ms, window.step_ms, window.grace_ms
    for ts in [*range(0, 40_000, 997), 9_999, 10_000, 10_001]:
        containing = [s for s in range(0, ts + 1, step) if s <= ts < s + size]
        assert window.starts_ms(ts) == containing
        for stream_time in (ts, ts + 1_500, ts + 4_000, ts + 12_000):
            expected = [s for s in containing if stream_time < s + size + grace]
            assert window.open_starts_ms(ts, stream_time) == expected


def test_closed_after_end_plus_grace_and_expired_after_end_plus_expires():
    window = TumblingWindow(10, grace=3, expires=20)
    start = 20_000
    assert not window.closed(start, 32_999)
    assert window.closed(start, 33_000)
    assert not window.expired(start, 49_999)
    assert window.expired(start, 50_000)
    assert TumblingWindow(10).expires_ms == 10_000  # defaults to the size


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TumblingWindow(0), "size must be positive"),
        (lambda: HoppingWindow(10, 20), "step must be positive and at most the size"),
        (lambda: TumblingWindow(10, grace=-1), "grace must not be negative"),
        (lambda: TumblingWindow(10, grace=30, expires=5), "expires must be at least its grace"),
        (lambda: TumblingWindow("10"), "size must be seconds or a timedelta"),
    ],
)
def test_bad_windows_say_what_is_wrong(make, message):
    with pytest.raises(ConfigError, match=message):
        make()
