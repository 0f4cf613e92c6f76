"""The engine side of the differential tests against Kafka Streams (test_against_kafka_streams.py): the same
aggregation as tests/kafka/reference/Reference.java, run by `engine worker -A
tests.integration.reference_apps:app`, configured by ITEST_APP, ITEST_TOPIC (and ITEST_RIGHT for a join),
ITEST_MODE, ITEST_A_MS and ITEST_B_MS (Reference.java's A and B). Keys and values are plain strings; event
time is the record's. Counts go to <app>-counts-closed, join results to <app>-joined ("left|right", and for
"versioned-join" "order|price", with ITEST_SOURCE the versioned table over the prices' topic itself); the
table joins' (ITEST_RIGHT and ITEST_ORDERS the other tables' topics) to <app>-<join>-changelog, the joins
named as Reference.java tags them."""

import asyncio
import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "reference"), commit_interval=0.2,
                 processing_guarantee=os.environ.get("ITEST_GUARANTEE", "exactly_once"))
source = app.topic(os.environ.get("ITEST_TOPIC", "input"), key_type=str, value_type=str)
MODE = os.environ.get("ITEST_MODE", "session-count")
A, B = (int(os.environ.get(name, "1000")) / 1000 for name in ("ITEST_A_MS", "ITEST_B_MS"))
DELAY = float(os.environ.get("ITEST_DELAY", "0"))  # seconds per result: slow enough to join mid-stream

if MODE == "session-count":
    results = app.stream(source).session(A, grace=B).count("counts")
elif MODE == "sliding-count":
    results = app.stream(source).sliding(A, grace=B).count("counts")
elif MODE == "left-join":
    right = app.topic(os.environ.get("ITEST_RIGHT", "right"), key_type=str, value_type=str)
    joined = app.topic(f"{app.id}-joined", key_type=str, value_type=str)

    @app.agent(source)
    async def join(stream):
        async for key, (left, other) in stream.left_join(right, within=A, grace=B).items():
            await joined.send(key=key, value=f"{left}|{'null' if other is None else other}")
            if DELAY:
                await asyncio.sleep(DELAY)
elif MODE == "table-joins":  # tables over source topics, a null value deleting (Kafka Streams' builder.table)
    left = app.Table("left-rows", source_topic=source)
    right_topic = app.topic(os.environ.get("ITEST_RIGHT", "right"), key_type=str, value_type=str)
    # (ITEST_GLOBAL_RIGHT: the right table a global one over its topic, which joins as a table over it does)
    right = (app.GlobalTable("right-rows", source_topic=right_topic) if os.environ.get("ITEST_GLOBAL_RIGHT")
             else app.Table("right-rows", source_topic=right_topic))
    orders = app.Table("orders", source_topic=app.topic(os.environ.get("ITEST_ORDERS", "orders"),
                                                        key_type=str, value_type=str))
    left.join(right, name="inner")
    left.left_join(right, name="left")
    left.outer_join(right, name="outer")
    orders.join(right, foreign_key=lambda row: row.split("/")[0], name="fk-inner")
    orders.left_join(right, foreign_key=lambda row: row.split("/")[0], name="fk-left")
elif MODE == "versioned-join" and os.environ.get("ITEST_SOURCE"):  # the same, the table over the topic itself
    prices = app.Table("prices", source_topic=app.topic(os.environ.get("ITEST_RIGHT", "right"), key_type=str,
                                                        value_type=str)).versioned(history=A)
    joined = app.topic(f"{app.id}-joined", key_type=str, value_type=str)
elif MODE == "versioned-join":  # ITEST_RIGHT: the prices, a versioned table (history A); grace B
    prices = app.Table("prices", key_type=str, value_type=str).versioned(history=A)
    joined = app.topic(f"{app.id}-joined", key_type=str, value_type=str)

    @app.agent(app.topic(os.environ.get("ITEST_RIGHT", "right"), key_type=str, value_type=str))
    async def keep(stream):
        async for key, price in stream.items():
            if price is None:
                del prices[key]  # (a tombstone: no price from its time on)
            else:
                prices[key] = price
else:
    raise ValueError(f"no mode {MODE!r}")
if MODE == "versioned-join":
    @app.agent(source)
    async def price_orders(stream):
        async for key, (order, price) in stream.left_join(prices, grace=B).items():
            await joined.send(key=key, value=f"{order}|{'null' if price is None else price}")
            if DELAY:
                await asyncio.sleep(DELAY)
if MODE.endswith("-count"):
    results.closed()  # final results on <app>-counts-closed
