"""Typed records through whole apps (the test driver: a real worker on an in-memory broker and registry):
pydantic models over JSON and dataclasses over Avro, through agents, tables (their changelogs in the same
format) and outputs; a record that does not fit is dead-lettered naming the field; records written by
Confluent's serializer under another subject are read once their schema is fetched."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import orjson
import pydantic
import pytest
from confluent_kafka.schema_registry._async.avro import AsyncAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

import engine
from engine.errors import EncodeError
from engine.schemas import Avro, Protobuf
from engine.schemas.registry import memory_client
from engine.testing import TestDriver
from tests.schema_registry.protos import Money, Order


class Payment(pydantic.BaseModel):
    who: str
    cents: int


class Balance(pydantic.BaseModel):
    who: str
    cents: int = 0
    payments: int = 0


@dataclass
class Sale:
    item: str
    qty: int


@dataclass
class Stock:
    sold: int = 0
    sales: int = 0


def payments_app(app_id: str) -> tuple[engine.App, engine.Topic, engine.Topic, object]:
    app = engine.App(app_id)
    payments = app.topic("payments", key_type=str, value_type=Payment)
    balances = app.topic("balances", key_type=str, value_type=Balance)
    table = app.Table("balance", key_type=str, value_type=Balance)

    @app.agent(payments)
    async def keep(stream):
        async for event in stream.events():
            payment = event.value
            old = table.get(payment.who) or Balance(who=payment.who)
            new = Balance(who=payment.who, cents=old.cents + payment.cents, payments=old.payments + 1)
            table[payment.who] = new
            await balances.send(key=payment.who, value=new)

    return app, payments, balances, keep


def test_pydantic_models_through_an_agent_a_table_and_an_output():
    app, payments, balances, keep = payments_app("pyd")
    sent = [("ada", 5), ("bob", 7), ("ada", 11), ("ada", -3), ("bob", 1)]
    with TestDriver(app) as driver:
        for who, cents in sent:
            driver.send(payments, key=who, value=Payment(who=who, cents=cents))
        driver.send_raw(payments, b"eve", orjson.dumps({"who": "eve", "cents": "lots"}))
        driver.send(payments, key="eve", value={"who": "eve", "cents": 4})  # plain data, validated on send
        truth: dict[str, tuple[int, int]] = {}
        for who, cents in [*sent, ("eve", 4)]:
            total, count = truth.get(who, (0, 0))
            truth[who] = (total + cents, count + 1)
        assert driver.table("balance") == {who: Balance(who=who, cents=c, payments=n)
                                           for who, (c, n) in truth.items()}
        outputs = driver.read(balances)
        assert all(type(r.value) is Balance for r in outputs)
        assert outputs[-1].value == Balance(who="eve", cents=4, payments=1)
        [letter] = driver.dlq(keep)
        assert "not a valid Payment: cents" in letter.error


def test_a_send_that_does_not_fit_the_model_names_the_field():
    app, payments, _, _ = payments_app("pyd-send")
    with TestDriver(app) as driver, pytest.raises(EncodeError, match="not a valid Payment: cents"):
        driver.send(payments, key="x", value={"who": "x", "cents": "many"})


def avro_app(app_id: str) -> tuple[engine.App, engine.Topic, object]:
    app = engine.App(app_id)
    sales = app.topic("sales", key_type=str, value_type=Sale,
                      value_serializer=Avro(record_name="shop.Sale"))
    stock = app.Table("stock", key_type=str, value_type=Stock,
                      value_serializer=Avro(record_name="shop.Stock"))

    @app.agent(sales)
    async def count(stream):
        async for event in stream.events():
            old = stock.get(event.key) or Stock()
            stock[event.key] = Stock(old.sold + event.value.qty, old.sales + 1)

    return app, sales, stock


def test_avro_values_through_an_agent_into_a_table_whose_changelog_is_avro_too():
    app, sales, stock = avro_app("avro-app")
    sent = [("tea", 2), ("cake", 1), ("tea", 5), ("pie", 3), ("tea", 1)]
    with TestDriver(app) as driver:
        for item, qty in sent:
            driver.send(sales, key=item, value=Sale(item, qty))
        sold, count = Counter(), Counter()
        for item, qty in sent:
            sold[item] += qty
            count[item] += 1
        assert driver.table("stock") == {item: Stock(sold[item], count[item]) for item in sold}
        changelog = driver.read(stock.changelog_topic)
        assert changelog[-1].value == Stock(sold["tea"], count["tea"])
        raw = [r.value for part in driver.broker.topics[stock.changelog_topic.name] for r in part]
        assert all(value[:1] == b"\x00" for value in raw if value is not None)  # framed for the registry


def test_records_from_confluents_serializer_under_another_subject_are_read_once_fetched():
    app, sales, _ = avro_app("avro-foreign")
    with TestDriver(app, schema_registry_url="memory://avro-foreign") as driver:
        client = memory_client("avro-foreign")
        schema = {"type": "record", "name": "Sale", "namespace": "shop",
                  "fields": [{"name": "item", "type": "string"}, {"name": "qty", "type": "long"},
                             {"name": "origin", "type": "string", "default": "pos"}]}

        async def confluent_bytes() -> bytes:
            serializer = await AsyncAvroSerializer(client, orjson.dumps(schema).decode())
            return await serializer({"item": "tea", "qty": 4, "origin": "web"},
                                    SerializationContext("elsewhere", MessageField.VALUE))

        data = driver._run(confluent_bytes())
        driver.send_raw(sales, b"tea", data)
        assert driver.table("stock") == {"tea": Stock(4, 1)}


def test_typed_records_through_a_pipeline_that_re_keys_them():
    """A pipeline's group_by writes the records to its repartition topic and reads them back: pydantic
    models and Avro dataclasses come back as themselves, and the sums equal the input's."""
    app = engine.App("typed-pipeline")
    payments = app.topic("payments", key_type=str, value_type=Payment)
    sales = app.topic("sales", key_type=str, value_type=Sale, value_serializer=Avro(record_name="shop.Sale"))
    app.stream(payments).group_by(lambda p: p.who, key_type=str).sum("cents", lambda p: p.cents)
    app.stream(sales).group_by(lambda s: s.item, key_type=str).sum("units", lambda s: s.qty)
    sent = [Payment(who=w, cents=c) for w, c in (("ada", 5), ("bob", 7), ("ada", 11))]
    sold = [Sale(i, q) for i, q in (("tea", 2), ("pie", 1), ("tea", 4))]
    with TestDriver(app) as driver:
        for n, payment in enumerate(sent):
            driver.send(payments, key=f"order-{n}", value=payment)
        for n, sale in enumerate(sold):
            driver.send(sales, key=f"till-{n}", value=sale)
        assert driver.table("cents") == {"ada": 16, "bob": 7}
        assert driver.table("units") == {"tea": 6, "pie": 1}


def test_protobuf_messages_through_a_pipeline_that_re_keys_them():
    """A pipeline re-keying Protobuf messages writes them to its repartition topic (engine's JSON, in
    Protobuf's JSON mapping) and reads them back as messages."""
    app = engine.App("proto-pipeline")
    orders = app.topic("orders", key_type=str, value_type=Order, value_serializer=Protobuf())
    app.stream(orders).group_by(lambda o: o.item, key_type=str).sum("cents", lambda o: o.qty * o.price.cents)
    sent = [Order(item=i, qty=q, price=Money(currency="EUR", cents=c))
            for i, q, c in (("tea", 2, 150), ("pie", 1, 300), ("tea", 1, 150))]
    with TestDriver(app) as driver:
        for n, order in enumerate(sent):
            driver.send(orders, key=f"till-{n}", value=order)
        assert driver.table("cents") == {"tea": 450, "pie": 300}


def test_a_stream_stream_join_of_topics_keyed_and_valued_in_avro():
    """A windowed join of two Avro topics (keys and values): its buffers keep the records by the topics' own
    key codec, and the pairs are the records as declared."""
    app = engine.App("avro-join", topic_partitions=1)
    key = Avro(schema='"string"')
    sales = app.topic("sales", key_type=str, value_type=Sale, key_serializer=key,
                      value_serializer=Avro(record_name="shop.Sale"))
    stock = app.topic("stock", key_type=str, value_type=Stock, key_serializer=key,
                      value_serializer=Avro(record_name="shop.Stock"))
    paired: list[tuple[str, Sale, Stock]] = []

    @app.agent(sales)
    async def pair(stream):
        async for item, (sale, level) in stream.join(stock, within=10).items():
            paired.append((item, sale, level))

    with TestDriver(app) as driver:
        t0 = int(driver.now) * 1000
        driver.send(sales, key="tea", value=Sale("tea", 2), timestamp_ms=t0)
        driver.send(stock, key="tea", value=Stock(40, 3), timestamp_ms=t0 + 5_000)  # within 10 s: a pair
        driver.send(stock, key="pie", value=Stock(1, 1), timestamp_ms=t0 + 6_000)  # no sale of pie
        driver.send(stock, key="tea", value=Stock(38, 4), timestamp_ms=t0 + 30_000)  # too late for the sale
    assert paired == [("tea", Sale("tea", 2), Stock(40, 3))]


@dataclass
class Customer:
    name: str
    country: str


def test_a_stream_joins_a_table_over_an_avro_topic_and_a_tombstone_forgets_the_row():
    """Stream-table join where both sides are Avro (the table over its source topic, which is its changelog):
    each sale is paired with the customer row the table holds when it is processed, None after a tombstone."""
    app = engine.App("avro-lookup", topic_partitions=2)
    customers = app.Table("customers", source_topic=app.topic(
        "customers", key_type=str, value_type=Customer, value_serializer=Avro(record_name="shop.Customer")))
    sales = app.topic("sales", key_type=str, value_type=Sale, value_serializer=Avro(record_name="shop.Sale"))
    paired: list[tuple[str, int, str | None]] = []

    @app.agent(sales)
    async def enrich(stream):
        async for who, (sale, customer) in stream.left_join(customers).items():
            paired.append((who, sale.qty, None if customer is None else customer.country))

    with TestDriver(app) as driver:
        driver.send("customers", key="ada", value=Customer("Ada", "FR"))
        driver.send(sales, key="ada", value=Sale("tea", 2))
        driver.send(sales, key="bob", value=Sale("pie", 1))
        driver.send("customers", key="ada", value=None)
        driver.send(sales, key="ada", value=Sale("cake", 3))
        assert driver.table("customers") == {}
    assert sorted(paired) == [("ada", 2, "FR"), ("ada", 3, None), ("bob", 1, None)]


def test_a_table_table_join_of_avro_tables_follows_both_sides():
    """Two tables over Avro topics joined by key (left join): each side's update is paired with the other
    side's current row, a deleted right row turns the pair to (row, None)."""
    app = engine.App("avro-tables", topic_partitions=2)
    stock = app.Table("stock", source_topic=app.topic(
        "stock", key_type=str, value_type=Stock, value_serializer=Avro(record_name="shop.Stock")))
    names = app.Table("names", source_topic=app.topic(
        "names", key_type=str, value_type=Customer, value_serializer=Avro(record_name="shop.Customer")))
    joined = stock.left_join(names)
    with TestDriver(app) as driver:
        driver.send("stock", key="tea", value=Stock(10, 1))
        driver.send("stock", key="pie", value=Stock(3, 1))
        driver.send("names", key="tea", value=Customer("Tea", "CN"))
        driver.send("names", key="pie", value=Customer("Pie", "UK"))
        driver.send("names", key="pie", value=None)
        driver.advance(1)  # (the join follows each side's changelog: a checkpoint)
        assert driver.table(joined.name) == {"tea": (Stock(10, 1), Customer("Tea", "CN")),
                                             "pie": (Stock(3, 1), None)}


def test_a_windowed_table_of_avro_values_emits_each_window_once_with_its_final_value():
    """Tumbling windows over an Avro topic, the windows' values Avro too (table and changelog): every closed
    window's final value is what the test computes from its input."""
    app = engine.App("avro-windows", topic_partitions=1)
    sales = app.topic("sales", key_type=str, value_type=Sale, value_serializer=Avro(record_name="shop.Sale"),
                      timestamp=lambda sale: sale.qty)  # (the sale's qty doubles as its event time, in s)
    per_item = app.Table("per-item", default=Stock, key_type=str, value_type=Stock,
                         value_serializer=Avro(record_name="shop.Stock")).tumbling(10, grace=0)
    per_item.closed()
    finals: list[tuple[str, int, Stock]] = []

    @app.agent(sales)
    async def add(stream):
        async for item, sale in stream.items():
            old = per_item[item].current()
            per_item[item] = Stock(old.sold + sale.qty, old.sales + 1)

    @app.agent(per_item.closed())
    async def collect(stream):
        async for (item, window), level in stream.items():
            finals.append((item, int(window.start), level))

    sent = [("tea", 1), ("tea", 4), ("pie", 7), ("tea", 12), ("pie", 15), ("tea", 31)]
    with TestDriver(app) as driver:
        for item, at in sent:
            driver.send(sales, key=item, value=Sale(item, at))
        driver.advance(1)
    expected: dict[tuple[str, int], Stock] = {}
    for item, at in sent:
        old = expected.get((item, at // 10 * 10), Stock())
        expected[item, at // 10 * 10] = Stock(old.sold + at, old.sales + 1)
    closed = {window: level for window, level in expected.items() if window[1] + 10 <= 31}
    assert sorted(finals) == sorted((item, start, level) for (item, start), level in closed.items())
