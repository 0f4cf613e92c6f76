"""`GET /metrics` on the in-memory broker: the text parses with prometheus-client's own parser, and its
counters equal what the test fed and what the agents did, computed here from the input (events per topic and
agent, records sent, dead letters, late events, timed events, checkpoints)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

import engine
from engine import testing

N = 400
POISON = {13, 77, 201}  # values the agent fails on: dead-lettered
LATE = 5  # events sent after stream time passed their window's end plus grace


def make_app(url: str) -> tuple[engine.App, Any]:
    app = engine.App("metrics", broker=url, store="memory://")
    numbers = app.topic("numbers", key_type=str, value_type=int)
    doubled = app.topic("doubled", key_type=str, value_type=int)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda v: v["ts"])
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    per_window = app.Table("per-window", default=int, key_type=str, value_type=int).tumbling(10, grace=1)
    per_window.closed()

    @app.agent(numbers)
    async def double(stream: Any) -> None:
        async for key, n in stream.items():
            if n in POISON:
                raise ValueError(f"poison {n}")
            counts[key] += 1
            await doubled.send(key=key, value=n * 2)

    @app.agent(clicks)
    async def click(stream: Any) -> None:
        async for page, _ in stream.items():
            per_window[page] += 1

    return app, counts


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_parse_and_count_what_was_processed(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="engine")
    url = testing.memory_url()
    app, counts = make_app(url)
    async with testing.running(app, data_dir=str(tmp_path), web_enabled=True, web_port=0) as worker, \
            aiohttp.ClientSession() as session:
        keys = [f"k{i % 7}" for i in range(N)]
        for i, key in enumerate(keys):
            await app.topics["numbers"].send(key=key, value=i)
        times = [*range(0, 40, 2), *([3] * LATE)]  # stream time 38 closed [0, 10) long ago (grace 1)
        for ts in times:
            await app.topics["clicks"].send(key="page", value={"ts": ts})
        good = Counter(k for i, k in enumerate(keys) if i not in POISON)
        await testing.eventually(lambda: dict(counts.items()) == good, 10)
        await testing.eventually(lambda: app.tables["per-window"].windowed.late_events == LATE, 10)
        # Stream time 38 with a grace of 1: [0, 10), [10, 20) and [20, 30) closed, [30, 40) not yet.
        await testing.eventually(lambda: app.tables["per-window"].windows_closed == 3, 10)
        await worker.checkpoint()

        async with session.get(f"http://{worker.placement.endpoint}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            found = samples(await response.text())
        async with session.get(f"http://{worker.placement.endpoint}/status") as response:
            status = await response.json()
    assert status["late_events"] == {"per-window": LATE}
    assert (status["app"], status["active"], status["recovering"]) == ("metrics", [0, 1, 2, 3], [])

    ready = [r.getMessage() for r in caplog.records if "ready:" in r.getMessage()]
    assert len(ready) == 1, "said once"
    assert ready[0].startswith("worker metrics ready: 4 partitions active (0,1,2,3), 0 standby; http://")

    def value(name: str, **labels: str) -> float:
        return found[(name, tuple(sorted(labels.items())))]

    assert value("engine_records_consumed_total", topic="numbers") == N
    assert value("engine_records_consumed_total", topic="clicks") == len(times)
    assert value("engine_agent_events_total", agent="double") == N
    assert value("engine_agent_events_total", agent="click") == len(times)
    assert value("engine_records_sent_total", topic="doubled") == N - len(POISON)
    assert value("engine_agent_dead_letters_total", agent="double") == len(POISON)
    assert value("engine_agent_dead_letters_total", agent="click") == 0
    assert value("engine_late_events_total", table="per-window") == LATE
    assert value("engine_windows_closed_total", table="per-window") == 3
    # One event in 32 is timed; a poison event's timing ends when its instance restarts, not counted.
    timed = value("engine_agent_event_seconds_count", agent="click")
    assert timed == len(times) // 32
    assert value("engine_agent_event_seconds_count", agent="double") <= N // 32
    assert value("engine_agent_event_seconds_count", agent="double") >= (N - 3 * 32) // 32
    assert value("engine_agent_event_seconds_bucket", agent="double", le="+Inf") == value(
        "engine_agent_event_seconds_count", agent="double")
    assert value("engine_checkpoint_seconds_count") >= 1
    assert value("engine_checkpoint_failures_total") == 0
    # Coalesced per checkpoint: at least one record per key, at most one per event.
    assert len(good) <= value("engine_changelog_records_total", table="counts") <= N
    assert value("engine_table_partitions", table="counts") == 4  # the memory broker's topics have 4
    assert value("engine_rebalances_total") >= 1
    assert value("engine_rebalance_stall_seconds_count") >= 1
    assert value("engine_tasks", kind="active") == 4
    assert value("engine_event_loop_lag_seconds_count") >= 1
    assert value("engine_python_allocated_blocks") > 10_000  # (the interpreter's: modules, the app, ...)
    assert [value("engine_consumer_lag", topic="numbers", partition=str(p)) for p in range(4)] == [0] * 4


async def test_metrics_show_what_the_rocksdb_stores_hold_of_their_memory_budget(tmp_path):
    """The stores' memtables and block cache are memory the process's own size does not explain: a worker
    whose RSS grows is told apart from its stores filling their budget (`store_memory`) by this gauge."""
    app = engine.App("store-memory", broker=testing.memory_url(), store="rocksdb://", store_memory=8 << 20)
    numbers = app.topic("numbers", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(numbers)
    async def count(stream: Any) -> None:
        async for key, _ in stream.items():
            counts[key] += 1

    async with testing.running(app, data_dir=str(tmp_path), web_enabled=True, web_port=0) as worker, \
            aiohttp.ClientSession() as session:
        for i in range(N):
            await numbers.send(key=f"k{i}", value=i)
        await testing.eventually(lambda: len(dict(counts.items())) == N, 10)
        await worker.checkpoint()  # the counts written to the stores, not yet flushed to files
        async with session.get(f"http://{worker.placement.endpoint}/metrics") as response:
            found = samples(await response.text())
    total = found[("engine_store_memory_bytes", (("part", "total"),))]
    memtables = found[("engine_store_memory_bytes", (("part", "memtables"),))]
    assert 0 < memtables <= total <= 8 << 20
