"""Fused pipelines (engine.fused) on the in-memory broker: records sent faster than the worker takes them, so
that its pipeline agents take them in batches of many (checked), and every table equal to what the test
computes from its own input, including the events an error policy dealt with."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

import engine
from engine import testing
from engine.streams.stream import Stream
from engine.testing import TestDriver
from engine.windows import WindowRange

KEYS = 37
EVENTS = [(f"k{i % KEYS}", i % 11, 1_000 + i * 250) for i in range(3_000)]  # (key, amount, event time ms)


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches fused pipelines took (a test knows it folded batches, not single events)."""
    sizes: list[int] = []
    take = Stream.take_batch

    async def recorded(self: Stream) -> list[Any]:
        events = await take(self)
        sizes.append(len(events))
        return events

    monkeypatch.setattr(Stream, "take_batch", recorded)
    return sizes


def make_app(name: str, **settings: Any) -> tuple[engine.App, Any]:
    app = engine.App(name, broker=testing.memory_url(), store="memory://", topic_partitions=4, **settings)
    events = app.topic("events", key_type=str, value_type=dict, timestamp=lambda v: v["ts"] / 1000)
    return app, events


async def send_all(events: Any) -> None:
    for key, amount, ts in EVENTS:
        await events.send(key=key, value={"amount": amount, "ts": ts, "group": f"g{amount % 4}"})


def contents(table: Any) -> dict[Any, Any]:
    return dict(table.items())


async def test_plain_aggregations_after_filter_and_map_fold_batches_to_the_exact_result(
        batch_sizes: list[int]) -> None:
    app, events = make_app("fused-plain")
    paid = app.stream(events).filter(lambda v: v["amount"] > 2)
    counts = paid.count("counts")
    sums = paid.sum("sums", lambda v: v["amount"])
    largest = paid.map(lambda v: v["amount"] * 10, value_type=int).reduce("largest", max)
    seen = app.stream(events).aggregate("seen", [], lambda acc, v: [*acc, v["ts"]][-3:])
    truth_counts: Counter[str] = Counter()
    truth_sums: dict[str, int] = defaultdict(int)
    truth_largest: dict[str, int] = {}
    truth_seen: dict[str, list[int]] = defaultdict(list)
    for key, amount, ts in EVENTS:
        truth_seen[key] = [*truth_seen[key], ts][-3:]
        if amount > 2:
            truth_counts[key] += 1
            truth_sums[key] += amount
            truth_largest[key] = max(truth_largest.get(key, 0), amount * 10)
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: contents(seen) == truth_seen, 20)
        await testing.eventually(lambda: contents(counts) == truth_counts, 5)
        assert contents(sums) == truth_sums
        assert contents(largest) == truth_largest
    assert max(batch_sizes) > 1


async def test_a_count_after_group_by_is_fused_downstream_of_the_repartition_topic(
        batch_sizes: list[int]) -> None:
    app, events = make_app("fused-grouped")
    per_group = app.stream(events).map(lambda v: {**v, "amount": v["amount"] + 1}).group_by(
        lambda v: v["group"], key_type=str).filter(lambda v: v["amount"] % 2 == 0).sum(
        "per-group", lambda v: v["amount"])
    truth: dict[str, int] = defaultdict(int)
    for _, amount, _ in EVENTS:
        if (amount + 1) % 2 == 0:
            truth[f"g{amount % 4}"] += amount + 1
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: contents(per_group) == truth, 20)
    assert max(batch_sizes) > 1


def windowing(pipeline: Any, kind: str) -> Any:
    """1-minute tumbling windows, or 1-minute windows hopping by 20 s, kept long enough to be read."""
    return pipeline.tumbling(60, expires=10**6) if kind == "tumbling" else pipeline.hopping(60, 20,
                                                                                          expires=10**6)


def window_sums(kind: str, events: list[tuple[str, int, int]]) -> dict[tuple[str, WindowRange], int]:
    """The ground truth of `windowing`'s sums of (key, amount, event time ms), computed here."""
    truth: dict[tuple[str, WindowRange], int] = defaultdict(int)
    for key, amount, ts in events:
        starts = ([ts // 60_000 * 60_000] if kind == "tumbling"
                  else [s for s in range(ts // 20_000 * 20_000 - 40_000, ts + 1, 20_000)
                        if s >= 0 and s <= ts < s + 60_000])
        for start in starts:
            truth[key, WindowRange.from_ms(start, start + 60_000)] += amount
    return truth


def by_window(totals: Any) -> dict[tuple[str, WindowRange], int]:
    return {(key, WindowRange.from_ms(start, start + 60_000)): value
            for (key, start), value in totals.table.items()}


@pytest.mark.parametrize("kind", ["tumbling", "hopping"])
async def test_fixed_windows_hold_every_window_of_every_event(kind: str, batch_sizes: list[int]) -> None:
    app, events = make_app(f"fused-{kind}")
    pipeline = app.stream(events).filter(lambda v: v["amount"] != 5)
    windowed = windowing(pipeline, kind)
    totals = windowed.sum(f"{kind}-sums", lambda v: v["amount"])
    truth = window_sums(kind, [(key, amount, ts) for key, amount, ts in EVENTS if amount != 5])
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: by_window(totals) == truth, 20)
    assert max(batch_sizes) > 1


async def test_an_event_a_step_fails_on_is_dead_lettered_and_the_rest_of_its_batch_counted(
        batch_sizes: list[int]) -> None:
    app, events = make_app("fused-dlq", agent_error_policy="dlq")

    def checked(value: dict[str, Any]) -> dict[str, Any]:
        if value["amount"] == 7 and value["ts"] % 3 == 0:
            raise ValueError(f"refused {value['ts']}")
        return value

    counts = app.stream(events).map(checked).count("checked")
    refused = [(key, ts) for key, amount, ts in EVENTS if amount == 7 and ts % 3 == 0]
    truth = Counter(key for key, amount, ts in EVENTS if not (amount == 7 and ts % 3 == 0))
    letters: list[tuple[str, bytes]] = []

    @app.agent(app.topic("fused-dlq-checked-aggregate-dlq", key_type=bytes, value_type=bytes), name="letters")
    async def collect(stream: Any) -> None:
        async for event in stream.events():
            letters.append((event.key.decode(), dict(event.headers)["engine-error"]))

    assert refused
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: len(letters) == len(refused), 20)
        await testing.eventually(lambda: contents(counts) == truth, 5)
    assert sorted(letters) == sorted((key, f"ValueError: refused {ts}".encode()) for key, ts in refused)
    assert max(batch_sizes) > 1


def test_an_event_an_aggregation_fails_on_stops_the_worker_under_the_stop_policy() -> None:
    app = engine.App("fused-stop", broker="memory://unused", agent_error_policy="stop")
    source = app.topic("in", key_type=str, value_type=int)
    app.stream(source).reduce("totals", lambda total, value: total + 100 // value)
    driver = TestDriver(app)
    try:
        driver.send(source, key="a", value=4)
        driver.send(source, key="a", value=5)
        assert driver.table("totals") == {"a": 4 + 20}
        with pytest.raises(engine.WorkerFailed, match="ZeroDivisionError"):
            driver.send(source, key="a", value=0)
    finally:
        driver.close()


async def test_a_group_by_send_that_fails_stops_the_worker_with_no_event_dead_lettered_or_sent_twice(
        batch_sizes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's send that fails (nothing of it enqueued: the producer failed, or found no room for its request
    timeout) is no event's fault: dead-lettering the run's first event would lose it, and taking the run
    again would meet the same failure. The worker stops with what failed; no event is dead-lettered; the
    repartition topic holds what went before, each once."""
    import asyncio

    from engine.errors import DeliveryFailed
    from engine.transport.memory import MemoryProducer

    send_many = MemoryProducer.send_many
    sends: list[int] = []

    async def failing_third(self: MemoryProducer, topic: str, records: Any) -> None:
        sends.append(len(records))
        if len(sends) == 3:
            raise DeliveryFailed("no room for a batch in 40 s (KafkaTimeoutError)")
        await send_many(self, topic, records)

    monkeypatch.setattr(MemoryProducer, "send_many", failing_third)
    app, events = make_app("fused-send-fails", agent_error_policy="dlq")
    app.stream(events).group_by(lambda v: v["group"], key_type=str).count("grouped")
    worker = engine.Worker(app, app.settings({"commit_interval": 0.05, "web_enabled": False}))
    await worker.start()
    await send_all(events)
    with pytest.raises(engine.WorkerFailed, match=r"forwarding events\[\d\] to 'fused-send-fails-grouped-0-"
                                                  r"repartition' failed \(DeliveryFailed: no room"):
        await asyncio.wait_for(worker.run_until_stopped(), 20)
    broker = testing.broker_for(app.settings().broker)
    repartition = broker.topics["fused-send-fails-grouped-0-repartition"]
    forwarded = [(record.key, record.value) for records in repartition for record in records]
    assert len(forwarded) == sends[0] + sends[1]
    assert len(forwarded) == len(set(forwarded)), "no event forwarded twice"
    assert not any(broker.topics.get("fused-send-fails-grouped-aggregate-dlq", [])), "no event dead-lettered"
    assert len(sends) == 3
    assert max(batch_sizes) > 1


async def test_a_record_too_large_to_forward_is_dead_lettered_and_the_rest_of_its_run_regrouped(
        batch_sizes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer refuses a run whose record is larger than it may send, before enqueuing any of it
    (RecordTooLarge: Kafka's send_many checks sizes first): the records before it go, its event goes to the
    error policy as one a step failed on, and the events after it are forwarded in the next run."""
    from engine.errors import RecordTooLarge
    from engine.transport.memory import MemoryProducer

    send_many = MemoryProducer.send_many

    async def refusing_large(self: MemoryProducer, topic: str, records: Any) -> None:
        for index, (_, value, _, _) in enumerate(records):
            if b'"large":true' in (value or b""):
                raise RecordTooLarge(f"a record for {topic!r} is too large", index)
        await send_many(self, topic, records)

    monkeypatch.setattr(MemoryProducer, "send_many", refusing_large)
    app, events = make_app("fused-large", agent_error_policy="dlq")
    large = {ts for _, amount, ts in EVENTS if amount == 7 and ts % 3 == 0}
    counts = app.stream(events).map(lambda v: {**v, "large": v["ts"] in large}).group_by(
        lambda v: v["group"], key_type=str).count("grouped")
    letters: list[bytes] = []

    dlq = app.topic("fused-large-grouped-aggregate-dlq", key_type=bytes, value_type=bytes)

    @app.agent(dlq, name="letters")
    async def collect(stream: Any) -> None:
        async for event in stream.events():
            letters.append(dict(event.headers)["engine-error"])

    truth = Counter(f"g{amount % 4}" for _, amount, ts in EVENTS if ts not in large)
    assert large
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: len(letters) == len(large), 20)
        await testing.eventually(lambda: contents(counts) == truth, 5)
    assert all(letter.startswith(b"RecordTooLarge: a record for") for letter in letters)
    assert max(batch_sizes) > 1


async def test_an_event_a_group_by_key_fails_on_is_dead_lettered_and_the_rest_regrouped(
        batch_sizes: list[int]) -> None:
    app, events = make_app("fused-dlq-key", agent_error_policy="dlq")

    def group(value: dict[str, Any]) -> str:
        if value["amount"] == 3 and value["ts"] % 7 == 0:
            raise KeyError(f"no group for {value['ts']}")
        return str(value["group"])

    counts = app.stream(events).filter(lambda v: v["amount"] > 0).group_by(group, key_type=str).count(
        "grouped")
    refused = [(key, ts) for key, amount, ts in EVENTS if amount == 3 and ts % 7 == 0]
    truth = Counter(f"g{amount % 4}" for _, amount, ts in EVENTS if amount > 0 and not (amount == 3
                                                                                      and ts % 7 == 0))
    letters: list[tuple[str, bytes]] = []

    @app.agent(app.topic("fused-dlq-key-grouped-aggregate-dlq", key_type=bytes, value_type=bytes),
               name="letters")
    async def collect(stream: Any) -> None:
        async for event in stream.events():
            letters.append((event.key.decode(), dict(event.headers)["engine-error"]))

    assert refused
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: len(letters) == len(refused), 20)
        await testing.eventually(lambda: contents(counts) == truth, 5)
    assert sorted(letters) == sorted((key, f"KeyError: 'no group for {ts}'".encode()) for key, ts in refused)
    assert max(batch_sizes) > 1


@pytest.mark.parametrize("kind", ["tumbling", "hopping"])
async def test_an_event_without_a_key_in_a_fixed_window_batch_is_dead_lettered_and_the_rest_counted(
        kind: str, batch_sizes: list[int]) -> None:
    app, events = make_app(f"fused-keyless-{kind}", agent_error_policy="dlq")
    pipeline = app.stream(events)
    windowed = windowing(pipeline, kind)
    totals = windowed.sum(f"{kind}-sums", lambda v: v["amount"])
    keyless = set(range(5, len(EVENTS), 97))  # (indexes of the events sent without a key)
    letters: list[bytes] = []

    @app.agent(app.topic(f"fused-keyless-{kind}-{kind}-sums-aggregate-dlq", key_type=bytes, value_type=bytes),
               name="letters")
    async def collect(stream: Any) -> None:
        async for event in stream.events():
            letters.append(dict(event.headers)["engine-error-type"])

    truth = window_sums(kind, [event for at, event in enumerate(EVENTS) if at not in keyless])
    async with testing.running(app):
        for at, (key, amount, ts) in enumerate(EVENTS):
            await events.send(key=None if at in keyless else key, value={"amount": amount, "ts": ts})
        await testing.eventually(lambda: len(letters) == len(keyless), 20)
        await testing.eventually(lambda: by_window(totals) == truth, 20)
    assert letters == [b"TableError"] * len(keyless)
    assert max(batch_sizes) > 1


@pytest.mark.parametrize("kind", ["tumbling", "hopping"])
async def test_an_event_a_step_fails_on_before_its_windows_is_dead_lettered_and_the_rest_of_its_run_counted(
        kind: str, batch_sizes: list[int]) -> None:
    """A fixed-window run goes through the steps event by event, each event current while its steps run
    (a step reading a table is routed by its own): the one a step fails on is dead-lettered, the events
    before it in its run are in their windows and those after it are taken again."""
    from engine.streams.current import current_event

    app, events = make_app(f"fused-step-{kind}", agent_error_policy="dlq")
    seen_as_current: list[bool] = []

    def checked(value: dict[str, Any]) -> dict[str, Any]:
        current = current_event()
        seen_as_current.append(current is not None and current.value is value)
        if value["amount"] == 3 and value["ts"] % 7 == 0:
            raise ValueError(f"refused {value['ts']}")
        return value

    pipeline = app.stream(events).map(checked)
    windowed = windowing(pipeline, kind)
    totals = windowed.sum(f"step-{kind}-sums", lambda v: v["amount"])
    refused = {ts for _, amount, ts in EVENTS if amount == 3 and ts % 7 == 0}
    letters: list[bytes] = []

    dead_letters = app.topic(f"fused-step-{kind}-step-{kind}-sums-aggregate-dlq", key_type=bytes,
                             value_type=bytes)

    @app.agent(dead_letters, name="letters")
    async def collect(stream: Any) -> None:
        async for event in stream.events():
            letters.append(dict(event.headers)["engine-error"])

    truth = window_sums(kind, [(key, amount, ts) for key, amount, ts in EVENTS if ts not in refused])
    assert refused
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: len(letters) == len(refused), 20)
        await testing.eventually(lambda: by_window(totals) == truth, 20)
    assert sorted(letters) == sorted(f"ValueError: refused {ts}".encode() for ts in refused)
    assert all(seen_as_current)
    assert max(batch_sizes) > 1


async def test_a_plain_folds_steps_and_aggregate_each_see_their_own_event_as_current(
        batch_sizes: list[int]) -> None:
    """A table read inside a step or an aggregate function is routed by the event being processed: the
    batch's fold makes each event current before its steps, as the agent path does."""
    from engine.streams.current import current_event

    app, events = make_app("fused-current")
    mismatched: list[Any] = []

    def checked(value: dict[str, Any]) -> dict[str, Any]:
        current = current_event()
        if current is None or current.value is not value:
            mismatched.append(("step", value))
        return {**value, "seen_in_step": True}

    def own(total: int, value: dict[str, Any]) -> int:
        current = current_event()
        if current is None or current.value["ts"] != value["ts"]:
            mismatched.append(("aggregate", value))
        return total + 1

    counted = app.stream(events).map(checked).aggregate("own", 0, own)
    truth = Counter(key for key, _, _ in EVENTS)
    async with testing.running(app):
        await send_all(events)
        await testing.eventually(lambda: contents(counted) == truth, 20)
    assert mismatched == []
    assert max(batch_sizes) > 1
