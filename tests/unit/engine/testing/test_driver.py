"""The test driver (engine.testing.TestDriver): a worker on virtual time, one input at a time. Every
expectation here is computed by hand from the test's own input: windows on event time (hours of it in
milliseconds of test), timers and crontabs on the virtual clock, `take(within=)`, idle window closing, the
DLQ, the error policy, determinism, and a loop that never idles."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

import engine
from engine.errors import WorkerFailed
from engine.testing import DeadLetter, NeverIdle, Record, TestDriver
from engine.windows import WindowRange
from tests.unit.engine.table_join_helpers import make_app as table_join_app

T0 = 1_767_225_600  # the driver's default start, 2026-01-01T00:00:00Z
HOUR = 3600
DAY = 24 * HOUR


def clicks_app() -> tuple[engine.App, Any, Any, Any]:
    """Clicks keyed by page, counted per user (a group_by) in 1-hour windows with 10 minutes of grace; the
    final windows go to a topic, late clicks to the late topic."""
    app = engine.App("driven-clicks", broker="kafka://nowhere:9092", topic_partitions=3)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    per_user = app.stream(clicks).group_by(lambda c: c["user"], key_type=str).tumbling(
        HOUR, grace=600).count("clicks-per-user")
    finals = app.topic("hourly", key_type=str, value_type=list)

    @app.agent(per_user.closed())
    async def report(stream: Any) -> None:
        async for (user, window), n in stream.items():
            await finals.send(key=user, value=[window.start, window.end, n])

    return app, clicks, per_user, finals


# (user, event time in seconds): out of order, within grace, and late
CLICKS = [("ada", 10), ("bob", 20), ("ada", 3000), ("ada", 3700), ("bob", 3590), ("ada", 4300),
          ("bob", 100), ("cy", 7300), ("ada", 7250), ("bob", 15000)]


def hand_computed(clicks: list[tuple[str, int]]) -> tuple[Counter[tuple[str, int]], list[tuple[str, int]]]:
    """Every window's count and the late clicks, by the rule: a click is late once stream time (the largest
    event time seen on its repartition partition, here all users share one order) passed its window's end
    plus the grace."""
    counts: Counter[tuple[str, int]] = Counter()
    late = []
    stream_time = 0
    for user, at in clicks:
        stream_time = max(stream_time, at)
        start = at // HOUR * HOUR
        if stream_time >= start + HOUR + 600:
            late.append((user, at))
        else:
            counts[(user, start)] += 1
    return counts, late


def test_an_hourly_window_count_closes_every_window_once_with_its_final_count_in_milliseconds() -> None:
    app, clicks, _, finals = clicks_app()
    with TestDriver(app, topic_partitions=1) as driver:  # one repartition partition: one stream time
        for user, at in CLICKS:
            driver.send(clicks, key=f"page-{at % 3}", value={"user": user, "at": at})
        counts, late = hand_computed(CLICKS)
        stream_time = max(at for _, at in CLICKS)
        closed = {window for window in counts if window[1] + HOUR + 600 <= stream_time}
        assert sorted((r.key, r.value) for r in driver.read(finals)) == sorted(
            (user, [start, start + HOUR, counts[(user, start)]]) for user, start in closed)
        assert driver.read(finals) == []  # read once
        live = {(user, WindowRange(start, start + HOUR)): n for (user, start), n in counts.items()
                if (user, start) not in closed}
        table = driver.table("clicks-per-user")
        assert {k: v for k, v in table.items() if k in live} == live
        assert late  # the input has late clicks: they were not counted
        assert sum(counts.values()) == len(CLICKS) - len(late)
        assert driver.now == T0  # hours of event time, and the clock never had to move for any of it


def test_outputs_carry_their_times_keys_and_partitions() -> None:
    app = engine.App("driven-upper", broker="memory://unused", topic_partitions=1)
    source = app.topic("in", key_type=str, value_type=str)
    out = app.topic("out", key_type=str, value_type=str)

    @app.agent(source)
    async def upper(stream: Any) -> None:
        async for key, value in stream.items():
            await out.send(key=key, value=value.upper(), headers=[("seen", b"1")])

    with TestDriver(app, start=T0 + 5) as driver:
        driver.send(source, key="k", value="a")
        driver.advance(90)
        driver.send("in", key="k", value="b", timestamp_ms=42)
        assert driver.read(out) == [Record("k", "A", (T0 + 5) * 1000, (("seen", b"1"),), 0),
                                    Record("k", "B", (T0 + 95) * 1000, (("seen", b"1"),), 0)]
        assert [r.timestamp_ms for r in driver.read(source)] == [(T0 + 5) * 1000, 42]
        assert driver.now == T0 + 95


def test_timers_and_crontabs_fire_at_their_times_on_the_virtual_clock() -> None:
    app = engine.App("driven-timers", broker="memory://unused")
    ticks = app.topic("ticks", value_type=str)

    @app.timer(10)
    async def every_ten() -> None:
        await ticks.send(value="timer")

    @app.crontab("*/5 * * * *", timezone="UTC")
    async def every_five_minutes() -> None:
        await ticks.send(value="cron")

    with TestDriver(app) as driver:  # starts at 00:00:00 UTC
        driver.advance(35)
        assert [(r.value, r.timestamp_ms // 1000 - T0) for r in driver.read(ticks)] == [
            ("timer", 10), ("timer", 20), ("timer", 30)]
        driver.advance(16 * 60 - 35)  # to 00:16:00
        fired = [(r.value, r.timestamp_ms // 1000 - T0) for r in driver.read(ticks)]
        assert [at for what, at in fired if what == "cron"] == [300, 600, 900]
        assert [at for what, at in fired if what == "timer"] == list(range(40, 961, 10))
        assert engine.wall_time() != driver.now  # outside the driver, the system's clock


def test_a_day_with_nothing_due_costs_the_loop_what_a_second_costs() -> None:
    """Moving time costs loop steps for what happens meanwhile, not for how long it is: a worker with a
    one-minute window table, its final results and a timer every two days, advanced by a day in which nothing
    is due, takes the steps a second takes (every loop of the worker sleeps until it has something to do,
    not until its next interval). The windows and the timer still come at their times."""
    app = engine.App("driven-quiet-day", broker="memory://unused", topic_partitions=1)
    source = app.topic("in", key_type=str, value_type=int)
    sums = app.stream(source).tumbling(60, grace=0).sum("sums", lambda v: v)
    finals = app.topic("finals", key_type=str, value_type=list)
    ticks = app.topic("ticks", value_type=str)

    @app.agent(sums.closed())
    async def report(stream: Any) -> None:
        async for (key, window), total in stream.items():
            await finals.send(key=key, value=[window.start, total])

    @app.timer(2 * DAY)
    async def every_other_day() -> None:
        await ticks.send(value="tick")

    with TestDriver(app) as driver:
        for value, at in [(1, 5), (2, 30), (4, 70)]:  # the third closes the first window (grace 0)
            driver.send(source, key="k", value=value, timestamp_ms=(T0 + at) * 1000)
        assert [r.value for r in driver.read(finals)] == [[T0, 3]]
        driver.advance(1)  # (the commit of the inputs, a second later)

        def cost(seconds: float) -> int:
            before = driver.steps
            driver.advance(seconds)
            return driver.steps - before

        second, day = cost(1), cost(DAY)
        assert day < 2 * second, f"a day took {day:,} loop steps, a second {second}"
        assert driver.read(ticks) == []
        assert driver.read(finals) == []
        cost(DAY)
        assert [r.timestamp_ms // 1000 - T0 for r in driver.read(ticks)] == [2 * DAY]
        driver.send(source, key="k", value=8, timestamp_ms=(T0 + 200) * 1000)  # closes [60, 120)
        assert [r.value for r in driver.read(finals)] == [[T0 + 60, 4]]
        assert driver.table("sums") == {("k", WindowRange(T0 + 180, T0 + 240)): 8}


def test_take_within_a_deadline_waits_on_the_virtual_clock() -> None:
    app = engine.App("driven-take", broker="memory://unused", topic_partitions=1)
    source = app.topic("in", value_type=int)
    batches = app.topic("batches", value_type=list)

    @app.agent(source)
    async def batch(stream: Any) -> None:
        async for values in stream.take(10, within=5):
            await batches.send(value=values)

    with TestDriver(app) as driver:
        driver.send(source, value=1)
        driver.advance(2)
        driver.send(source, value=2)
        assert driver.read(batches) == []  # 2 s after the first: not yet
        driver.advance(2.9)
        assert driver.read(batches) == []
        driver.advance(0.2)  # 5.1 s after the first
        assert [r.value for r in driver.read(batches)] == [[1, 2]]


def idle_sums(app_id: str, grace: float) -> tuple[engine.App, engine.Topic, engine.Topic, Any]:
    """An app summing per key in 60 s windows with `close_idle_after=30`, its finals as [start, sum] on
    `finals`: (app, source, finals, the windowed table)."""
    app = engine.App(app_id, broker="memory://unused", topic_partitions=1)
    source = app.topic("in", key_type=str, value_type=int)
    sums = app.stream(source).tumbling(60, grace=grace, close_idle_after=30).sum("sums", lambda v: v)
    finals = app.topic("finals", key_type=str, value_type=list)

    @app.agent(sums.closed())
    async def report(stream: Any) -> None:
        async for (key, window), total in stream.items():
            await finals.send(key=key, value=[window.start, total])

    return app, source, finals, sums


def test_a_quiet_partition_closes_its_windows_after_close_idle_after_on_the_virtual_clock() -> None:
    app, source, finals, _ = idle_sums("driven-idle", grace=0)
    with TestDriver(app) as driver:
        for value, at in [(1, 5), (2, 30), (4, 50)]:
            driver.send(source, key="k", value=value, timestamp_ms=(T0 + at) * 1000)
        driver.advance(29)
        assert driver.read(finals) == []  # idle for 29 s: stream time stays at 50 s
        driver.advance(60)
        assert [r.value for r in driver.read(finals)] == [[T0, 7]]


def test_a_day_of_close_idle_after_costs_the_windows_it_closes_not_its_commit_intervals() -> None:
    """With `close_idle_after`, the commit loop sleeps until the clock alone closes or expires a window
    (issue 53: one idle day was 691,077 loop steps, one checkpoint per commit interval); each window still
    closes at the first checkpoint after idle time moved stream time past its end plus grace, and an event
    after the idle time is judged against the stream time it moved to."""
    app, source, finals, sums = idle_sums("driven-idle-day", grace=10)
    with TestDriver(app) as driver:
        started = driver.now
        for value, at in [(1, 5), (2, 50), (4, 65)]:  # windows [T0, T0+60) and [T0+60, T0+120)
            driver.send(source, key="k", value=value, timestamp_ms=(T0 + at) * 1000)
        driver.advance(29)  # idle for less than 30 s: stream time stays at T0+65
        assert driver.read(finals) == []
        # Idle from the first checkpoint after the sends: stream time moves with the clock from then on, and
        # reaches T0+70 (the first window's end plus grace) 5 s of clock after it went idle.
        driver.advance(10)
        assert [r.value for r in driver.read(finals)] == [[T0, 3]]
        before = driver.steps
        driver.advance(86_400)
        steps = driver.steps - before
        assert [r.value for r in driver.read(finals)] == [[T0 + 60, 4]]  # (read: what is new since)
        assert steps < 1_000, f"an idle day with close_idle_after took {steps:,} loop steps"
        # Stream time moved on by the clock all day: an event an hour old now is late.
        driver.send(source, key="k", value=8, timestamp_ms=round((T0 + 65 + driver.now - started
                                                                   - 3600) * 1000))
        driver.advance(120)
        assert driver.read(finals) == []
        assert sums.late_events == 1


def test_a_record_an_agent_fails_on_goes_to_its_dlq_and_the_agent_goes_on() -> None:
    app = engine.App("driven-dlq", broker="memory://unused")
    source = app.topic("amounts", key_type=str, value_type=int)
    totals = app.Table("totals", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def add(stream: Any) -> None:
        async for key, amount in stream.items():
            if amount < 0:
                raise ValueError(f"negative amount {amount}")
            totals[key] += amount

    with TestDriver(app) as driver:
        for key, amount in [("a", 5), ("a", -1), ("b", 2), ("a", 3)]:
            driver.send(source, key=key, value=amount)
        assert driver.table("totals") == {"a": 8, "b": 2}
        [letter] = driver.dlq(add)
        a_partition = driver.read(source)[0].partition
        assert letter == DeadLetter(b"a", b"-1", "ValueError: negative amount -1", "ValueError", "amounts",
                                    a_partition, 1)
        assert driver.dlq("add") == []


def test_an_agent_that_stops_the_worker_fails_the_send_that_caused_it() -> None:
    app = engine.App("driven-stop", broker="memory://unused")
    source = app.topic("in", value_type=int)

    @app.agent(source, on_error="stop")
    async def strict(stream: Any) -> None:
        async for value in stream:
            if value == 13:
                raise ValueError("unlucky")

    driver = TestDriver(app)
    try:
        driver.send(source, value=1)
        with pytest.raises(engine.WorkerFailed, match="unlucky"):
            driver.send(source, value=13)
        with pytest.raises(engine.WorkerFailed):
            driver.send(source, value=2)
    finally:
        driver.close()


def test_a_spinning_agent_is_reported_not_waited_for() -> None:
    app = engine.App("driven-spin", broker="memory://unused")
    source = app.topic("in", value_type=int)

    @app.agent(source)
    async def spin(stream: Any) -> None:
        async for _ in stream:
            while True:
                await asyncio.sleep(0)

    driver = TestDriver(app)
    try:
        with pytest.raises(NeverIdle, match="never became idle"):
            driver.send(source, value=1)
    finally:
        driver.close()


def run_scenario() -> list[Record]:
    app, clicks, _, finals = clicks_app()
    with TestDriver(app) as driver:
        for user, at in CLICKS * 3:
            driver.send(clicks, key=f"page-{at % 5}", value={"user": user, "at": at})
        driver.send(clicks, key="page-0", value={"user": "zed", "at": 100_000})
        return driver.read(finals)


def test_the_same_input_gives_the_same_output_in_the_same_order() -> None:
    first, second = run_scenario(), run_scenario()
    assert first
    assert first == second


def test_the_pytest_fixture_closes_its_drivers(engine_driver: Any) -> None:
    app = engine.App("driven-fixture", broker="memory://unused")
    words = app.topic("words", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(words)
    async def count(stream: Any) -> None:
        async for word, n in stream.items():
            counts[word] += n

    driver = engine_driver(app)
    for word in ["red", "green", "red"]:
        driver.send(words, key=word, value=1)
    assert driver.table("counts") == {"red": 2, "green": 1}


def test_a_stream_table_join_sees_the_table_as_each_event_finds_it() -> None:
    app = engine.App("driven-join", broker="memory://unused", processing_guarantee="exactly_once")
    payments = app.topic("payments", key_type=str, value_type=int)
    profiles = app.Table("profiles", source_topic=app.topic("profiles", key_type=str, value_type=str))
    enriched = app.topic("enriched", key_type=str, value_type=list)

    @app.agent(payments)
    async def enrich(stream: Any) -> None:
        async for amount, tier in stream.left_join(profiles):
            await enriched.send(key=stream.current_event.key, value=[amount, tier])

    with TestDriver(app) as driver:  # exactly_once runs as at-least-once here: nothing to change in the app
        for topic, key, value in [("profiles", "ada", "gold"), ("payments", "ada", 10),
                                  ("payments", "bob", 20), ("profiles", "ada", "silver"),
                                  ("profiles", "bob", "gold"), ("payments", "ada", 30),
                                  ("payments", "bob", 40)]:
            driver.send(topic, key=key, value=value)
        assert [(r.key, r.value) for r in driver.read(enriched)] == [
            ("ada", [10, "gold"]), ("bob", [20, None]), ("ada", [30, "silver"]), ("bob", [40, "gold"])]
        assert driver.table("profiles") == {"ada": "silver", "bob": "gold"}


def test_a_table_table_join_follows_both_sides_and_retracts_a_deleted_row() -> None:
    app, orders_in, customers_in, joins = table_join_app()  # the table-join tests' app, on the driver
    joined = joins["left"]
    with TestDriver(app) as driver:
        driver.send(orders_in, key="o1", value={"n": 1})
        assert driver.table(joined.name) == {"o1": ({"n": 1}, None)}
        driver.send(customers_in, key="o1", value={"name": "ann"})
        assert driver.table(joined.name) == {"o1": ({"n": 1}, {"name": "ann"})}
        driver.send(orders_in, key="o2", value={"n": 2})
        driver.send(orders_in, key="o1", value={"delete": True})
        assert driver.table(joined.name) == {"o2": ({"n": 2}, None)}


def test_ask_waits_for_the_reply_on_the_virtual_clock() -> None:
    app = engine.App("driven-ask", broker="memory://unused")
    questions = app.topic("questions", value_type=int)

    @app.agent(questions)
    async def double(stream: Any) -> Any:
        async for value in stream:
            yield value * 2

    with TestDriver(app) as driver:
        began = driver.now
        assert driver.ask(double, 21) == 42
        assert driver.now == began  # answered without time moving


def test_through_an_internal_topic_and_on_to_the_output() -> None:
    app = engine.App("driven-through", broker="memory://unused", topic_partitions=2)
    source = app.topic("in", key_type=str, value_type=int)
    out = app.topic("out", key_type=str, value_type=int)

    @app.agent(source)
    async def relay(stream: Any) -> None:
        async for key, value in stream.through("hop").items():
            await out.send(key=key, value=value * 10)

    with TestDriver(app) as driver:
        for key, value in [("a", 1), ("b", 2), ("a", 3)]:
            driver.send(source, key=key, value=value)
        assert [(r.key, r.value) for r in driver.read("driven-through-hop")] == [("a", 1), ("b", 2), ("a", 3)]
        assert [(r.key, r.value) for r in driver.read(out)] == [("a", 10), ("b", 20), ("a", 30)]


def test_bytes_that_do_not_decode_go_to_the_dlq_with_their_decode_error() -> None:
    app = engine.App("driven-raw", broker="memory://unused", topic_partitions=1)
    source = app.topic("amounts", key_type=str, value_type=int)
    seen: list[int] = []

    @app.agent(source)
    async def add(stream: Any) -> None:
        async for amount in stream:
            seen.append(amount)

    with TestDriver(app) as driver:
        driver.send_raw(source, b"a", b"not json", timestamp_ms=5_000)
        driver.send(source, key="a", value=7)
        assert seen == [7], "the agent goes on after the record it could not decode"
        [letter] = driver.dlq(add)
        # A dead letter's key and value are the record's bytes (whatever the error).
        assert (letter.key, letter.value, letter.error_type) == (b"a", b"not json", "DecodeError")
        assert (letter.topic, letter.partition, letter.offset) == ("amounts", 0, 0)


def test_a_driver_never_closed_is_freed_when_collected_saying_so(caplog: pytest.LogCaptureFixture) -> None:
    import gc

    from engine.transport.memory import MemoryBroker

    app = engine.App("driven-abandoned", broker="memory://unused")
    source = app.topic("in", value_type=int)

    @app.agent(source)
    async def take(stream: Any) -> None:
        async for _ in stream:
            pass

    drivers = [TestDriver(app)]
    drivers[0].send(source, value=1)
    broker, loop = drivers[0].broker, drivers[0]._loop
    with pytest.warns(ResourceWarning, match="'driven-abandoned' was not closed: use `with TestDriver"):
        drivers.clear()  # the last reference: the driver is collected at once
    assert loop.is_closed()
    assert not asyncio.all_tasks(loop), "every task of its worker was cancelled and finished"
    assert broker not in MemoryBroker._registry.values()  # forgotten, like close() does
    gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text


def test_an_agent_that_crashes_fails_the_call_that_made_it_crash():
    """An agent that crashes (before its first event here, as one calling group_by without name= did) is
    restarted by a worker after a backoff, which on the driver's clock never comes without `advance`: the
    test passed with its events unprocessed. The driver raises the crash from the call during which it
    happened, naming the agent and the exception, as TopologyTestDriver raises a processor's."""
    app = engine.App("crashing")
    orders = app.topic("orders", key_type=str, value_type=int)
    totals = app.Table("totals", default=int, key_type=str, value_type=int)

    @app.agent(orders)
    async def keep(stream):
        raise RuntimeError("set-up went wrong")
        async for key, value in stream.items():  # pragma: no cover
            totals[key] += value

    with pytest.raises(WorkerFailed, match=r"agent keep crashed .*RuntimeError: set-up went wrong"):
        TestDriver(app)

