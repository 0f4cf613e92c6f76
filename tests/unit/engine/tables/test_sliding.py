"""Sliding windows (a pipeline's `.sliding(size, grace=)`): windows where the events are, hand-computed for a
small input, and for a seeded out-of-order stream the windows defined from each key's event times; late
events, final results, early events, and a restart. Every expectation is computed here from the input."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import engine
from engine import testing
from engine.testing import TestDriver
from engine.windows import WindowRange


def sliding_app(size: float = 10, grace: float = 100, partitions: int = 1) -> tuple[engine.App, Any, Any]:
    app = engine.App("sliding", broker="memory://unused", topic_partitions=partitions)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    recent = app.stream(clicks).sliding(size, grace=grace).count("recent")
    finals = app.topic("finals", key_type=str, value_type=list)

    @app.agent(recent.closed())
    async def report(stream: Any) -> None:
        async for (user, window), n in stream.items():
            await finals.send(key=user, value=[round(window.start * 1000), round(window.end * 1000), n])

    return app, clicks, finals


def send(driver: TestDriver, clicks: Any, user: str, *times: float) -> None:
    for at in times:
        driver.send(clicks, key=user, value={"at": at})


def w(start: float, end: float) -> WindowRange:
    return WindowRange(start, end)


def test_windows_exist_where_the_events_are_also_out_of_order() -> None:
    app, clicks, _ = sliding_app(size=10)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 20, 25, 40)
        # each event's own window [t - 10, t]; after 20, the window [20.001, 30.001] holds 25; none after 25
        # (40 is more than 10 s later) or after 40
        assert driver.table("recent") == {("a", w(10, 20)): 1, ("a", w(15, 25)): 2,
                                          ("a", w(20.001, 30.001)): 1, ("a", w(30, 40)): 1}
        send(driver, clicks, "a", 33)  # out of order: its own window, and the windows after 25 and after 33
        assert driver.table("recent") == {
            ("a", w(10, 20)): 1, ("a", w(15, 25)): 2, ("a", w(20.001, 30.001)): 1, ("a", w(30, 40)): 2,
            ("a", w(23, 33)): 2, ("a", w(25.001, 35.001)): 1, ("a", w(33.001, 43.001)): 1}


def test_late_events_and_final_windows() -> None:
    """size 10 s, grace 5 s: a window is final once stream time reaches its end + 5 s; an event is late when
    the window after it would end before stream time - 5 s."""
    app, clicks, finals = sliding_app(size=10, grace=5)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 100, 104)
        assert driver.read(finals) == []
        # closes a's [90, 100] (at 105), [94, 104] (at 109) and [100.001, 110.001] (at 115.001)
        send(driver, clicks, "b", 119)
        assert sorted((r.key, *r.value) for r in driver.read(finals)) == [
            ("a", 90_000, 100_000, 1), ("a", 94_000, 104_000, 2), ("a", 100_001, 110_001, 1)]
        # 105 + 10 >= 119 - 5: not late. Its own window [95, 105] is closed, so it is not made; the window
        # after 104 is made (it ends at 114.001), and none after 105 (no later event of a).
        send(driver, clicks, "a", 105)
        assert driver.read(finals) == []
        assert driver.table("recent") == {  # a's older windows are kept for 2 * 10 + 5 s of window starts
            ("a", w(90, 100)): 1, ("a", w(94, 104)): 2, ("a", w(100.001, 110.001)): 1,
            ("a", w(104.001, 114.001)): 1, ("b", w(109, 119)): 1}
        send(driver, clicks, "a", 99)  # 99 + 10 < 114: late
        send(driver, clicks, "c", 200)
        assert sorted((r.key, *r.value) for r in driver.read(finals)) == [
            ("a", 104_001, 114_001, 1), ("b", 109_000, 119_000, 1)]


def test_an_event_at_a_windows_end_is_its_newest_event() -> None:
    """The window after 20 ends at 30.001: the event at 30.001 is added to it and is its newest, so that
    window's final record has its time (Kafka Streams' rule: a final record's time is its window's newest
    event time)."""
    app, clicks, _ = sliding_app(size=10, grace=0)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 20, 25, 30.001)
        send(driver, clicks, "b", 100)  # closes every window of a
        finals = {(r.key[0], r.key[1]): (r.value, r.timestamp_ms)
                  for r in driver.read("sliding-recent-closed") if r.key[0] == "a"}
    assert finals == {("a", w(10, 20)): (1, 20_000), ("a", w(15, 25)): (2, 25_000),
                      ("a", w(20.001, 30.001)): (2, 30_001), ("a", w(25.001, 35.001)): (1, 30_001)}


def test_events_earlier_than_the_size_after_the_epoch_share_the_window_from_zero() -> None:
    app, clicks, _ = sliding_app(size=10)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 3, 7, 15)
        # Kafka Streams' early records: 3 and 7 both go into [0, 10]; after 3, [3.001, 13.001] holds 7; after
        # 7, [7.001, 17.001] holds 15; 15's own window [5, 15] holds 7 and 15
        assert driver.table("recent") == {("a", w(0, 10)): 2, ("a", w(3.001, 13.001)): 1,
                                          ("a", w(7.001, 17.001)): 1, ("a", w(5, 15)): 2}


def offline_windows(times: list[int], size: int) -> Counter[tuple[int, int]]:
    """Every sliding window of one key's event times (ms), by definition: each time's own window, and the
    one right after it if a later time falls in it; each with the number of times in it (ends included)."""
    windows: set[tuple[int, int]] = set()
    for at in times:
        windows.add((at - size, at))
        if any(at < other <= at + size for other in times):
            windows.add((at + 1, at + 1 + size))
    return Counter({(start, end): sum(start <= at <= end for at in times) for start, end in windows})


def test_a_seeded_out_of_order_stream_gives_the_windows_of_each_keys_times() -> None:
    """Times in ms, out of order by less than the grace (none late): every final window must be one the
    definition gives, with its count. Several partitions, each with its own stream time."""
    rng = random.Random(5)
    size_ms, grace_ms = 4_000, 15_000
    app, clicks, finals = sliding_app(size=size_ms / 1000, grace=grace_ms / 1000, partitions=3)
    events = []
    for user in [f"u{i}" for i in range(10)]:
        at = rng.randrange(20_000, 30_000)
        for _ in range(rng.randrange(5, 30)):
            at += rng.choice([rng.randrange(0, 1_500), rng.randrange(1_000, 6_000)])
            events.append((at, user))
    events.sort()
    arrival = sorted(events, key=lambda e: e[0] + rng.randrange(0, 10_000))  # out of order by < grace
    times: dict[str, list[int]] = defaultdict(list)
    with TestDriver(app) as driver:
        for at, user in arrival:
            times[user].append(at)
            driver.send(clicks, key=user, value={"at": at / 1000})
        end = max(at for at, _ in events) + size_ms + grace_ms + 1
        for partition in range(3):
            driver.send(clicks, key="zz", value={"at": end / 1000}, partition=partition)
        got = Counter((r.key, *r.value) for r in driver.read(finals))
        stamps = {(r.key[0], round(r.key[1].start * 1000)): r.timestamp_ms
                  for r in driver.read("sliding-recent-closed")}
    expected = Counter((user, start, end, n) for user, ts in times.items()
                       for (start, end), n in offline_windows(ts, size_ms).items())
    assert got == expected
    # each final record's time is the newest event time in its window (Kafka Streams' rule)
    assert stamps == {(user, start): max(at for at in ts if start <= at <= end) for user, ts in times.items()
                      for start, end in offline_windows(ts, size_ms)}


async def test_windows_and_their_newest_times_are_read_back_after_a_restart() -> None:
    """The second worker rebuilds the windows and their newest event times from the changelog: the out-of-
    order event after the restart makes the same windows as without one (the first test's)."""
    url = testing.memory_url()
    for times in ([20, 25, 40], [33]):
        app = engine.App("sliding-restart", broker=url, store="memory://", topic_partitions=1,
                         commit_interval=0.05)
        clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
        recent = app.stream(clicks).sliding(10, grace=100).count("recent")
        async with testing.running(app):
            await testing.eventually(lambda recent=recent: 0 in recent.table.active)  # recovered
            for at in times:
                await clicks.send(key="a", value={"at": at})
            expected = ([(w(10, 20), 1), (w(15, 25), 2), (w(20.001, 30.001), 1), (w(30, 40), 1)]
                        if times[0] == 20 else
                        [(w(10, 20), 1), (w(15, 25), 2), (w(20.001, 30.001), 1), (w(23, 33), 2),
                         (w(25.001, 35.001), 1), (w(30, 40), 2), (w(33.001, 43.001), 1)])
            await testing.eventually(lambda recent=recent, expected=expected:
                                     list(recent.windows("a")) == expected)


class _Record:
    """A fetched record as a sliding table reads it: only its place (the event's time is given)."""

    def __init__(self, offset: int) -> None:
        self.offset, self.timestamp, self.key, self.value, self.headers = offset, 0, None, None, []


def test_a_checkpoint_that_failed_and_the_next_one_leave_the_windows_of_every_event(tmp_path: Any) -> None:
    """Sliding windows keep their changes in memory until the buffer is read: a checkpoint takes them,
    events go on while it is written, it fails and puts them back, windows expire meanwhile, and the next
    checkpoint writes the store. A partition taken on from that store then has exactly the live windows of
    every event's time (the definition), each with its newest event time, and no engine record of a window
    that is gone."""
    from engine.events import TP, Event
    from engine.stores import open_store_backend
    from engine.tables.partition import DELETED, TablePartition
    from engine.tables.sliding import MAX_TIME_PREFIX, SlidingTable

    app = engine.App("sliding", broker="memory://unused", topic_partitions=1)
    clicks = app.topic("clicks", key_type=str, value_type=int)
    recent = app.stream(clicks).sliding(10, grace=0).count("recent")
    table, windowed = recent.table, recent.table.windowed
    assert isinstance(windowed, SlidingTable)
    table.bind(None, 1, {"clicks": 1})
    store = open_store_backend("memory://", tmp_path).open("recent", 0)
    part = TablePartition(0, store, table.value_codec)
    offsets = iter(range(1000))

    def events(*times_s: float) -> None:
        for at in times_s:
            event = Event(TP("clicks", 0), _Record(next(offsets)), "a", 1, None)
            event.time_ms = round(at * 1000)
            windowed.apply(part, event, "a", 1)

    def take() -> tuple[dict[Any, Any], dict[bytes, bytes | None]]:
        """What ActiveTask.take takes of the partition for a checkpoint."""
        windowed.close_windows(part)
        windowed.expire(part)
        part.writes()
        return part.take_buffer(), part.take_meta()

    def complete(writes: dict[Any, Any], meta: dict[bytes, bytes | None]) -> None:
        encoded: dict[bytes, bytes | None] = {
            table.locate(key)[0]: None if value is DELETED else table.value_codec.encode(value)
            for key, value in writes.items()}
        store.write({**encoded, **meta}, next(offsets))
        windowed.stored(part, writes)
        part.flushed()

    events(20, 25, 28)
    complete(*take())  # the store has a's first windows
    events(33)
    writes, meta = take()
    events(60, 61)  # while the checkpoint is written: the windows of 20..33 expire
    part.put_back(writes, meta, [], [])  # it failed
    events(62.5)
    complete(*take())

    times = [20_000, 25_000, 28_000, 33_000, 60_000, 61_000, 62_500]
    horizon = 62_500 + 1 - 20_000  # the newest window start written, less the retention (2 * size + grace)
    expected = {(start, end): (n, max(at for at in times if start <= at <= end))
                for (start, end), n in offline_windows(times, 10_000).items() if start > horizon}
    later = TablePartition(0, store, table.value_codec)
    state = windowed._state(later)
    got = {(start, end): (value, windowed._bound(state, "a", start)) for start, end, value
           in windowed.windows_ms("a", standby=store)}
    assert got == expected
    newest_records = [raw for raw, _ in store.items(MAX_TIME_PREFIX, MAX_TIME_PREFIX + b"\xff")]
    assert len(newest_records) == len(expected)


def test_an_aggregate_that_changes_its_value_in_place_keeps_each_windows_own() -> None:
    """`aggregate` with a function that appends to its list in place (a common idiom): a window made from
    another's aggregate (the event's own window from the one before it, the window after an out-of-order
    event from the one holding it) must get a value of its own, as Kafka Streams' serialized windows do, or
    later events added to one appear in both. Ground truth: each window holds the values of the events in
    it (no event late)."""
    rng = random.Random(11)
    size_ms = 4_000
    app = engine.App("sliding-in-place", broker="memory://unused", topic_partitions=1)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    app.stream(clicks).sliding(size_ms / 1000, grace=60).aggregate(
        "seen", [], lambda seen, click: seen.append(click["n"]) or seen)
    events = []
    at = 10_000
    for n in range(40):  # (over less than the retention, 2 * size + grace: no window expires)
        at += rng.randrange(0, 1_500)
        events.append((at + rng.choice([0, 0, -rng.randrange(0, 3_000)]), n))  # some out of order
    with TestDriver(app) as driver:
        for at, n in events:
            driver.send(clicks, key="a", value={"at": at / 1000, "n": n})
        got = {(round(window.start * 1000), round(window.end * 1000)): sorted(values)
               for (_, window), values in driver.table("seen").items()}
    times = [at for at, _ in events]
    expected = {(start, end): sorted(n for at, n in events if start <= at <= end)
                for start, end in offline_windows(times, size_ms)}
    assert got == expected
