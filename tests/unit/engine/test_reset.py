"""`engine reset` on the in-memory broker: refused while a worker runs; the plan names every input partition
with its committed offset and target, the internal topics and the local stores; executed, the app run again
recomputes the same tables and closed windows from the start (or from a point in time)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

import engine
from engine import testing
from engine.events import TP
from engine.operations.reset import ResetRefused
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
