"""Versioned tables (engine.tables.versioned) on the in-memory broker, against a model of Kafka Streams'
versioned store computed here from the updates alone: every write kept with its time, stream time the newest
time accepted, an update older than stream time minus the history late; the value as of a time is the
newest write at or before it (None for a deletion); older than stream time minus the history, only the
key's latest write answers, if it was by then."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

import engine
from engine import testing
from engine.errors import ConfigError, PartitionNotReady
from engine.events import TP
from engine.scope import running_as
from engine.streams.current import current_event
from engine.tables.keys import META_PREFIX, split_window_key
from engine.tables.versions import Version
from engine.testing import TestDriver
from engine.topology.declaration import declare
from engine.web.server import FORWARDED
from tests.unit.engine.table_join_helpers import expected
from tests.unit.engine.versioned_helpers import HISTORY, Model, S, random_updates, source_app, versioned_app


def check_against(model: Model, prices: Any) -> None:
    low = min(t for writes in model.writes.values() for t in writes) - 2 * S
    for key in ["s0", "s1", "s2", "s3", "none"]:
        assert prices.get(key) == model.latest(key), key
        assert (key in prices) == (model.latest(key) is not None)
        for at in range(low, model.stream_time + 2 * S, 250):  # type: ignore[operator]
            assert prices.as_of(key, at / S) == model.as_of(key, at), (key, at)
        assert prices.versions(key) == model.versions(key), key


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_versions_out_of_order_and_late_equal_the_model_and_a_restart_restores_them(tmp_path, store):
    url = testing.memory_url()
    updates_ = random_updates(7, 400)
    model = Model(HISTORY * S)
    for key, at, price in updates_:
        model.put(key, round(at * S), price)
    assert model.late > 10  # (the input has late updates, deletions and out-of-order ones)
    assert sum(1 for _, _, price in updates_ if price is None) > 20

    app, updates, prices, seen = versioned_app(url, store=store, data_dir=tmp_path / "a")
    async with testing.running(app) as worker:
        for key, at, price in updates_:
            await updates.send(key=key, value={"at": at, "price": price})
        await testing.eventually(lambda: len(seen) == len(updates_))
        check_against(model, prices)
        assert prices.late_events == model.late
        await worker.checkpoint()

    # The changelog holds exactly the versions kept (each written, the expired ones tombstoned after).
    changelog: dict[bytes, bytes | None] = {}
    for record in testing.broker_for(url).topics[prices.changelog().name][0]:
        changelog[record.key] = record.value
    stored = {(split_window_key(key)[0].decode().strip('"'), split_window_key(key)[1])
              for key, value in changelog.items() if value is not None and not key.startswith(META_PREFIX)}
    assert stored == model.kept()
    assert len(stored) < sum(len(w) for w in model.writes.values())  # (some expired)

    # A new worker (another data dir: nothing on disk) restores them from the changelog.
    app, _, prices, _ = versioned_app(url, store=store, data_dir=tmp_path / "b")
    async with testing.running(app):
        await testing.eventually(lambda: bool(app.tables["prices"].active))
        check_against(model, prices)


async def test_a_deletion_hides_older_versions_from_later_times_and_an_update_older_than_it_does_not_revive():
    url = testing.memory_url()
    app, updates, prices, seen = versioned_app(url, store="memory://")
    sent = [("a", 100, 1.0), ("a", 105, None), ("a", 103, 2.0), ("a", 108, 3.0)]
    async with testing.running(app):
        for key, at, price in sent:
            await updates.send(key=key, value={"at": at, "price": price})
        await testing.eventually(lambda: len(seen) == 4)
        assert [prices.as_of("a", t) for t in (99, 100, 102.999, 103, 104.5, 105, 107, 108, 200)] == [
            None, 1.0, 1.0, 2.0, 2.0, None, None, 3.0, 3.0]
        assert prices.versions("a") == [
            Version(1.0, 100, 103), Version(2.0, 103, 105), Version(3.0, 108, None)]
        assert prices.versions("a", 104, 107) == [Version(2.0, 103, 105)]
        assert prices["a"] == 3.0


def test_history_must_be_positive_and_times_are_seconds_or_datetimes():
    app = engine.App("bad", broker="memory://")
    with pytest.raises(ConfigError, match="history must be positive"):
        app.Table("t").versioned(history=0)
    table = app.Table("u").versioned(history=5)
    with pytest.raises(ConfigError, match=r"seconds .* or a datetime"):
        table.as_of("k", "yesterday")
    assert app.tables["u"].key_layout == "versioned"


async def test_a_stream_joined_with_a_versioned_table_finds_the_version_of_each_events_time():
    """Orders joined (inner and left) with prices after every price is in: each order with the price valid
    at its own time (of its value's `at`), none for an order older than the history or before any price."""
    url = testing.memory_url()
    app, updates, prices, seen = versioned_app(url, store="memory://")
    orders = app.topic("orders", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    inner: list[Any] = []
    left: list[Any] = []

    @app.agent(orders)
    async def price(stream: Any) -> None:
        async for order, found in stream.join(prices):
            inner.append((order["id"], found))

    @app.agent(app.topic("orders-too", key_type=str, value_type=dict, timestamp=lambda v: v["at"]))
    async def price_or_none(stream: Any) -> None:
        async for order, found in stream.left_join(prices):
            left.append((order["id"], found))

    updates_ = random_updates(3, 200)
    model = Model(HISTORY * S)
    for key, at, value in updates_:
        model.put(key, round(at * S), value)
    rng = random.Random(4)
    sent = [(n, f"s{rng.randrange(5)}", round(1085 + rng.random() * 17, 3)) for n in range(300)]
    async with testing.running(app):
        for key, at, price_ in updates_:
            await updates.send(key=key, value={"at": at, "price": price_})
        await testing.eventually(lambda: len(seen) == len(updates_))
        for n, key, at in sent:
            for topic in ("orders", "orders-too"):
                await app.topics[topic].send(key=key, value={"id": n, "at": at})
        await testing.eventually(lambda: len(left) == len(sent))
        await testing.eventually(lambda: len(inner) == sum(
            1 for _, key, at in sent if model.as_of(key, round(at * S)) is not None))
    expected = [(n, model.as_of(key, round(at * S))) for n, key, at in sent]
    assert sorted(left) == expected
    assert sorted(inner) == [(n, found) for n, found in expected if found is not None]
    assert 50 < len(inner) < len(sent)  # (some orders are older than the history or before any price)


def grace_app(url: str, commit_interval: float = 0.05) -> tuple[engine.App, Any, Any, list[Any], list[Any]]:
    """Prices (versioned, history 60 s) and orders joined with them with a grace of 5 s, left and inner."""
    app = engine.App("grace", broker=url, store="memory://", topic_partitions=1,
                     commit_interval=commit_interval)
    updates = app.topic("updates", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    orders = app.topic("orders", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    prices = app.Table("prices", key_type=str, value_type=float).versioned(history=60)
    left: list[Any] = []
    inner: list[Any] = []

    @app.agent(updates)
    async def keep(stream: Any) -> None:
        async for key, update in stream.items():
            prices[key] = update["price"]

    @app.agent(orders)
    async def price_or_none(stream: Any) -> None:
        async for order, found in stream.left_join(prices, grace=5):
            event = current_event()
            assert event is not None
            assert event.timestamp.timestamp() == order["at"]  # (the order's time, not the releasing one's)
            assert event.headers == (("order", str(order["id"]).encode()), ("none", None))  # (and headers)
            left.append((order["id"], event.key, found))

    @app.agent(app.topic("orders-too", key_type=str, value_type=dict, timestamp=lambda v: v["at"]))
    async def price(stream: Any) -> None:
        async for order, found in stream.join(prices, grace=5):
            inner.append((order["id"], found))

    return app, updates, orders, left, inner


async def test_a_join_with_grace_waits_for_the_tables_late_updates_and_emits_in_time_order_across_a_restart():
    """Step by step (each processed before the next): an order waits until stream time passes its time by the
    grace, then takes the price valid at its time, an update that came after it included; an order already
    that far behind is joined at once; waiting orders survive a restart (the buffer and its stream time)."""
    url = testing.memory_url()
    steps = [("updates", "a", 90, 1.0), ("orders", "a", 100, "o1"), ("updates", "a", 99, 2.0),
             ("orders", "a", 103, "o2"), ("orders", "b", 95, "o3"), ("orders", "a", 106, "o4"),
             "restart", ("updates", "a", 104, 3.0), ("orders", "a", 120, "o5")]
    left_all: list[Any] = []
    inner_all: list[Any] = []
    runs = [steps[:steps.index("restart")], steps[steps.index("restart") + 1:]]
    sent: Counter[str] = Counter()
    for run in runs:
        app, _, _, left, inner = grace_app(url)
        async with testing.running(app) as worker:
            for step in run:
                topic, key, at, value = step  # type: ignore[misc]
                names = ["updates"] if topic == "updates" else ["orders", "orders-too"]
                for name in names:
                    field = "price" if topic == "updates" else "id"
                    headers = [("order", str(value).encode()), ("none", None)] if topic == "orders" else None
                    await app.topics[name].send(key=key, value={"at": at, field: value}, headers=headers)
                    sent[name] += 1
                await committed(worker, url, app.id, sent)  # processed (the restart goes on from there)
        left_all += left
        inner_all += inner
    assert left_all == [("o3", "b", None), ("o1", "a", 2.0), ("o2", "a", 2.0), ("o4", "a", 3.0)]
    assert inner_all == [("o1", 2.0), ("o2", 2.0), ("o4", 3.0)]


async def committed(worker: Any, url: str, group: str, sent: Counter[str]) -> None:
    """Wait until the group committed every record `sent` (topic -> count, one partition each)."""
    groups = testing.broker_for(url).groups

    async def done() -> bool:
        await worker.checkpoint()
        offsets = groups[group].committed if group in groups else {}
        return all(offsets.get(TP(topic, 0), 0) >= count for topic, count in sent.items())

    for _ in range(500):
        if await done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not every record of {dict(sent)} was committed")


def test_table_joins_over_a_versioned_table_take_its_latest_values_and_ignore_updates_out_of_order():
    """A versioned table joined with a plain one, every way round: an update older than its key's latest
    (out of order, or late) changes no result, as Kafka Streams' joins of versioned tables drop them; after
    every update, each result is the join of the latest values (Model) with the plain table's rows."""
    app = engine.App("vjoins", broker="memory://unused", topic_partitions=1)
    updates = app.topic("updates", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    stock_in = app.topic("stock-in", key_type=str, value_type=int)
    prices = app.Table("prices", key_type=str, value_type=float).versioned(history=HISTORY)
    stock = app.Table("stock", key_type=str, value_type=int)

    @app.agent(updates)
    async def keep(stream: Any) -> None:
        async for key, update in stream.items():
            prices[key] = update["price"]  # (None: a deletion)

    @app.agent(stock_in)
    async def count(stream: Any) -> None:
        async for key, amount in stream.items():
            if amount < 0:
                del stock[key]
            else:
                stock[key] = amount

    feed = app.topic("feed", key_type=str, value_type=float)
    fed = app.Table("fed", source_topic=feed).versioned(history=HISTORY)  # (the same versions, from a topic)
    joins = {"inner": prices.join(stock), "left": prices.left_join(stock), "outer": prices.outer_join(stock),
             "stock-left": stock.left_join(prices), "fed-left": fed.left_join(stock),
             "stock-fed": stock.outer_join(fed)}
    model = Model(HISTORY * S)
    rows: dict[str, int] = {}
    rng = random.Random(11)
    with TestDriver(app) as driver:
        for key, at, price in random_updates(3, 160):
            if rng.random() < 0.3:
                amount = rng.randrange(-2, 9)
                driver.send(stock_in, key=key, value=amount)
                if amount < 0:
                    rows.pop(key, None)
                else:
                    rows[key] = amount
            before = {how: driver.table(joined.name) for how, joined in joins.items()}
            driver.send(updates, key=key, value={"at": at, "price": price})
            driver.send(feed, key=key, value=price, timestamp_ms=round(at * S))
            out_of_order = bool(model.writes.get(key)) and at * S < max(model.writes[key])
            model.put(key, round(at * S), price)
            latest = {k: v for k in model.writes if (v := model.latest(k)) is not None}
            for how, joined in joins.items():
                found = driver.table(joined.name)
                if how.startswith("stock-"):
                    assert found == expected(rows, latest, "left" if how == "stock-left" else "outer")
                elif how == "fed-left":
                    assert found == expected(latest, rows, "left")
                else:
                    assert found == expected(latest, rows, how), (how, key, at)
                if out_of_order:
                    assert found == before[how]
        assert model.late > 0
        assert len(latest) >= 2


def test_grace_needs_a_versioned_table():
    app = engine.App("no-grace", broker="memory://")
    plain = app.Table("plain", key_type=str)

    @app.agent(app.topic("x"))
    async def join(stream: Any) -> None:
        async for _ in stream.join(plain, grace=5):
            pass

    assert "only a versioned table's can" in (declare(app).agents["join"].undeclared or "")


async def test_queries_as_of_and_version_ranges_are_answered_by_any_worker_and_from_a_standby(tmp_path):
    """Two workers with standbys: every key's latest value, its value as of a time and its versions in a
    range, asked of either worker (forwarded to the owner) and, with stale=ok, of the standby's."""
    url = testing.memory_url()
    app = engine.App("versions-web", broker=url, topic_partitions=4, commit_interval=0.05)
    updates = app.topic("updates", key_type=str, value_type=dict, timestamp=lambda v: v["at"])
    prices = app.Table("prices", key_type=str, value_type=float).versioned(history=1000)
    plain = app.Table("plain", key_type=str, value_type=int)

    @app.agent(updates)
    async def keep(stream: Any) -> None:
        async for key, update in stream.items():
            prices[key] = update["price"]
            plain[key] = 1

    history = {f"s{n}": [(1000 + 10 * v + n, float(100 * n + v)) for v in range(3)] for n in range(8)}
    options = {"broker": url, "web_enabled": True, "web_port": 0, "standby_replicas": 1, "store": "memory://"}
    async with testing.running(app, data_dir=str(tmp_path / "a"), **options) as first, \
            testing.running(app, data_dir=str(tmp_path / "b"), **options) as second, \
            aiohttp.ClientSession() as session:
        def placed(worker: Any) -> bool:
            current = worker.placement.current
            return current is not None and len(current.owners) == 4 and bool(worker.tasks.standby)

        await testing.eventually(lambda: placed(first) and placed(second), 10)
        for key, versions in history.items():
            for at, price in versions:
                await updates.send(key=key, value={"at": at, "price": price})
        await testing.eventually(lambda: all(prices.get(k) == v[-1][1] for k, v in history.items()), 10)
        await first.checkpoint()
        await second.checkpoint()

        async def get(endpoint: str, path: str, **headers: str) -> tuple[int, Any]:
            async with session.get(f"http://{endpoint}{path}", headers=headers) as response:
                return response.status, await response.json()

        endpoints = [first.placement.endpoint, second.placement.endpoint]
        for asked in endpoints:
            for key, versions in history.items():
                (t0, p0), (t1, p1), (t2, p2) = versions
                assert (await get(asked, f"/tables/prices/{key}"))[1]["value"] == p2
                assert (await get(asked, f"/tables/prices/{key}?as_of={t1 + 1}"))[1]["value"] == p1
                status, body = await get(asked, f"/tables/prices/{key}?as_of={t0 - 1}")
                assert (status, body["error"]) == (404, "no such key")
                status, body = await get(asked, f"/tables/prices/{key}?from={t0 + 1}&to={t1}")
                assert (status, body["versions"]) == (200, [{"value": p0, "valid_from": t0, "valid_to": t1},
                                                            {"value": p1, "valid_from": t1, "valid_to": t2}])
                status, body = await get(asked, f"/tables/prices/{key}?from={t2}")
                assert body["versions"] == [{"value": p2, "valid_from": t2, "valid_to": None}]
                naive_utc = datetime.fromtimestamp(t1, UTC).replace(tzinfo=None).isoformat()  # (a zone: UTC)
                assert (await get(asked, f"/tables/prices/{key}?as_of={naive_utc}"))[1]["value"] == p1
            for path, error in [("/tables/prices/s1?window=all", "versioned: no window="),
                                ("/tables/prices/s1?as_of=1&from=2", "as_of= asks for one value"),
                                ("/tables/prices/s1?as_of=noon", "as_of must be a time"),
                                ("/tables/prices/s1?as_of=inf", "as_of must be a time within"),
                                ("/tables/prices/s1?as_of=nan", "as_of must be a time within"),
                                ("/tables/prices/s1?from=2&to=1", "from (2) is after to (1)"),
                                ("/tables/plain/s1?as_of=1", "not versioned")]:
                status, body = await get(asked, path)
                assert status == 400
                assert error in body["error"], (path, body)

        with running_as(first):  # as code of the first worker asks, from Python: here, or of the owner
            for key, versions in history.items():
                (t0, p0), (t1, p1), (t2, p2) = versions
                assert await prices.query(key) == p2
                assert await prices.query(key, at=t1 + 1) == p1
                assert await prices.query(key, since=t0 + 1, until=t1) == [Version(p0, t0, t1),
                                                                          Version(p1, t1, t2)]
                assert await prices.query(key, since=t2 + 5_000) == [Version(p2, t2, None)]
                with pytest.raises(KeyError):
                    await prices.query(key, at=t0 - 1)

        at = first.placement.endpoint
        elsewhere = [k for k in history if app.tables["prices"].locate_key(k)[1] in second.tasks.active]
        assert elsewhere
        for key in elsewhere:
            expected = {"value": history[key][1][1], "stale": True, "worker": at}

            async def stale(key: str = key) -> dict[str, Any]:
                _, body = await get(at, f"/tables/prices/{key}?as_of={history[key][1][0]}&stale=ok",
                                         **{FORWARDED: "t"})
                return {name: body.get(name) for name in ("value", "stale", "worker")}

            for _ in range(200):
                if await stale() == expected:
                    break
                await asyncio.sleep(0.05)
            assert await stale() == expected


async def test_a_versioned_table_over_a_source_topic_equals_the_model_joins_and_is_restored_from_its_topic(
        tmp_path):
    """Each record of the topic a version at its timestamp: out of order, late (counted, not stored) and
    deletions as the model says; a stream joined as of its events' times; a worker with nothing on disk
    restores the same versions from the topic; agents cannot write the table."""
    url = testing.memory_url()
    updates_ = random_updates(9, 300)
    model = Model(HISTORY * S)
    for key, at, price in updates_:
        model.put(key, round(at * S), price)
    assert model.late > 5
    rng = random.Random(2)
    sent = [(n, f"s{rng.randrange(5)}", round(1140 + rng.random() * 12, 3)) for n in range(100)]

    app, feed, prices, joined = source_app(url, tmp_path / "a")
    async with testing.running(app) as worker:
        for key, at, price in updates_:
            await feed.send(key=key, value=price, timestamp_ms=round(at * S))

        def caught_up() -> bool:
            try:
                check_against(model, prices)
            except (AssertionError, PartitionNotReady):
                return False
            return True

        await testing.eventually(caught_up)
        assert prices.late_events == model.late
        for n, key, at in sent:
            await app.topics["orders"].send(key=key, value={"id": n, "at": at})
        await testing.eventually(lambda: len(joined) == len(sent))
        assert sorted(joined) == [(n, model.as_of(key, round(at * S))) for n, key, at in sent]
        assert sum(1 for _, found in joined if found is not None) > 30
        with pytest.raises(ConfigError, match="its versions are that topic's records"):
            prices["s1"] = 1.0
        await worker.checkpoint()

    app, _, prices, _ = source_app(url, tmp_path / "b")
    async with testing.running(app):
        await testing.eventually(lambda: bool(app.tables["prices"].active))
        check_against(model, prices)


async def test_a_none_is_a_deletion_the_latest_version_answers_past_the_history_and_grace_fits_the_history():
    url = testing.memory_url()
    app, updates, prices, seen = versioned_app(url, store="memory://")
    sent = [("a", 100, 1.0), ("b", 100, 5.0), ("b", 200, None), ("a", 300, 2.0), ("c", 400, 3.0),
            ("c", 401, None)]
    async with testing.running(app) as worker:
        for key, at, price in sent:
            await updates.send(key=key, value={"at": at, "price": price})
        await testing.eventually(lambda: len(seen) == len(sent))
        await worker.checkpoint()
        # stream time 401, history 10 s: 350 is past the history; a's latest (300) began by then, b's
        # latest is a deletion, c's latest began later
        assert [prices.as_of(k, 350) for k in "abc"] == [2.0, None, None]
        assert prices.as_of("a", 250) is None  # (a's version of 100 s expired: nothing answers then)
        assert "c" not in prices
    longer = engine.App("grace-long", broker=url, store="memory://")
    kept = longer.Table("prices", key_type=str, value_type=float).versioned(history=HISTORY)

    @longer.agent(longer.topic("sales", key_type=str, value_type=dict))
    async def price(stream: Any) -> None:
        async for _ in stream.join(kept, grace=HISTORY + 1):
            pass

    assert "must not be longer than versioned table 'prices'" in (declare(longer).agents["price"].undeclared
                                                                   or "")


async def test_an_event_that_waits_where_one_just_left_keeps_the_first_ones_tombstone_across_a_restart():
    """E1 (k at 100 s) is stored; E2 (j at 105 s) releases it (a tombstone pending); E3 (k at 100 s again)
    comes before the next checkpoint, waits where E1 was and is released at once. After a restart, a later
    event releases what still waits: neither E1 nor E3 again."""
    url = testing.memory_url()
    sent: Counter[str] = Counter()
    joined: list[Any] = []
    runs = [([("k", 100, "E1"), "checkpoint", ("j", 105, "E2"), ("k", 100, "E3")], 2),
            ([("x", 200, "E4")], 1)]
    for run, results in runs:
        app, _, _, left, _ = grace_app(url, commit_interval=3600)
        async with testing.running(app) as worker:
            for step in run:
                if step == "checkpoint":
                    await committed(worker, url, app.id, sent)
                    continue
                key, at, name = step  # type: ignore[misc]
                await app.topics["orders"].send(key=key, value={"at": at, "id": name},
                                                headers=[("order", name.encode()), ("none", None)])
                sent["orders"] += 1
            await testing.eventually(lambda left=left, results=results: len(left) >= results)
            await committed(worker, url, app.id, sent)
        joined += [order for order, _, _ in left]
    assert joined == ["E1", "E3", "E2"]


def test_pipelines_join_a_versioned_table_as_of_each_orders_time_and_window_the_results_by_it():
    """`app.stream(orders).join(prices, grace=)`: each order priced as of its own time once the grace passed
    it, then windowed by that time (not the time of the order that released it); a left join without grace
    keeps the orders before any price with None."""
    app = engine.App("vpipes", broker="memory://unused", topic_partitions=1)
    feed = app.topic("feed", key_type=str, value_type=float)
    orders = app.topic("orders", key_type=str, value_type=int)
    prices = app.Table("prices", source_topic=feed).versioned(history=3600)
    revenue = (app.stream(orders).join(prices, grace=5).map(lambda pair: pair[0] * pair[1])
               .tumbling(10, grace=5, expires=3600).sum("revenue"))
    with pytest.raises(ConfigError, match=r"a window after a join with grace=5 needs a grace of at least as "
                                          r"much \(it has 4\)"):
        app.stream(orders).join(prices, grace=5).tumbling(10, grace=4)
    unpriced = app.stream(orders).left_join(prices).filter(lambda pair: pair[1] is None).count("unpriced")
    rng = random.Random(6)
    model = Model(3600 * S)
    with TestDriver(app) as driver:
        for n in range(60):
            key, at = f"s{rng.randrange(3)}", 1_000 * S + n * 500 - rng.randrange(0, 3_000)
            price = float(rng.randrange(1, 50))
            driver.send(feed, key=key, value=price, timestamp_ms=at)
            model.put(key, at, price)
        sent = [(f"s{rng.randrange(4)}", 990 * S + n * 250 - rng.randrange(0, 4_000), rng.randrange(1, 9))
                for n in range(160)]
        for key, at, qty in sent:
            driver.send(orders, key=key, value=qty, timestamp_ms=at)
        horizon = max(at for _, at, _ in sent) - 5 * S  # (the orders within the grace of the last still wait)
        sums: dict[tuple[str, int], float] = {}
        for key, at, qty in sent:
            price = model.as_of(key, at)
            if at <= horizon and price is not None:
                window = at - at % (10 * S)
                sums[key, window] = sums.get((key, window), 0) + qty * price
        assert {(key, round(window.start * S)): value for (key, window), value
                in driver.table("revenue").items()} == sums
        assert revenue.late_events == 0
        lonely: dict[str, int] = {}
        for key, at, _ in sent:
            if model.as_of(key, at) is None:
                lonely[key] = lonely.get(key, 0) + 1
        assert driver.table(unpriced.name) == lonely
        assert "s3" in lonely  # (a symbol without prices)
        assert len(sums) >= 8


def test_a_versioned_tables_changes_are_its_versions_with_none_for_a_deletion():
    app, updates, prices, _ = versioned_app("memory://unused", name="vchanges")
    seen: list[Any] = []

    @app.agent(prices.changes())
    async def follow(stream: Any) -> None:
        async for version, value in stream.items():
            seen.append((version, value))

    with TestDriver(app) as driver:
        for at, price in [(100, 1.0), (105, None), (103, 2.5), (120, 3.0)]:  # (the last expires 100 and 103)
            driver.send(updates, key="a", value={"at": at, "price": price})
    assert seen[:4] == [(("a", 100), 1.0), (("a", 105), None), (("a", 103), 2.5), (("a", 120), 3.0)]
    assert sorted(seen[4:]) == [(("a", 100), None), (("a", 103), None)]  # (expired: they end by 110)
