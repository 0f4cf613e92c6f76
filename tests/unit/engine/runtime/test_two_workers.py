"""Two workers of one App in one process (what the test kit does to show partitions moving): they share the
app's topics, agents and tables, and each keeps its own state of them (engine.scope). Under exactly-once an
agent's sends go to its own worker's task transactions, each worker's windowed tables advance stream time on
its own partitions (so both close windows), and a table read outside both workers sees every partition."""

from __future__ import annotations

from collections import Counter
from typing import Any

import engine
from engine import testing

WORDS = [f"w{i % 23}" for i in range(600)]


def make_app() -> tuple[engine.App, Any, Any, Any]:
    app = engine.App("two-workers", processing_guarantee="exactly_once")
    words = app.topic("words", key_type=str, value_type=str)
    counted = app.topic("counted", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    windows = app.Table("windows", default=int, key_type=str, value_type=int).tumbling(10)
    windows.closed()  # final results: each window once, when stream time passes its end

    @app.agent(words)
    async def count(stream: Any) -> None:
        async for word, _ in stream.items():
            counts[word] += 1
            windows[word] += 1
            await counted.send(key=word, value=counts[word])  # in the event's task's transaction

    return app, counts, windows, counted


async def test_two_workers_of_one_app_share_the_work_each_with_its_own_state(tmp_path):
    app, counts, windows, counted = make_app()
    url = testing.memory_url()
    broker = testing.broker_for(url)
    async with testing.running(app, broker=url, data_dir=str(tmp_path / "a")) as first, \
            testing.running(app, broker=url, data_dir=str(tmp_path / "b")) as second:
        await testing.eventually(lambda: bool(first.tasks.active) and bool(second.tasks.active), 10)
        assert set(first.tasks.active).isdisjoint(second.tasks.active)
        for i, word in enumerate(WORDS):
            await app.topics["words"].send(key=word, value=word, timestamp_ms=1000 * i)
        truth = Counter(WORDS)
        await testing.eventually(lambda: dict(counts.items()) == truth, 10)  # both workers' partitions
        await testing.eventually(lambda: sum(
            len(p) for p in broker.topics.get("counted", [])) >= len(WORDS), 10)
        assert first.failure is None
        assert second.failure is None
        assert first.tables is not None
        assert second.tables is not None
        assert first.timed_topics == {"words"} == second.timed_topics
        await first.checkpoint()
        await second.checkpoint()
        closed = broker.topics.get(windows.closed().name, [])
        closed_partitions = {number for number, records in enumerate(closed) if records}
        owners = set(first.tasks.active) | set(second.tasks.active)
        assert closed_partitions
        assert closed_partitions <= owners
        assert closed_partitions & set(first.tasks.active), "the first worker closes its windows too"
        assert closed_partitions & set(second.tasks.active)
    sent = Counter(record.key for partition in broker.topics["counted"] for record in partition)
    assert sent == Counter(counted.key_codec.encode(w) for w in WORDS), "every event's output, once"
