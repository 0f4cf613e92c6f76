"""A final window on `table.closed()` carries event time: its record's timestamp is the largest event time
of the events it aggregates (Kafka Streams' rule for a windowed aggregation's results, which its
suppressed finals keep), and an agent reading `closed()` sees that time as its event's. For tumbling,
hopping, session and sliding windows, the expected time of each window is computed here from the input."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

import pytest

import engine
from engine import testing
from engine.events import TP
from engine.testing import TestDriver

if TYPE_CHECKING:
    from engine.runtime import Worker
    from engine.windows import WindowRange

SIZE = 10_000  # ms
STEP = 4_000
GAP = 3_000


def _app(kind: str, **settings: Any) -> tuple[engine.App, Any, list[tuple[str, WindowRange, int]]]:
    settings.setdefault("broker", "memory://unused")
    app = engine.App(f"closed-time-{kind}", topic_partitions=1, **settings)
    clicks = app.topic("clicks", key_type=str, value_type=int)
    stream = app.stream(clicks)
    windowed = {
        "tumbling": lambda: stream.tumbling(SIZE / 1000),
        "hopping": lambda: stream.hopping(SIZE / 1000, STEP / 1000),
        "session": lambda: stream.session(GAP / 1000),
        "sliding": lambda: stream.sliding(SIZE / 1000),
    }[kind]()
    counts = windowed.count("counts")
    seen: list[tuple[str, WindowRange, int]] = []

    @app.agent(counts.closed())
    async def finals(events: Any) -> None:
        async for event in events.events():
            user, window = event.key
            seen.append((user, window, event.record.timestamp))

    return app, clicks, seen


async def _checkpointed(worker: Worker, topic: str, count: int) -> None:
    """Until a checkpoint covers the first `count` records of `topic` (partition 0)."""
    deadline = asyncio.get_running_loop().time() + 10
    while (await worker.tasks.checkpoint()).get(TP(topic, 0), 0) < count:
        assert asyncio.get_running_loop().time() < deadline, f"{topic} not checkpointed in 10 s"
        await asyncio.sleep(0.01)


async def _read_to_end(worker: Worker, topic: str) -> None:
    """Until the agents reading `topic` (partition 0) processed every record on it."""
    tp, loop = TP(topic, 0), asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        end = (await worker.consumer.offsets([tp]))[tp][1]
        lease = worker.tasks.leases.current.get(tp)
        if end and lease is not None and lease.position == end:
            return
        assert loop.time() < deadline, f"{topic} not read to its end ({end}) in 10 s"
        await asyncio.sleep(0.01)


def _in(window: WindowRange, at: int, kind: str) -> bool:
    """Whether an event at `at` (ms) is in `window` (s): sliding windows include both ends, sessions are
    [first, last], the others [start, end)."""
    start, end = round(window.start * 1000), round(window.end * 1000)
    return start <= at <= end if kind in ("sliding", "session") else start <= at < end


@pytest.mark.parametrize("kind", ["tumbling", "hopping", "session", "sliding"])
def test_a_final_window_carries_the_largest_event_time_of_its_events(kind: str) -> None:
    app, clicks, seen = _app(kind)
    rng = random.Random(37)
    sent: dict[str, list[int]] = {"a": [], "b": []}
    at = 0
    with TestDriver(app) as driver:
        for _ in range(60):  # in order, so that no event is late: every event is in the windows it made
            at += rng.randrange(0, 2_500)
            user = rng.choice("ab")
            sent[user].append(at)
            driver.send(clicks, key=user, value=1, timestamp_ms=at)
        driver.send(clicks, key="z", value=1, timestamp_ms=at + 10 * SIZE)  # closes every window of a, b
        finals = [r for r in driver.read(f"closed-time-{kind}-counts-closed") if r.key[0] != "z"]
        assert len(finals) >= 8
        for record in finals:
            user, window = record.key
            expected = max(t for t in sent[user] if _in(window, t, kind))
            assert record.timestamp_ms == expected, (kind, window, record.value)
        assert [(u, w, t) for u, w, t in seen if u != "z"] == [
            (r.key[0], r.key[1], r.timestamp_ms) for r in finals], "the agent sees the record's event time"


@pytest.mark.parametrize("kind", ["tumbling", "hopping", "session", "sliding"])
async def test_across_a_restart_a_final_window_keeps_its_time_or_falls_back_to_its_end(kind: str) -> None:
    """Memory stores on a shared memory broker: the second worker rebuilds the windows from the changelog.
    a's events at 1 s and 7 s before the restart, one at 6 s after it; then an event of z far ahead
    closes every window. A session's end is its last event, and a sliding window's newest event time is
    kept beside it (its algorithm needs it): their time survives. A tumbling or hopping window's events'
    times are not kept: one that was in the store when its partition was taken on gets its end - 1."""
    url = testing.memory_url()
    seen: list[tuple[str, WindowRange, int]] = []
    for times in ([1_000, 7_000], [6_000, 10 * SIZE]):
        app, clicks, seen = _app(kind, broker=url, store="memory://", commit_interval=0.05)
        async with testing.running(app) as worker:
            for at in times:
                await clicks.send(key="z" if at >= SIZE else "a", value=1, timestamp_ms=at)
            await _checkpointed(worker, "clicks", 2)  # every window they made is in the changelog
            if times[-1] >= SIZE:  # and every final window they closed was read by `finals`
                closed = app.tables["counts"].windowed.closed_topic.name  # type: ignore[union-attr]
                await _read_to_end(worker, closed)
    finals = [(window, at) for user, window, at in seen if user == "a" and _in(window, 7_000, kind)]
    assert finals
    for window, at in finals:
        fallback = round(window.end * 1000) - 1
        assert at == (fallback if kind in ("tumbling", "hopping") else 7_000), (kind, window)
