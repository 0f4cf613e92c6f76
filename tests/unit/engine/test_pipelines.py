"""Declarative pipelines (app.stream(...)...count(name)) on the in-memory broker: each aggregation's table
and final windows equal what the test computes from its own input, through filter, map and group_by."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

import engine
from engine import testing
from engine.errors import ConfigError
from engine.testing import TestDriver
from engine.windows import SessionWindow, SlidingWindow, WindowRange

# (user, page, amount, event time in s): users are spread over keys the source topic does not have.
CLICKS = [(f"u{i % 5}", f"p{i % 3}", i % 7, t) for i, t in enumerate(
    [1, 2, 3, 12, 5, 14, 21, 8, 25, 33, 31, 40, 45, 38, 52, 61, 59, 70, 72, 85])]


def make_app() -> tuple[engine.App, Any]:
    app = engine.App("pipes", broker=testing.memory_url(), store="memory://", topic_partitions=2)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["ts"])
    return app, clicks


async def feed(clicks: Any) -> None:
    for user, page, amount, ts in CLICKS:
        await clicks.send(key=page, value={"user": user, "page": page, "amount": amount, "ts": ts})


def finals_of(app: engine.App, table: Any) -> list:
    finals: list = []

    @app.agent(table.closed(), name=f"{table.name}-finals")
    async def collect(stream: Any) -> None:
        async for (key, window), value in stream.items():
            finals.append((key, window, value))

    return finals


async def test_a_windowed_count_per_regrouped_key_emits_every_window_once_with_its_final_count():
    app, clicks = make_app()
    per_user = app.stream(clicks).group_by(lambda c: c["user"], key_type=str).tumbling(
        20, grace=100).count("clicks-per-user")
    finals = finals_of(app, per_user)
    async with testing.running(app):
        await feed(clicks)
        # A record far ahead in event time on every partition of the repartition topic closes every window.
        for user in [f"u{i}" for i in range(5)]:
            await clicks.send(key="p0", value={"user": user, "page": "p0", "amount": 0, "ts": 1000})
        expected = Counter((user, WindowRange(ts // 20 * 20, ts // 20 * 20 + 20))
                           for user, _, _, ts in CLICKS)

        await testing.eventually(lambda: len([f for f in finals if f[1].start < 1000]) >= len(expected), 10)
        assert sorted((k, w, n) for k, w, n in finals if w.start < 1000) == sorted(
            (user, window, n) for (user, window), n in expected.items())


async def test_plain_count_sum_reduce_and_aggregate_after_filter_and_map():
    app, clicks = make_app()
    stream = app.stream(clicks).filter(lambda c: c["amount"] > 0)
    counts = stream.count("paid-per-page")
    sums = stream.sum("amount-per-page", lambda c: c["amount"])
    largest = stream.map(lambda c: c["amount"], value_type=int).reduce("largest-per-page", max)
    users = stream.group_by(lambda c: c["user"], key_type=str).aggregate(
        "pages-per-user", [], lambda seen, c: sorted({*seen, c["page"]}))
    paid = [c for c in CLICKS if c[2] > 0]
    truth_counts = Counter(page for _, page, _, _ in paid)
    truth_sums: dict[str, int] = defaultdict(int)
    truth_max: dict[str, int] = {}
    truth_pages: dict[str, set[str]] = defaultdict(set)
    for user, page, amount, _ in paid:
        truth_sums[page] += amount
        truth_max[page] = max(truth_max.get(page, amount), amount)
        truth_pages[user].add(page)
    async with testing.running(app):
        await feed(clicks)
        await testing.eventually(lambda: dict(counts.items()) == dict(truth_counts), 10)
        await testing.eventually(lambda: dict(sums.items()) == dict(truth_sums), 10)
        await testing.eventually(lambda: dict(largest.items()) == truth_max, 10)
        await testing.eventually(
            lambda: dict(users.items()) == {u: sorted(p) for u, p in truth_pages.items()}, 10)


async def test_a_hopping_sum_holds_every_window_of_every_event():
    app, clicks = make_app()
    sums = app.stream(clicks).hopping(20, 10, grace=1000).sum("amount-hopping", lambda c: c["amount"])
    truth: dict[tuple[str, int], int] = defaultdict(int)
    for _, page, amount, ts in CLICKS:
        for start in range(max(ts // 10 * 10 - 10, 0), ts + 1, 10):
            if start <= ts < start + 20:
                truth[(page, start * 1000)] += amount
    async with testing.running(app):
        await feed(clicks)
        await testing.eventually(lambda: dict(sums.table.items()) == dict(truth), 10)


def test_a_pipeline_says_what_is_out_of_order():
    app, clicks = make_app()
    windowed = app.stream(clicks).tumbling(10)
    with pytest.raises(ConfigError, match="window comes after its steps"):
        windowed.filter(bool)
    with pytest.raises(ConfigError, match="one window"):
        windowed.hopping(10, 5)


@pytest.mark.parametrize("window", [
    lambda p: p.tumbling(10, late_topic=True),
    lambda p: p.hopping(10, 5, late_topic=True),
    lambda p: p.sliding(10, late_topic=True),
    lambda p: p.session(5, late_topic=True),
], ids=["tumbling", "hopping", "sliding", "session"])
def test_every_windowed_pipeline_sends_its_late_events_to_the_late_topic(window: Any) -> None:
    app = engine.App("late-pipes", broker="kafka://nowhere:9092", topic_partitions=1)
    clicks = app.topic("clicks", key_type=str, value_type=str)
    table = window(app.stream(clicks)).count("per-page")
    assert table.late_topic is not None
    assert table.late_topic.name == "late-pipes-per-page-late"
    with TestDriver(app) as driver:
        for value, at in [("in", 5), ("ahead", 25), ("late", 3)]:  # 3: its every window closed by 25
            driver.send(clicks, key="p", value=value, timestamp_ms=at * 1000)
        late = driver.read(table.late_topic)
    assert [(r.key, r.value, r.timestamp_ms) for r in late] == [(b"p", b"late", 3000)]
    assert table.late_events == 1


@pytest.mark.parametrize("kind", ["tumbling", "hopping", "session", "sliding"])
def test_a_window_written_or_deleted_on_its_own_is_refused_and_the_windows_stay_as_the_events_made_them(
        kind: str) -> None:
    """A windowed table's face keeps in memory which windows each key has, so a window written past it
    (`table[(key, start)] = v` on the table itself) was lost to the window's next update: refused instead,
    with an error naming the table, which the agent's error policy deals with."""
    app = engine.App("direct", broker=testing.memory_url(), store="memory://", topic_partitions=1)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    stream = app.stream(clicks)
    windowed = {"tumbling": stream.tumbling(10), "hopping": stream.hopping(10, 5),
                "session": stream.session(10), "sliding": stream.sliding(10)}[kind]
    windowed.count("recent")
    pokes = app.topic("pokes", key_type=str, value_type=list)

    @app.agent(pokes)
    async def poke(events: Any) -> None:
        async for key, (start, delete) in events.items():
            if delete:
                del app.tables["recent"][(key, start)]
            else:
                app.tables["recent"][(key, start)] = 100

    with TestDriver(app) as driver:
        driver.send(clicks, key="a", value={"at": 20})
        before = driver.table("recent")
        driver.send(pokes, key="a", value=[10_000, False])
        driver.send(pokes, key="a", value=[20_000, True])
        assert driver.table("recent") == before, "neither reached the table"
        refused = driver.read("direct-poke-dlq")
        assert len(refused) == 2
        for record in refused:
            error = dict(record.headers)["engine-error"].decode()
            assert "table 'recent' holds windows" in error
            assert "cannot be written or deleted on its own" in error
        driver.send(clicks, key="a", value={"at": 15})  # its windows as the events alone make them
        assert all(n <= 2 for n in driver.table("recent").values())


def test_a_pipelines_group_by_takes_the_streams_arguments() -> None:
    """`Pipeline.group_by(key, *, name=, key_type=, value_type=)` as `Stream.group_by`: a name names the
    repartition topic `<app>-<name>-repartition` (without one, `<app>-<aggregation>-<n>-repartition`), and
    `value_type` its values' codec; the counts are the same either way."""
    app = engine.App("pipes-named", broker="memory://unused", topic_partitions=2)
    clicks = app.topic("clicks", key_type=str, value_type=dict)
    named = app.stream(clicks).group_by(lambda c: c["user"], name="by-user", key_type=str,
                                        value_type=dict).count("named")
    unnamed = app.stream(clicks).group_by(lambda c: c["user"], key_type=str).count("unnamed")
    with TestDriver(app) as driver:
        for user, page, amount, ts in CLICKS:
            driver.send(clicks, key=page, value={"user": user, "page": page, "amount": amount, "ts": ts})
        expected = dict(Counter(user for user, _, _, _ in CLICKS))
        assert driver.table(named.name) == expected
        assert driver.table(unnamed.name) == expected
        topics = driver.worker.topology.topics
        assert topics["pipes-named-by-user-repartition"].topic.value_type is dict
        assert "pipes-named-unnamed-0-repartition" in topics


def test_sessions_and_sliding_windows_of_a_table_are_named_as_a_pipelines() -> None:
    """`Table.session(gap, ...)` and `Table.sliding(size, ...)`, as `tumbling`/`hopping` and the pipeline's
    window methods; the old `session_windowed`/`sliding_windowed` still work, with a DeprecationWarning."""
    app = engine.App("tables-named", broker="memory://unused")
    sessions = app.Table("s", key_type=str).session(10, grace=2, initial=int, add=lambda n, _: n + 1,
                                                   merge=lambda a, b: a + b)
    sliding = app.Table("w", key_type=str).sliding(10, initial=int, add=lambda n, _: n + 1)
    assert (sessions.window.gap_ms, sessions.window.grace_ms) == (10_000, 2_000)
    assert sliding.window.size_ms == 10_000
    with pytest.warns(DeprecationWarning, match=r"Table\.session\(gap"):
        old = app.Table("s-old", key_type=str).session_windowed(
            SessionWindow(10), initial=int, add=lambda n, _: n + 1, merge=lambda a, b: a + b)
    assert old.window == SessionWindow(10)
    with pytest.warns(DeprecationWarning, match=r"Table\.sliding\(size"):
        app.Table("w-old", key_type=str).sliding_windowed(SlidingWindow(10), initial=int,
                                                          add=lambda n, _: n + 1)



def test_two_pipelines_grouping_through_one_name_are_refused_at_start() -> None:
    """Two aggregations re-keyed through the same `name=` would share `<app>-<name>-repartition`, each then
    counting the other's records too: refused when the worker starts, naming the topic and both."""
    app = engine.App("pipes-same-name", broker="memory://unused")
    orders = app.topic("orders", key_type=str, value_type=dict)
    app.stream(orders).group_by(lambda o: o["user"], name="by-user", key_type=str).count("orders-per-user")
    app.stream(orders).group_by(lambda o: o["user"], name="by-user", key_type=str).sum(
        "units-per-user", lambda o: o["units"])
    with pytest.raises(ConfigError, match=r"orders-per-user-aggregate.*units-per-user-aggregate.*"
                                          r"pipes-same-name-by-user-repartition.*different names"):
        TestDriver(app)
