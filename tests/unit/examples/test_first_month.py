"""The five apps a data team writes in its first weeks (issue 53), rebuilt from the docs alone, each with its
driver test as an app's own suite holds it (the `engine_driver` fixture of engine's pytest plugin), each
checked against what the test computes from its own input: orders enriched from a customers topic with
tombstones; per-user clicks in 5-minute windows with final results and a late event; typed records with
malformed input; a pipeline next to the same agent; a table queried over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp

import engine
from engine import testing

T0 = 1_767_225_600  # a multiple of 300: 5-minute windows start at T0 + multiples of 300


def test_orders_are_enriched_from_a_customers_topic_and_a_tombstone_forgets_a_customer(engine_driver):
    app = engine.App("first-orders", topic_partitions=2)
    customers = app.Table("customers", source_topic=app.topic("customers", key_type=str, value_type=dict))
    orders = app.topic("orders", key_type=str, value_type=dict)  # keyed by customer id
    enriched = app.topic("enriched", key_type=str, value_type=dict)

    @app.agent(orders)
    async def enrich(stream: Any) -> None:
        async for customer_id, (order, customer) in stream.left_join(customers).items():
            await enriched.send(key=customer_id, value={
                "order": order["id"], "country": None if customer is None else customer["country"]})

    driver = engine_driver(app)
    driver.send("customers", key="ada", value={"country": "FR"})
    driver.send("customers", key="bob", value={"country": "NL"})
    driver.send(orders, key="ada", value={"id": 1})
    driver.send(orders, key="bob", value={"id": 2})
    driver.send("customers", key="ada", value=None)  # a tombstone: ada is forgotten
    driver.send(orders, key="ada", value={"id": 3})
    driver.send(orders, key="eve", value={"id": 4})  # never a customer
    assert sorted((r.value["order"], r.value["country"]) for r in driver.read(enriched)) == [
        (1, "FR"), (2, "NL"), (3, None), (4, None)]
    assert driver.table("customers") == {"bob": {"country": "NL"}}


def test_clicks_per_user_in_5_minute_windows_with_finals_and_a_late_event(engine_driver):
    app = engine.App("first-clicks", topic_partitions=1)  # (one partition: one stream time for all users)
    clicks = app.topic("clicks", key_type=str, value_type=dict, timestamp=lambda c: c["at"])
    per_user = app.stream(clicks).tumbling(300, grace=10, late_topic=True).count("clicks-per-user")
    finals = app.topic("finals", key_type=str, value_type=list)

    @app.agent(per_user.closed())
    async def report(stream: Any) -> None:
        async for (user, window), n in stream.items():
            await finals.send(key=user, value=[window.start, n])

    times = [("ada", 5), ("bob", 60), ("ada", 299), ("ada", 301), ("bob", 500), ("ada", 620)]
    driver = engine_driver(app)
    for user, at in times:
        driver.send(clicks, key=user, value={"at": T0 + at})
    late = {"at": T0 + 100}  # its window [T0, T0+300) closed at stream time T0+310
    driver.send(clicks, key="bob", value=late)
    expected = Counter((user, T0 + at // 300 * 300) for user, at in times)
    closed = {(user, start): n for (user, start), n in expected.items() if start + 300 + 10 <= T0 + 620}
    assert sorted((r.key, *r.value) for r in driver.read(finals)) == sorted(
        (user, start, n) for (user, start), n in closed.items())
    # (the late topic holds the records as read, raw bytes: docs/windows.md)
    assert [json.loads(r.value) for r in driver.read(f"{app.id}-clicks-per-user-late")] == [late]


@dataclass
class Payment:
    id: str
    amount: int


def test_typed_records_with_malformed_input_go_to_the_dead_letter_topic(engine_driver):
    app = engine.App("first-typed")
    payments = app.topic("payments", key_type=str, value_type=Payment)
    totals = app.Table("totals", default=int, key_type=str, value_type=int)

    @app.agent(payments)
    async def add(stream: Any) -> None:
        async for customer, payment in stream.items():
            totals[customer] += payment.amount

    driver = engine_driver(app)
    driver.send(payments, key="ada", value=Payment("1", 10))
    driver.send_raw(payments, b"ada", b'{"id": "2", "amount": "ten"}')  # a field of the wrong type
    driver.send_raw(payments, b"ada", b"{not json")
    driver.send(payments, key="ada", value=Payment("3", 5))
    assert driver.table("totals") == {"ada": 15}
    dead = driver.dlq(add)
    assert [d.value for d in dead] == [b'{"id": "2", "amount": "ten"}', b"{not json"]
    assert "amount" in dead[0].error


def test_a_pipeline_and_the_same_agent_give_the_same_table(engine_driver):
    app = engine.App("first-both", topic_partitions=2)
    words = app.topic("words", key_type=str, value_type=str)
    by_pipeline = app.stream(words).group_by(str.lower, name="lower", key_type=str).count("by-pipeline")
    by_agent = app.Table("by-agent", default=int, key_type=str, value_type=int)

    @app.agent(words)
    async def count(stream: Any) -> None:
        async for word, _ in stream.group_by(str.lower, name="agent-lower", key_type=str).items():
            by_agent[word] += 1  # (the new key: the table is partitioned like the repartition topic)

    text = ["The", "cat", "and", "THE", "dog", "and", "the", "bird"]
    driver = engine_driver(app)
    for word in text:
        driver.send(words, key=word, value=word)
    expected = dict(Counter(word.lower() for word in text))
    assert driver.table(by_pipeline.name) == expected
    assert driver.table("by-agent") == expected


async def test_a_table_is_queried_over_http():
    app = engine.App("first-http", broker=testing.memory_url(), store="memory://", topic_partitions=2)
    visits = app.topic("visits", key_type=str, value_type=int)
    per_page = app.Table("per-page", default=int, key_type=str, value_type=int)

    @app.agent(visits)
    async def count(stream: Any) -> None:
        async for page, n in stream.items():
            per_page[page] += n

    sent = [("home", 1), ("docs", 2), ("home", 3)]
    async with testing.running(app, web_enabled=True, web_port=0) as worker:
        for page, n in sent:
            await visits.send(key=page, value=n)
        base = f"http://{worker.placement.endpoint}"
        async with aiohttp.ClientSession() as http:
            async def value(page: str) -> Any:
                async with http.get(f"{base}/tables/per-page/{page}") as answer:
                    return answer.status, await answer.json()

            deadline = asyncio.get_running_loop().time() + 10  # (until the worker counted every visit)
            while (answer := await value("home"))[1].get("value") != 4:
                assert asyncio.get_running_loop().time() < deadline, answer
                await asyncio.sleep(0.01)
            assert answer[0] == 200
            assert (await value("docs"))[1]["value"] == 2
            assert (await value("nowhere"))[0] == 404
