"""A stream joined with a table over a source topic, processed from a backlog (everything written before the
worker starts), equals what a live run gives: each payment sees the profile version of its own time (the
newest written at or before it), not the last one. Ground truth computed here from the records."""

from __future__ import annotations

from typing import Any

import engine
from engine import testing

CUSTOMERS = 8


def backlog() -> tuple[list[tuple[str, str, int, int]], dict[int, int | None]]:
    """Records in time order: ("profile", customer, version, ts) or ("payment", customer, id, ts), and the
    version each payment must see (None: no profile yet)."""
    records: list[tuple[str, str, int, int]] = []
    versions: dict[str, int] = {}
    expected: dict[int, int | None] = {}
    ts = 1_000_000
    for i in range(1200):
        customer = f"c{(i * 7) % CUSTOMERS}"
        ts += 10 if i % 13 else 0  # now and then two records of one millisecond: the table's goes first
        if i % 5 == 0:
            versions[customer] = versions.get(customer, 0) + 1
            records.append(("profile", customer, versions[customer], ts))
        else:
            records.append(("payment", customer, i, ts))
            expected[i] = versions.get(customer)
    return records, expected


def make_app() -> tuple[engine.App, list[tuple[int, int | None]]]:
    app = engine.App("backlog-join")
    payments = app.topic("payments", key_type=str, value_type=int)
    profiles = app.Table("profiles", source_topic=app.topic("profiles", key_type=str, value_type=int))
    seen: list[tuple[int, int | None]] = []

    @app.agent(payments)
    async def enrich(stream: Any) -> None:
        async for payment, version in stream.left_join(profiles):
            seen.append((payment, version))

    return app, seen


async def test_a_join_over_a_backlog_sees_each_events_own_table_version(tmp_path):
    app, seen = make_app()
    url = testing.memory_url()
    broker = testing.broker_for(url)
    records, expected = backlog()
    codec = app.topics["payments"].key_codec, app.topics["payments"].value_codec
    broker.create_topic("payments", 4)
    broker.create_topic("profiles", 4, {"cleanup.policy": "compact"})
    for kind, customer, number, ts in records:
        topic = "payments" if kind == "payment" else "profiles"
        broker.append(topic, codec[0].encode(customer), codec[1].encode(number), (), None, timestamp_ms=ts)
    async with testing.running(app, broker=url, data_dir=str(tmp_path)):
        await testing.eventually(lambda: len(seen) == len(expected), 20)
    assert dict(seen) == expected
    assert any(v is not None and v > 1 for v in expected.values()), "the profiles change while payments flow"


def make_stock_app() -> tuple[engine.App, list[tuple[str, int]]]:
    """Two agents keep one table from two topics (the inventory example's shape): `sell` sees the stock that
    the shipments and sales before it left."""
    app = engine.App("backlog-stock")
    shipments = app.topic("shipments", key_type=str, value_type=int)
    sales = app.topic("sales", key_type=str, value_type=int)
    stock = app.Table("stock", default=int, key_type=str, value_type=int)
    seen: list[tuple[str, int]] = []

    @app.agent(shipments)
    async def receive(stream: Any) -> None:
        async for sku, quantity in stream.items():
            stock[sku] += quantity

    @app.agent(sales)
    async def sell(stream: Any) -> None:
        async for sku, quantity in stream.items():
            stock[sku] -= quantity
            seen.append((sku, stock[sku]))

    return app, seen


async def test_agents_that_share_a_table_see_a_backlog_in_timestamp_order(tmp_path):
    app, seen = make_stock_app()
    url = testing.memory_url()
    broker = testing.broker_for(url)
    codecs = app.topics["sales"].key_codec, app.topics["sales"].value_codec
    broker.create_topic("shipments", 4)
    broker.create_topic("sales", 4)
    stock: dict[str, int] = {}
    expected: list[tuple[str, int]] = []
    ts = 1_000_000
    for i in range(900):  # shipments now and then, sales between: what each sale leaves depends on order
        sku = f"sku-{(i * 5) % 6}"
        ts += 10
        kind, quantity = ("shipments", 30) if i % 10 == 0 else ("sales", 1 + i % 3)
        stock[sku] = stock.get(sku, 0) + (quantity if kind == "shipments" else -quantity)
        if kind == "sales":
            expected.append((sku, stock[sku]))
        broker.append(kind, codecs[0].encode(sku), codecs[1].encode(quantity), (), None, timestamp_ms=ts)
    async with testing.running(app, broker=url, data_dir=str(tmp_path)):
        await testing.eventually(lambda: len(seen) == len(expected), 20)
    per_sku = {sku: [left for s, left in seen if s == sku] for sku in stock}
    assert per_sku == {sku: [left for s, left in expected if s == sku] for sku in stock}
