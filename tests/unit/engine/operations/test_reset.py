"""`engine reset` on the in-memory broker: refused while a worker runs; the plan names every input partition
with its committed offset and target, the internal topics and the local stores; executed, the app run again
recomputes the same tables and closed windows from the start (or from a point in time)."""

from __future__ import annotations

import re
import uuid
from collections import Counter

import pytest

import engine
from engine import testing
from engine.errors import ResetRefused
from engine.events import TP
from engine.tools import ResetTarget, execute_reset, plan_reset
from engine.transport import open_transport

T0 = 1_700_000_000  # seconds of event time


def counting_app(app_id: str, guarantee: str = "at_least_once"):
    app = engine.App(app_id, processing_guarantee=guarantee)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(60, expires=3600)
    per_minute.closed()

    @app.agent(clicks)
    async def count(stream):
        async for user, _ in stream.items():
            counts[user] += 1
            per_minute[user] += 1

    return app, clicks, counts


CLICKS = [(f"u{i % 5}", {"at": T0 + i * 7}) for i in range(120)] + [(f"u{i}", {"at": T0 + 10_000})
                                                                     for i in range(5)]


async def run_once(app, clicks, counts, settings: dict, sent: list) -> tuple[dict, Counter]:
    """Run the app until every click is counted (sending `sent` first); return the counts and the closed
    windows as read from the broker."""
    async with testing.running(app, **settings):
        for user, value in sent:
            await clicks.send(key=user, value=value)
        truth = Counter(user for user, _ in CLICKS)
        await testing.eventually(lambda: dict(counts.items()) == dict(truth))
        closed = app.tables["per-minute"].windowed.closed()
        broker = open_transport(settings["broker"]).broker  # type: ignore[attr-defined]
        await testing.eventually(lambda: len(broker.topics.get(closed.name, [[]])[0]) > 0)
        windows = Counter()
        for partition in broker.topics[closed.name]:
            for record in partition:
                windows[record.key] += int(record.value)
        return dict(counts.items()), windows


async def test_a_reset_app_recomputes_the_same_results_and_is_refused_while_running(tmp_path):
    app_id = f"reset-{uuid.uuid4().hex[:6]}"
    app, clicks, counts = counting_app(app_id, "exactly_once")  # it keeps a worker id in the data dir
    settings = {"broker": f"memory://{app_id}", "store": "rocksdb://", "data_dir": tmp_path}
    first_counts, first_windows = await run_once(app, clicks, counts, settings, CLICKS)

    async with testing.running(app, **settings):
        with pytest.raises(ResetRefused, match="member"):
            await plan_reset(app, app.settings(settings))

    plan = await plan_reset(app, app.settings(settings))
    sources = {tp for tp in plan.offsets if tp.topic == "clicks"}
    assert len(sources) == 4
    assert all(then == 0 for _, then in plan.offsets.values())
    assert sum(now or 0 for now, _ in plan.offsets.values()) == len(CLICKS), "committed: every click"
    assert set(plan.deleted) == {f"{app_id}-counts-changelog", f"{app_id}-per-minute-changelog",
                                 f"{app_id}-per-minute-closed", f"{app_id}-replies"}
    assert {p.name for p in plan.local_state} == {"counts", "per-minute"}
    assert "clicks[0]:" in "\n".join(plan.lines())

    await execute_reset(plan, app.settings(settings))
    admin = open_transport(settings["broker"]).admin()
    assert all(offset == 0 for tp, offset in (await admin.committed(app_id)).items() if tp.topic == "clicks")
    assert not set(plan.deleted) & set(await admin.describe_topics())
    assert not any(p.exists() for p in plan.local_state)
    assert (tmp_path / app_id / "worker-id").exists(), "the worker's identity stays"

    second_counts, second_windows = await run_once(app, clicks, counts, settings, [])
    assert (second_counts, second_windows) == (first_counts, first_windows)


async def test_a_reset_to_a_point_in_time_and_by_a_shift_stays_inside_each_log(tmp_path):
    app_id = f"reset-{uuid.uuid4().hex[:6]}"
    app, clicks, counts = counting_app(app_id)
    settings = {"broker": f"memory://{app_id}", "store": "memory://"}
    async with testing.running(app, **settings):
        for i, (user, value) in enumerate(CLICKS):
            await clicks.send(key=user, value=value, timestamp_ms=(T0 + i) * 1000)
        await testing.eventually(lambda: sum(v for _, v in counts.items()) == len(CLICKS))
    middle = (T0 + 60) * 1000
    at = await plan_reset(app, app.settings(settings), ResetTarget(timestamp_ms=middle))
    committed = {tp: now or 0 for tp, (now, _) in at.offsets.items()}  # None: a partition without clicks
    broker = open_transport(settings["broker"]).broker  # type: ignore[attr-defined]
    ends = {tp: len(broker.topics["clicks"][tp.partition]) for tp in at.offsets}
    assert committed == ends, "the worker committed every click"
    for tp, (_, then) in at.offsets.items():
        records = broker.topics["clicks"][tp.partition]
        assert then == next((r.offset for r in records if r.timestamp >= middle), len(records))
    back = await plan_reset(app, app.settings(settings), ResetTarget(shift_by=-10))
    assert {tp: then for tp, (_, then) in back.offsets.items()} == {tp: max(0, n - 10)
                                                                    for tp, n in committed.items()}
    ahead = await plan_reset(app, app.settings(settings), ResetTarget(shift_by=1000))
    assert {tp: then for tp, (_, then) in ahead.offsets.items()} == ends, "never past the end"
    with pytest.raises(ResetRefused, match="not both"):
        await plan_reset(app, app.settings(settings), ResetTarget(timestamp_ms=middle, shift_by=1))
    assert TP("clicks", 0) in at.offsets


def word_count(app_id: str):
    """The README's word count: `split` sends to `words`, which `count` reads into a table."""
    app = engine.App(app_id)
    lines = app.topic("lines", value_type=str)
    words = app.topic("words", key_type=str, value_type=int)
    counts = app.Table("word-counts", default=int, key_type=str, value_type=int)

    @app.agent(lines, concurrency=2)
    async def split(stream):
        async for line in stream:
            for word in line.lower().split():
                await words.send(key=word, value=1)

    @app.agent(words)
    async def count(stream):
        async for word, n in stream.items():
            counts[word] += n

    return app, lines, counts


async def test_a_topic_the_app_writes_and_reads_goes_to_its_end_so_a_rerun_counts_once():
    app_id = f"wc-{uuid.uuid4().hex[:6]}"
    app, lines, counts = word_count(app_id)
    settings = {"broker": f"memory://{app_id}", "store": "memory://"}
    truth = {"alpha": 6, "beta": 3}
    async with testing.running(app, **settings):
        for _ in range(3):
            await lines.send(value="alpha beta alpha")
        await testing.eventually(lambda: dict(counts.items()) == truth)

    plan = await plan_reset(app, app.settings(settings))
    assert {name: what.kind for name, what in plan.classes.items()} == {"lines": "input",
                                                                        "words": "intermediate"}
    assert plan.classes["words"].why.startswith("written by agent split: `words.send` (test_reset.py:")
    broker = open_transport(settings["broker"]).broker  # type: ignore[attr-defined]
    assert {tp: then for tp, (_, then) in plan.offsets.items() if tp.topic == "words"} == {
        TP("words", p): len(records) for p, records in enumerate(broker.topics["words"])}, "to their end"
    assert all(then == 0 for tp, (_, then) in plan.offsets.items() if tp.topic == "lines")
    shown = "\n".join(plan.lines())
    assert "  words: intermediate (written by agent split: `words.send`" in shown
    assert "    words[0]: " in shown
    assert "  lines: input (nothing in the app writes it)" in shown

    await execute_reset(plan, app.settings(settings))
    group = broker.groups[app_id]

    def all_committed() -> bool:
        ends = {TP(name, p): len(records) for name in ("lines", "words")
                for p, records in enumerate(broker.topics[name])}
        return all(group.committed.get(tp, 0) == end for tp, end in ends.items())

    async with testing.running(app, **settings):
        await testing.eventually(lambda: sum(map(len, broker.topics["words"])) == 18)
        await testing.eventually(all_committed)  # every word of both runs processed, as far as it goes
        assert dict(counts.items()) == truth


async def test_a_send_the_plan_cannot_follow_is_refused_until_said():
    app_id = f"relay-{uuid.uuid4().hex[:6]}"
    app = engine.App(app_id)
    orders = app.topic("orders", value_type=dict)
    routed = app.topic("routed", value_type=dict)
    counts = app.Table("per-kind", default=int, key_type=str)
    targets = {"routed": routed}

    @app.agent(orders)
    async def route(stream):
        async for order in stream:
            out = targets[order["to"]]
            await out.send(value=order)

    @app.agent(routed)
    async def tally(stream):
        async for order in stream:
            counts[order["kind"]] += 1

    settings = app.settings({"broker": f"memory://{app_id}", "store": "memory://"})
    with pytest.raises(ResetRefused) as refused:
        await plan_reset(app, settings)
    assert re.fullmatch(
        r"the plan cannot tell which of the topics it reads the app writes too: its code sends where it does "
        r"not name the topic \(agent route: `out\.send` \(test_reset\.py:\d+\)\)\. An input topic "
        r"\(written by others\) goes back to its start, an intermediate one \(written by the app and read by "
        r"it again\) to its end, or its records would be processed twice: say which, with --input TOPIC or "
        r"--intermediate TOPIC, for each of orders, routed", str(refused.value))
    with pytest.raises(ResetRefused, match=r"for each of routed$"):
        await plan_reset(app, settings, inputs=["orders"])
    plan = await plan_reset(app, settings, inputs=["orders"], intermediate=["routed"])
    assert {name: (what.kind, what.why) for name, what in plan.classes.items()} == {
        "orders": ("input", "as said"), "routed": ("intermediate", "as said")}
    with pytest.raises(ResetRefused, match=r"does not read a topic 'rooted' of its own \(it reads orders, "
                                           r"routed\)"):
        await plan_reset(app, settings, intermediate=["rooted"])
    with pytest.raises(ResetRefused, match="both an input and an intermediate"):
        await plan_reset(app, settings, inputs=["routed"], intermediate=["routed"])
