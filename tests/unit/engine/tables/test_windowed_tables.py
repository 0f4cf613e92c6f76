"""Windowed tables on the in-memory broker, with event times chosen by hand (a `ts` field of the value)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import engine
from engine import testing
from engine.tables.keys import META_PREFIX
from engine.testing import TestDriver
from engine.windows import WindowRange


def windowed_app(make_window, url: str, **settings):
    app = engine.App("w", broker=url, commit_interval=0.05, **settings)
    views = app.topic("views", key_type=str, value_type=dict, timestamp=lambda v: v["ts"])
    table = make_window(app.Table("views", default=int, key_type=str, value_type=int))
    seen: list = []

    @app.agent(views)
    async def count(stream):
        async for page, view in stream.items():
            table[page] += 1
            seen.append((view["ts"], table[page].current(), table[page].delta(10)))

    return app, views, table, seen


async def feed(topic, key: str, times: list[float]) -> None:
    for ts in times:
        await topic.send(key=key, value={"ts": ts})


async def test_tumbling_with_out_of_order_and_late_events(caplog):
    url = testing.memory_url()
    app, views, table, seen = windowed_app(
        lambda t: t.tumbling(10, grace=5, expires=60), url, store="memory://")
    async with testing.running(app):
        # 3 is out of order but within grace (stream time 12 < 10 + 5); 4 and 18 come after stream
        # time 25 closed [0, 10) (at 15) and [10, 20) (at 25): late, not applied.
        await feed(views, "a", [1, 12, 3, 25, 4, 18, 26])
        await testing.eventually(lambda: len(seen) == 7)
        assert table["a"].items() == [
            (WindowRange(0, 10), 2), (WindowRange(10, 20), 1), (WindowRange(20, 30), 2)]
        assert table.late_events == 2
    # Said once (the second late event falls in the same 10 s of reports), with the grace that would have
    # kept it: 4 s at stream time 25 s, its window [0, 10) ended at 10 s.
    warnings = [r.getMessage() for r in caplog.records if "late event" in r.getMessage()]
    assert len(warnings) == 1
    assert "1 late event(s) since the last report" in warnings[0]
    assert "left out of its windows, dropped:" in warnings[0]
    assert "a grace of 15.001 s would have kept them (it is 5.000 s)" in warnings[0]
    assert [current for _, current, _ in seen] == [1, 1, 2, 1, 2, 1, 2]
    assert [delta for _, _, delta in seen] == [0, 1, 0, 1, 0, 2, 1]  # at 18: [0, 10) held 2


async def test_hopping_updates_only_the_open_windows_of_a_late_event():
    url = testing.memory_url()
    app, views, table, seen = windowed_app(lambda t: t.hopping(10, 5), url, store="memory://")
    async with testing.running(app):
        # 9 arrives at stream time 12: [0, 10) closed at 10, [5, 15) still open.
        await feed(views, "p", [7, 12, 9])
        await testing.eventually(lambda: len(seen) == 3)
        assert table["p"].items() == [
            (WindowRange(0, 10), 1), (WindowRange(5, 15), 3), (WindowRange(10, 20), 1)]
        assert table.late_events == 0


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_expired_windows_are_tombstoned_if_stored_and_never_sent_if_not(store, tmp_path):
    """Tumbling 10 s windows expiring 10 s after they end: [s, s+10) expires at stream time s+20."""
    url = testing.memory_url()
    app, views, table, seen = windowed_app(
        lambda t: t.tumbling(10, expires=10), url, store=store, data_dir=str(tmp_path))
    async with testing.running(app, commit_interval=3600) as worker:  # checkpoints only when told here
        await feed(views, "k", [1, 15])
        await testing.eventually(lambda: len(seen) == 2)
        await worker.checkpoint()  # [0,10) and [10,20) are stored
        # 35 expires both; 52 opens [50,60) and expires [30,40), which opened at 35 and was never stored
        await feed(views, "k", [35, 52])
        await testing.eventually(lambda: len(seen) == 4)
        await worker.checkpoint()
        assert table["k"].items() == [(WindowRange(50, 60), 1)]
        stored = [key for p in app.tables["views"].active.values() for key, _ in p.store.items()
                  if not key.startswith(META_PREFIX)]
    records = [r for p in testing.broker_for(url).topics["w-views-changelog"] for r in p]
    codec = app.tables["views"].changelog_topic.key_codec
    windows = [(codec.decode(r.key)[1], r.value) for r in records if not r.key.startswith(META_PREFIX)]
    assert sorted(windows[:2]) == [(WindowRange(0, 10), b"1"), (WindowRange(10, 20), b"1")]  # checkpoint 1
    assert sorted(windows[2:], key=repr) == [  # checkpoint 2: nothing of [30,40)
        (WindowRange(0, 10), None), (WindowRange(10, 20), None), (WindowRange(50, 60), b"1")]
    assert [codec.decode(key)[1] for key in stored] == [WindowRange(50, 60)]


async def test_changelog_readers_get_key_and_window_and_late_records_go_to_the_late_topic(caplog):
    url = testing.memory_url()
    app = engine.App("wl", broker=url, commit_interval=0.05, store="memory://")
    views = app.topic("views", key_type=str, value_type=dict, timestamp=lambda v: v["ts"])
    table = app.Table("views", default=int, key_type=str, value_type=int).tumbling(
        10, late_topic=True)
    updates: list = []

    @app.agent(views)
    async def count(stream):
        async for page, _ in stream.items():
            table[page] += 1

    @app.agent(table.changes())
    async def watch(stream):
        async for key, value in stream.items():
            updates.append((key, value))

    async with testing.running(app):
        await feed(views, "x", [5, 11, 2])  # 2 is late: [0, 10) closed at stream time 11
        await testing.eventually(lambda: ("x", WindowRange(10, 20)) in {k for k, _ in updates})
        await testing.eventually(lambda: bool(testing.broker_for(url).topics.get("wl-views-late")))
        await testing.eventually(
            lambda: sum(len(p) for p in testing.broker_for(url).topics["wl-views-late"]) == 1)
    assert (("x", WindowRange(0, 10)), 1) in updates
    assert all(key is not None for key, _ in updates), "engine's own records (stream time) are no events"
    late = [r for p in testing.broker_for(url).topics["wl-views-late"] for r in p]
    assert late[0].value == b'{"ts":2}'
    source = next(r for p in testing.broker_for(url).topics["views"] for r in p if r.value == late[0].value)
    assert late[0].timestamp == source.timestamp  # the late record keeps its own time
    [said] = [r.getMessage() for r in caplog.records if "late event(s)" in r.getMessage()]
    assert "left out of its windows, sent to wl-views-late as read (raw bytes)" in said
    assert "dropped" not in said


async def test_stream_time_survives_a_restart(tmp_path):
    url = testing.memory_url()
    app, views, _, seen = windowed_app(lambda t: t.tumbling(10), url, data_dir=str(tmp_path))
    async with testing.running(app):
        await feed(views, "a", [1, 25])
        await testing.eventually(lambda: len(seen) == 2)
    app2, views2, table2, seen2 = windowed_app(lambda t: t.tumbling(10), url, data_dir=str(tmp_path))
    async with testing.running(app2):
        await feed(views2, "a", [3, 26])  # 3 is late after the restart too: stream time was 25
        await testing.eventually(lambda: len(seen2) == 2)
        assert table2.late_events == 1
        # [0, 10) expired at stream time 20 (expires defaults to the size): only [20, 30) is left.
        assert table2["a"].items() == [(WindowRange(20, 30), 2)]


def test_windowing_a_table_twice_or_a_source_table_is_refused():
    app = engine.App("x", broker="memory://")
    table = app.Table("t", default=int)
    table.tumbling(10)
    with pytest.raises(engine.ConfigError, match="already windowed"):
        table.hopping(10, 5)
    source = app.Table("s", source_topic="somewhere")
    with pytest.raises(engine.ConfigError, match="reads a source topic"):
        source.tumbling(10)


def closing_app(make_window, url: str, **settings):
    """One partition, so one stream time: the closes below are computed by hand from the event times."""
    app, views, table, _ = windowed_app(make_window, url, topic_partitions=1, **settings)
    closed: list = []

    @app.agent(table.closed())
    async def final(stream):
        async for (page, window), value in stream.items():
            closed.append((page, window, value))

    return app, views, table, closed


async def test_closed_windows_are_emitted_once_with_their_final_values():
    url = testing.memory_url()
    app, views, table, closed = closing_app(lambda t: t.tumbling(10, grace=5), url, store="memory://")
    async with testing.running(app):
        for page, ts in [("a", 1), ("b", 3), ("a", 12), ("a", 9), ("b", 16)]:
            await views.send(key=page, value={"ts": ts})
        # stream time 16 >= 10 + 5: [0, 10) closes, with a's out-of-order 9 counted.
        await testing.eventually(lambda: len(closed) == 2)
        assert closed == [("a", WindowRange(0, 10), 2), ("b", WindowRange(0, 10), 1)]
        for page, ts in [("a", 27), ("a", 4)]:  # 27 closes [10, 20); 4 is late: not applied
            await views.send(key=page, value={"ts": ts})
        await testing.eventually(lambda: len(closed) == 4)
        await asyncio.sleep(0.3)  # several more checkpoints: nothing is emitted twice
    assert closed[2:] == [("a", WindowRange(10, 20), 1), ("b", WindowRange(10, 20), 1)]
    assert table.late_events == 1


async def test_hopping_windows_close_in_order_of_their_end():
    url = testing.memory_url()
    app, views, _, closed = closing_app(lambda t: t.hopping(10, 5), url, store="memory://")
    async with testing.running(app):
        for ts in [7, 12, 9, 30]:
            await views.send(key="p", value={"ts": ts})
        await testing.eventually(lambda: len(closed) == 3)
        await asyncio.sleep(0.2)
    assert closed == [
        ("p", WindowRange(0, 10), 1), ("p", WindowRange(5, 15), 3), ("p", WindowRange(10, 20), 1)]


async def test_closes_are_neither_repeated_nor_lost_across_a_restart(tmp_path):
    url = testing.memory_url()
    app, views, _, closed = closing_app(lambda t: t.tumbling(10), url, store="rocksdb://",
                                        data_dir=tmp_path)
    async with testing.running(app):
        for ts in [1, 5, 11]:
            await views.send(key="k", value={"ts": ts})
        await testing.eventually(lambda: len(closed) == 1)
    app, views, _, closed_again = closing_app(lambda t: t.tumbling(10), url, store="memory://")
    async with testing.running(app):  # memory stores: rebuilt from the changelog, closed-upto included
        for ts in [12, 25]:
            await views.send(key="k", value={"ts": ts})
        await testing.eventually(lambda: len(closed_again) == 1)
        await asyncio.sleep(0.3)
    assert closed == [("k", WindowRange(0, 10), 2)]
    assert closed_again == [("k", WindowRange(10, 20), 2)]


async def test_an_event_without_a_valid_time_goes_to_the_dlq_naming_it():
    """A negative event time (a record written without a timestamp) fits no window: an error with the
    record's coordinates, under the agent's error policy, as Kafka Streams fails on it by default."""
    url = testing.memory_url()
    app, views, _table, seen = windowed_app(lambda t: t.tumbling(10), url, store="memory://")
    async with testing.running(app):
        await feed(views, "a", [-5, 3])
        await testing.eventually(lambda: len(seen) == 1)
        dlq = testing.broker_for(url).topics
        await testing.eventually(lambda: sum(len(p) for p in dlq.get("w-count-dlq", [])) == 1)
    record = next(r for p in dlq["w-count-dlq"] for r in p)
    error = dict(record.headers)["engine-error"].decode()
    assert error.startswith("InvalidTimestamp: windowed table 'views': views[")
    assert "has no valid event time (-5000 ms)" in error
    assert seen[0][0] == 3


async def test_stream_time_moves_on_events_the_agent_filters_out():
    """Kafka Streams advances stream time on every record of the task: a heartbeat the agent skips still
    closes the windows of a quiet key (here one partition, so every record is in the same task)."""
    url = testing.memory_url()
    app = engine.App("wf", broker=url, commit_interval=0.05, topic_partitions=1, store="memory://")
    views = app.topic("views", key_type=str, value_type=dict, timestamp=lambda v: v["ts"])
    table = app.Table("views", default=int, key_type=str, value_type=int).tumbling(10, grace=5)
    closed: list = []

    @app.agent(views)
    async def count(stream):
        async for page, _ in stream.filter(lambda v: not v.get("heartbeat")).items():
            table[page] += 1

    @app.agent(table.closed())
    async def finals(stream):
        async for (page, window), value in stream.items():
            closed.append((page, window, value))

    async with testing.running(app):
        for ts in (1, 4, 8):
            await views.send(key="a", value={"ts": ts})
        await asyncio.sleep(0.2)
        assert closed == [], "stream time 8: [0, 10) is open until 15"
        await views.send(key="beat", value={"ts": 40, "heartbeat": True})  # never written to the table
        await testing.eventually(lambda: closed == [("a", WindowRange(0, 10), 3)])
        await views.send(key="a", value={"ts": 12})  # stream time is 40: late, though no write said so
        await asyncio.sleep(0.2)
    assert table.late_events == 1


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_windows_counted_across_checkpoints_read_back_what_was_stored(store, tmp_path):
    """Updates of one window on both sides of checkpoints: the second reads what the first flushed to the
    store (a window only the live index knows is stored), a new window starts from the default; every
    window's count equals one computed here."""
    url = testing.memory_url()
    app, views, table, seen = windowed_app(
        lambda t: t.hopping(10, 5, expires=1000), url, store=store, data_dir=str(tmp_path))
    events = [(key, ts) for ts in range(0, 40, 3) for key in ("a", "b", "c")[: 1 + ts % 3]]
    expected: dict[str, dict[WindowRange, int]] = {}
    for key, ts in events:
        for start in (s for s in range(0, ts + 1, 5) if s <= ts < s + 10):
            window = WindowRange(start, start + 10)
            expected.setdefault(key, {})[window] = expected.setdefault(key, {}).get(window, 0) + 1
    async with testing.running(app):
        for i, (key, ts) in enumerate(events):
            await views.send(key=key, value={"ts": ts})
            if i % 4 == 3:
                await testing.eventually(lambda n=i + 1: len(seen) == n)
                await asyncio.sleep(0.12)  # past the 50 ms commit interval: the windows so far are stored
        await testing.eventually(lambda: len(seen) == len(events))
        for key, windows in expected.items():
            assert dict(table[key].items()) == windows


async def test_close_idle_after_moves_a_quiet_partitions_time_by_the_wall_clock():
    url = testing.memory_url()
    app, views, table, closed = closing_app(
        lambda t: t.tumbling(10, grace=2, close_idle_after=5), url, store="memory://")
    quiet = app.Table("quiet", default=int, key_type=str, value_type=int).tumbling(10, grace=2)
    never: list = []

    @app.agent(views)
    async def also(stream):
        async for page, _ in stream.items():
            quiet[page] += 1

    @app.agent(quiet.closed())
    async def quiet_finals(stream):
        async for item in stream.items():
            never.append(item)

    now = [1000.0]
    table.clock = quiet.clock = lambda: now[0]
    async with testing.running(app) as worker:
        for ts in (1, 3):
            await views.send(key="a", value={"ts": ts})
        await testing.eventually(
            lambda: dict(table.table.items()) == {("a", 0): 2} == dict(quiet.table.items()))
        await worker.checkpoint()  # stream time 3 s, moved by events at wall time 1000
        now[0] += 4.9
        await worker.checkpoint()
        assert table.table.active[0].windows.stream_time == 3000, "idle 4.9 s < 5 s: time stays"
        now[0] += 1.1  # idle 6 s: stream time 3 s + 6 s = 9 s, [0, 10) still open (closes at 12 s)
        await worker.checkpoint()
        assert table.table.active[0].windows.stream_time == 9000
        assert closed == []
        now[0] += 3  # idle on: 12 s, the window closes
        await worker.checkpoint()
        await testing.eventually(lambda: closed == [("a", WindowRange(0, 10), 2)])
        await views.send(key="a", value={"ts": 4})  # late now: the documented departure
        await testing.eventually(lambda: table.late_events == 1)
        await worker.checkpoint()
        assert never == [], "without close_idle_after a quiet partition's windows stay open"
        assert quiet.table.active[0].windows.stream_time == 4000, "moved by events only (4 s, the last)"


async def test_a_worker_that_takes_a_quiet_partition_over_closes_its_windows_by_the_wall_clock(monkeypatch):
    """A worker started after the input went quiet restores the partition's stream time from its changelog
    (slowly, as from a broker: past several commit intervals); no record comes, yet its windows close once
    the partition has been idle for close_idle_after (the commit loop, asleep while nothing happens, wakes
    when the tasks are set up)."""
    from engine.tables.manager import TableManager

    restore = TableManager.restore

    async def slow_restore(self: TableManager, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0.3)  # (six commit intervals)
        await restore(self, *args, **kwargs)

    monkeypatch.setattr(TableManager, "restore", slow_restore)
    url = testing.memory_url()
    app, views, table, closed = closing_app(
        lambda t: t.tumbling(10, grace=0, close_idle_after=1), url, store="memory://")
    async with testing.running(app) as worker:
        for ts in (1, 9.9):
            await views.send(key="a", value={"ts": ts})
        await testing.eventually(lambda: dict(table.table.items()) == {("a", 0): 2})
        await worker.checkpoint()  # stream time 9.9 s on the changelog
    assert closed == [], "stopped before the partition was idle for 1 s"
    async with testing.running(app):  # the next owner, with no input
        await testing.eventually(lambda: closed == [("a", WindowRange(0, 10), 2)], 10)


async def test_the_next_owner_goes_on_with_the_idle_clock_where_the_last_checkpoint_left_it():
    """While a partition waits for the clock to close its next window no checkpoint records its stream time
    (the commit loop sleeps until then), so the record says from when the wall clock moves it: a worker
    taking the partition over (here after a stop; the same after a crash) counts the idle time from there,
    not from when it took the partition."""
    url = testing.memory_url()
    app, views, table, _ = closing_app(lambda t: t.tumbling(10, grace=2, close_idle_after=5), url,
                                       store="memory://")
    now = [1000.0]
    table.clock = lambda: now[0]
    async with testing.running(app) as worker:
        for ts in (1, 3):
            await views.send(key="a", value={"ts": ts})
        await testing.eventually(lambda: dict(table.table.items()) == {("a", 0): 2})
        await worker.checkpoint()  # stream time 3 s, moved by events at wall time 1000
        now[0] += 3  # idle 3 s < 5 s: nothing to record
        await worker.checkpoint()
    async with testing.running(app) as worker:  # the next owner, at wall time 1003
        await testing.eventually(lambda: bool(table.table.active), 10)
        await worker.checkpoint()
        now[0] += 3  # idle 6 s since 1000: stream time 3 s + 6 s
        await worker.checkpoint()
        assert table.table.active[0].windows.stream_time == 9000


def late_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelname == "WARNING" and "late event(s) since the last report" in r.getMessage()]


def test_late_events_and_their_warning_are_per_worker_run(caplog: pytest.LogCaptureFixture) -> None:
    """Two drivers of one app, one after the other: each counts its own late event and warns about it."""
    app, views, table, _ = windowed_app(lambda t: t.tumbling(10), "kafka://nowhere:9092", topic_partitions=1)
    for run in range(2):
        caplog.clear()
        with TestDriver(app) as driver:
            for ts in (5, 25, 3):  # 3 is late: [0, 10) closed at stream time 25
                driver.send(views, key="a", value={"ts": ts})
            assert table.late_events == 1, f"run {run}"
        assert table.late_events == 1, "the run's count stays readable after it stopped"
        assert len(late_warnings(caplog)) == 1, f"run {run}"


def test_the_late_warning_repeats_after_its_interval_on_the_drivers_clock(
        caplog: pytest.LogCaptureFixture) -> None:
    app, views, table, _ = windowed_app(lambda t: t.tumbling(10), "kafka://nowhere:9092", topic_partitions=1)
    with TestDriver(app) as driver:
        for ts in (5, 25, 3, 4):  # two late events: 3 warns, 4 waits for the next warning
            driver.send(views, key="a", value={"ts": ts})
        assert len(late_warnings(caplog)) == 1
        driver.advance(15)  # past the 10 s between two warnings, on the virtual clock
        driver.send(views, key="a", value={"ts": 2})
        assert len(late_warnings(caplog)) == 2
        assert "2 late event(s) since the last report (3 in all" in late_warnings(caplog)[1]
    assert table.late_events == 3


@pytest.mark.parametrize("how", ["agent", "pipeline", "session", "sliding"])
def test_an_extractor_in_milliseconds_is_refused_naming_the_unit(how):
    """A `timestamp=` extractor takes seconds (or a datetime): one returning milliseconds put a 5-minute
    window in the year 55,000 without a word. Such an event is refused (the agent's error policy: the DLQ)
    saying what the unit is, on every path an event takes into windows; one in seconds is counted."""
    app = engine.App(f"units-{how}")
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    if how == "pipeline":
        app.stream(clicks).tumbling(300).count("per-user")
    elif how in ("session", "sliding"):
        getattr(app.stream(clicks), how)(300).count("per-user")
    else:
        per_user = app.Table("per-user", default=int, key_type=str, value_type=int).tumbling(300)

        @app.agent(clicks)
        async def count(stream):
            async for event in stream.events():
                per_user[event.key] += 1

    with TestDriver(app, topic_partitions=1) as driver:
        now = int(driver.now)
        driver.send(clicks, key="ada", value={"at": now * 1000})  # milliseconds
        driver.send(clicks, key="ada", value={"at": now})
        [letter] = driver.dlq(next(iter(app.agents.values())))
        assert "past the year 3000" in letter.error
        assert "returning milliseconds" in letter.error
        assert list(driver.table("per-user").values()) == [1]
