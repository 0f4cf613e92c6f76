"""Session windows (a pipeline's `.session(gap, grace=)`): sessions extended, merged (the merged-away ones
tombstoned), late events, final sessions on `closed()`, across checkpoints and restarts, and a seeded
stream checked against sessions computed offline from each key's sorted times. Every expectation is
computed here from the test's own input."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

import engine
from engine import testing
from engine.errors import ConfigError
from engine.testing import TestDriver
from engine.windows import WindowRange


def sessions_app(gap: float = 10, grace: float = 0, *, expires: float | None = None,
                 close_idle_after: float | None = None, **settings: Any) -> tuple[engine.App, Any, Any, Any]:
    """Clicks keyed by user, with their event time (s) in the value; a session count per user, its final
    sessions forwarded to a topic."""
    app = engine.App("sessions", broker="memory://unused", topic_partitions=1, **settings)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    visits = app.stream(clicks).session(gap, grace=grace, expires=expires,
                                        close_idle_after=close_idle_after).count("visits")
    finals = app.topic("finals", key_type=str, value_type=list)

    @app.agent(visits.closed())
    async def report(stream: Any) -> None:
        async for (user, window), n in stream.items():
            await finals.send(key=user, value=[window.start, window.end, n])

    return app, clicks, visits, finals


def send(driver: TestDriver, clicks: Any, user: str, *times: float) -> None:
    for at in times:
        driver.send(clicks, key=user, value={"at": at})


def test_an_event_within_the_gap_extends_a_session_and_one_between_two_merges_them() -> None:
    app, clicks, _, _ = sessions_app(gap=10, grace=30)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 0, 5)  # one session [0, 5]
        assert driver.table("visits") == {("a", WindowRange(0, 5)): 2}
        send(driver, clicks, "a", 22)  # 17 s after 5: a new session
        assert driver.table("visits") == {("a", WindowRange(0, 5)): 2, ("a", WindowRange(22, 22)): 1}
        send(driver, clicks, "a", 14)  # 9 s after 5 and 8 s before 22: bridges them
        assert driver.table("visits") == {("a", WindowRange(0, 22)): 4}
        changelog = [(r.key, r.value) for r in driver.read("sessions-visits-changelog")]
        # Every checkpoint wrote the sessions as they were; the grown and the merged ones were tombstoned.
        assert changelog == [
            (("a", WindowRange(0, 0)), 1),
            (("a", WindowRange(0, 0)), None), (("a", WindowRange(0, 5)), 2),
            (("a", WindowRange(22, 22)), 1),
            (("a", WindowRange(0, 5)), None), (("a", WindowRange(22, 22)), None),
            (("a", WindowRange(0, 22)), 4),
        ]


def test_late_events_and_final_sessions_follow_kafka_streams_suppress_until_window_closes() -> None:
    """gap 10 s, grace 2 s: a session closes when stream time reaches its end + 12 s; an event is late when
    its session would end before stream time - 12 s."""
    app, clicks, visits, finals = sessions_app(gap=10, grace=2)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 100, 104)
        send(driver, clicks, "b", 88)  # stream time 104: [88, 88] closes at 100 < 104: late
        assert visits.late_events == 1
        send(driver, clicks, "b", 92)  # closes at 104: not late, and final at once
        assert [(r.key, r.value) for r in driver.read(finals)] == [("b", [92, 92, 1])]
        send(driver, clicks, "c", 104, 105, 114)
        assert driver.read(finals) == []
        send(driver, clicks, "d", 116)  # a's [100, 104] closes at 116
        assert [(r.key, r.value) for r in driver.read(finals)] == [("a", [100, 104, 2])]
        send(driver, clicks, "a", 103)  # a final session is gone (expires = grace): [103, 103] is late
        assert visits.late_events == 2
        send(driver, clicks, "d", 117)
        assert driver.table("visits") == {("c", WindowRange(104, 114)): 3, ("d", WindowRange(116, 117)): 2}
        send(driver, clicks, "e", 200)  # closes c (at 126) and d (at 129), in that order; b's was deleted
        assert [(r.key, r.value) for r in driver.read(finals)] == [("c", [104, 114, 3]), ("d", [116, 117, 2])]
        assert driver.table("visits") == {("e", WindowRange(200, 200)): 1}  # the rest expired (grace 2 s)


def test_with_expires_past_the_grace_a_final_session_can_be_merged_and_is_final_again() -> None:
    app, clicks, _, finals = sessions_app(gap=10, expires=100)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 0, 18)  # [0, 0] closes at 10: final at 18
        send(driver, clicks, "a", 9)  # bridges [0, 0] and [18, 18]: [0, 18], closing at 28
        send(driver, clicks, "a", 40)
        assert [(r.key, r.value) for r in driver.read(finals)] == [("a", [0, 0, 1]), ("a", [0, 18, 3])]


def test_aggregate_needs_merge_for_sessions_and_reduce_merges_by_its_function() -> None:
    app = engine.App("sessions-aggs", broker="memory://unused", topic_partitions=1)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    with pytest.raises(ConfigError, match="merge="):
        app.stream(clicks).session(10).aggregate("pages", [], lambda seen, c: [*seen, c["page"]])
    app.stream(clicks).session(10, grace=30).aggregate(
        "pages", [], lambda seen, c: sorted([*seen, c["page"]]), merge=lambda one, other: sorted(one + other))
    app.stream(clicks).map(lambda c: c["page"], value_type=str).session(10, grace=30).reduce(
        "longest", lambda one, other: max(one, other, key=len))
    with TestDriver(app) as driver:
        for at, page in [(0, "home"), (20, "about"), (10, "checkout"), (3, "x")]:
            driver.send(clicks, key="a", value={"at": at, "page": page})
        # 0 and 20 are two sessions until 10 bridges them (10 - 0 <= 10, 20 - 10 <= 10); 3 is in it
        assert driver.table("pages") == {("a", WindowRange(0, 20)): ["about", "checkout", "home", "x"]}
        assert driver.table("longest") == {("a", WindowRange(0, 20)): "checkout"}


async def test_a_merge_across_a_restart_reads_the_sessions_back_from_the_changelog() -> None:
    """Memory stores: the second worker rebuilds the sessions, and which were final, from the changelog.
    gap 10 s, grace 30 s: a session closes at its end + 40 s."""
    url = testing.memory_url()
    runs = [
        # b's [1, 1] closes at 41: final at 42; a's [0, 5] and [22, 22] wait
        ([("b", 1), ("a", 0), ("a", 5), ("a", 22), ("c", 42)], [("b", WindowRange(1, 1), 1)]),
        # after the restart, 14 merges a's two sessions; 80 closes [0, 22] (at 62), and not b's again
        ([("a", 14), ("c", 80)], [("a", WindowRange(0, 22), 4)]),
    ]
    for clicks_sent, expected_finals in runs:
        app = engine.App("sessions-restart", broker=url, store="memory://", topic_partitions=1,
                         commit_interval=0.05)
        clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
        visits = app.stream(clicks).session(10, grace=30).count("visits")
        finals: list[tuple[str, WindowRange, int]] = []

        @app.agent(visits.closed())
        async def report(stream: Any, finals: list[tuple[str, WindowRange, int]] = finals) -> None:
            async for (user, window), n in stream.items():
                finals.append((user, window, n))

        async with testing.running(app):
            for user, at in clicks_sent:
                await clicks.send(key=user, value={"at": at})
            await testing.eventually(lambda finals=finals, expected=expected_finals: finals == expected)
            c_sessions = list(visits.windows("c"))
        assert finals == expected_finals  # and nothing more
    assert c_sessions == [(WindowRange(42, 42), 1), (WindowRange(80, 80), 1)]


def offline_sessions(times: list[int], gap: int) -> list[tuple[int, int, int]]:
    """(start, end, count) of every session of one key's event times, by definition: sort them and split
    where two neighbours are more than `gap` apart."""
    sessions: list[tuple[int, int, int]] = []
    for at in sorted(times):
        if sessions and at - sessions[-1][1] <= gap:
            start, _, n = sessions[-1]
            sessions[-1] = (start, at, n + 1)
        else:
            sessions.append((at, at, 1))
    return sessions


def test_a_seeded_out_of_order_stream_gives_the_sessions_of_each_keys_sorted_times() -> None:
    """Times in ms, out of order by less than the grace, so no event is late and no session is final before
    its last event came: the final sessions must be those the sorted times make. Over several partitions,
    each with its own stream time."""
    rng = random.Random(7)
    gap_ms, grace_ms = 3_000, 20_000
    app = engine.App("sessions-seeded", broker="memory://unused", topic_partitions=3)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    visits = app.stream(clicks).session(gap_ms / 1000, grace=grace_ms / 1000).count("visits")
    finals = app.topic("finals", key_type=str, value_type=list)

    @app.agent(visits.closed())
    async def report(stream: Any) -> None:
        async for (user, window), n in stream.items():
            await finals.send(key=user, value=[round(window.start * 1000), round(window.end * 1000), n])

    events = []
    for user in [f"u{i}" for i in range(12)]:
        at = rng.randrange(10_000, 20_000)
        for _ in range(rng.randrange(5, 40)):
            at += rng.choice([rng.randrange(0, 2_000), rng.randrange(2_000, 4_000),
                              rng.randrange(4_000, 9_000)])
            events.append((at + rng.randrange(-8_000, 8_000), user))
    events.sort()
    shuffled = sorted(events, key=lambda e: e[0] + rng.randrange(0, 9_000))  # out of order by < grace
    times: dict[str, list[int]] = defaultdict(list)
    with TestDriver(app) as driver:
        for at, user in shuffled:
            times[user].append(at)
            driver.send(clicks, key=user, value={"at": at / 1000})
        end = max(at for at, _ in events) + gap_ms + grace_ms + 1
        for partition in range(3):  # one event far ahead on every partition closes every session
            driver.send(clicks, key="zz", value={"at": end / 1000}, partition=partition)
        assert visits.late_events == 0
        got = sorted((r.key, *r.value) for r in driver.read(finals))
    expected = sorted((user, *session) for user, ts in times.items()
                      for session in offline_sessions(ts, gap_ms))
    assert got == expected


def test_close_idle_after_closes_a_quiet_partitions_sessions_on_the_wall_clock() -> None:
    """A departure from Kafka Streams, asked for: with no event for 30 s of wall clock, stream time moves on
    by the wall-clock time since, so the last sessions close."""
    app, clicks, _, finals = sessions_app(gap=10, close_idle_after=30)
    with TestDriver(app) as driver:
        send(driver, clicks, "a", 100, 105)
        driver.advance(29)
        assert driver.read(finals) == []
        driver.advance(2)  # idle past 30 s: stream time moves on from 105 by the idle time (> 10 s gap)
        assert [(r.key, r.value) for r in driver.read(finals)] == [("a", [100, 105, 2])]
