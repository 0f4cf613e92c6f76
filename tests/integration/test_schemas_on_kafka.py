"""Records in Confluent's wire format on a real broker and a real schema registry (Apicurio, the harness's):
written by confluent-kafka's own producer and serializers (Avro, JSON Schema, Protobuf), read by `engine
worker` processes into tables whose changelogs are in the registry's formats too, and what engine writes
read back by Confluent's deserializers; exactly-once, with a second worker joining while records flow
(partitions move), every table value and every output against ground truth computed from the input."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer

from tests.integration.helpers import (
    ROOT,
    SHORT_SESSION,
    WorkerProcess,
    create_topics,
    placed_over,
    read_all,
    unique,
    until_done,
)
from tests.integration.schema_apps import Balance, Payment
from tests.schema_registry import SchemaRegistry
from tests.schema_registry.protos import Money, Order, Refund

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.kafka

PARTITIONS = 4
ITEMS = [f"item-{i}" for i in range(23)]
PEOPLE = [f"who-{i}" for i in range(17)]


def sale_schema(version: int) -> str:
    fields: list[dict[str, Any]] = [{"name": "item", "type": "string"}, {"name": "qty", "type": "long"}]
    if version == 2:
        fields.append({"name": "channel", "type": "string", "default": "shop"})
    return orjson.dumps({"type": "record", "name": "Sale", "namespace": "shop", "fields": fields}).decode()


Inputs = tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, Payment]], list[tuple[str, Any]]]


def inputs(n: int) -> Inputs:
    sales = [(ITEMS[i % len(ITEMS)], {"item": ITEMS[i % len(ITEMS)], "qty": 1 + i % 5}) for i in range(n)]
    pays = [(PEOPLE[i % len(PEOPLE)], Payment(who=PEOPLE[i % len(PEOPLE)], cents=(i * 37) % 1000 - 200))
            for i in range(n)]
    orders = [(ITEMS[i % len(ITEMS)], Order(item=ITEMS[i % len(ITEMS)], qty=i % 4,
                                            price=Money(currency="EUR", cents=10 + i % 90)))
              for i in range(n)]
    return sales, pays, orders


class ConfluentSide:
    """confluent-kafka's producer and serializers, and its deserializers, on the registry."""

    def __init__(self, bootstrap: str, registry: str, app_id: str) -> None:
        self.app_id = app_id
        self.client = SchemaRegistryClient({"url": registry})
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.key = StringSerializer()
        self.avro_key = AvroSerializer(self.client, '"string"')
        self.sale = AvroSerializer(self.client, sale_schema(1))
        self.payment = JSONSerializer(orjson.dumps(Payment.model_json_schema()).decode(), self.client,
                                      to_dict=lambda p, _: p.model_dump())
        self.order = ProtobufSerializer(Order, self.client, {"use.deprecated.format": False})

    def produce(self, sales: list[Any], pays: list[Any], orders: list[Any]) -> None:
        for (key, value), (pkey, pay), (okey, order) in zip(sales, pays, orders, strict=True):
            topic = f"{self.app_id}-sales"
            self.producer.produce(topic, key=self.avro_key(key, _context(topic, MessageField.KEY)),
                                  value=self.sale(value, _context(topic, MessageField.VALUE)))
            topic = f"{self.app_id}-payments"
            self.producer.produce(topic, key=self.key(pkey),
                                  value=self.payment(pay, SerializationContext(topic, MessageField.VALUE)))
            topic = f"{self.app_id}-orders"
            self.producer.produce(topic, key=self.key(okey),
                                  value=self.order(order, SerializationContext(topic, MessageField.VALUE)))
            self.producer.poll(0)
        assert self.producer.flush(60) == 0

    def read(self, records: list[Any], deserialize: Any, topic: str) -> dict[str, Any]:
        """The latest value per key of a changelog (or an output), through Confluent's deserializer."""
        latest: dict[str, Any] = {}
        context = SerializationContext(topic, MessageField.VALUE)
        for record in sorted(records, key=lambda r: (r.partition, r.offset)):
            if record.key is None or record.key.startswith(b"\xff\xff\xff\xff"):
                continue
            latest[record.key.decode()] = None if record.value is None else deserialize(record.value, context)
        return latest


def _context(topic: str, field: str) -> SerializationContext:
    return SerializationContext(topic, field)


def truth(sales: list[Any], pays: list[Any], orders: list[Any]) -> tuple[dict[str, Any], ...]:
    sold: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for item, sale in sales:
        sold[item] += sale["qty"]
        count[item] += 1
    stock = {item: {"sold": sold[item], "sales": count[item]} for item in sold}
    cents: Counter[str] = Counter()
    paid: Counter[str] = Counter()
    for who, pay in pays:
        cents[who] += pay.cents
        paid[who] += 1
    balances = {who: {"cents": cents[who], "payments": paid[who]} for who in paid}
    ordered: Counter[str] = Counter()
    for item, order in orders:
        ordered[item] += order.qty * order.price.cents
    refunds = Counter(order.item for _, order in orders if order.qty == 0)
    return stock, balances, dict(ordered), dict(refunds)


def worker(kafka: Any, registry: str, app_id: str, tmp_path: Path, name: str, **env: str) -> WorkerProcess:
    return WorkerProcess("tests.integration.schema_apps:app", kafka.url,
                         {"ITEST_APP": app_id, "ENGINE_SCHEMA_REGISTRY_URL": registry, **SHORT_SESSION,
                          **env},
                         tmp_path / f"{name}.log")


async def test_confluents_records_through_two_engine_workers_and_back(kafka, schema_registry, tmp_path):
    app_id = unique("schemas")
    await create_topics(kafka.bootstrap, [f"{app_id}-{t}" for t in ("sales", "payments", "orders")],
                        partitions=PARTITIONS)
    confluent = ConfluentSide(kafka.bootstrap, schema_registry, app_id)
    sales, pays, orders = inputs(3000)
    workers = [worker(kafka, schema_registry, app_id, tmp_path, "first")]
    try:
        await placed_over(workers, PARTITIONS)
        await asyncio.to_thread(confluent.produce, sales[:1000], pays[:1000], orders[:1000])
        workers.append(worker(kafka, schema_registry, app_id, tmp_path, "second"))
        for start in range(1000, 3000, 250):  # flowing while the second worker joins and partitions move
            await asyncio.to_thread(confluent.produce, sales[start:start + 250], pays[start:start + 250],
                                    orders[start:start + 250])
        await placed_over(workers, PARTITIONS)
        stock, balances, ordered, refunds = truth(sales, pays, orders)
        avro = AvroDeserializer(confluent.client)
        as_json = JSONDeserializer(orjson.dumps(Balance.model_json_schema()).decode(),
                                   schema_registry_client=confluent.client)
        money = ProtobufDeserializer(Money, {"use.deprecated.format": False})
        refund = ProtobufDeserializer(Refund, {"use.deprecated.format": False})

        async def tables() -> tuple[Any, ...]:
            found = []
            for table, read in (("stock", avro), ("balances", as_json), ("ordered", money)):
                topic = f"{app_id}-{table}-changelog"
                found.append(confluent.read(await read_all(kafka.bootstrap, topic), read, topic))
            return tuple(found)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 180
        while True:
            got_stock, got_balances, got_ordered = await tables()
            if (got_stock == stock and got_balances == balances
                    and {k: v.cents for k, v in got_ordered.items()} == ordered):
                break
            if loop.time() > deadline:
                logs = "".join(f"\n--- {w.log_path.name}:\n{w.output()[-3000:]}" for w in workers)
                right = (sum(got_stock.get(k) == v for k, v in stock.items()),
                         sum(got_balances.get(k) == v for k, v in balances.items()),
                         sum(getattr(got_ordered.get(k), "cents", None) == v for k, v in ordered.items()))
                raise AssertionError(f"tables not at the truth after 180 s: keys right (stock, balances, "
                                     f"ordered) {right} of {(len(stock), len(balances), len(ordered))}{logs}")
            await asyncio.sleep(1)
        out = f"{app_id}-stock"
        assert confluent.read(await read_all(kafka.bootstrap, out), avro, out) == stock
        written = await read_all(kafka.bootstrap, f"{app_id}-refunds")
        context = SerializationContext(f"{app_id}-refunds", MessageField.VALUE)
        assert Counter(refund(r.value, context).order_item for r in written) == refunds  # each once
        for w in workers:
            assert w.records("ERROR") == [], w.output()[-3000:]
    finally:
        for w in workers:
            w.terminate(timeout=60)


def sales_only(confluent: ConfluentSide, sales: list[Any], version: int) -> None:
    """Sales written by Confluent's Avro serializer with version `version` of the record."""
    serialize = AvroSerializer(confluent.client, sale_schema(version))
    topic = f"{confluent.app_id}-sales"
    for key, value in sales:
        confluent.producer.produce(topic, key=confluent.avro_key(key, _context(topic, MessageField.KEY)),
                                   value=serialize(value, _context(topic, MessageField.VALUE)))
        confluent.producer.poll(0)
    assert confluent.producer.flush(60) == 0


async def stock_at(kafka: Any, confluent: ConfluentSide, expected: dict[str, Any],
                   workers: list[WorkerProcess], timeout: float = 180) -> None:
    """Wait until the stock table's changelog holds `expected` (read by Confluent's deserializer)."""
    topic = f"{confluent.app_id}-stock-changelog"
    avro = AvroDeserializer(confluent.client)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = confluent.read(await read_all(kafka.bootstrap, topic), avro, topic)
        if got == expected:
            return
        if loop.time() > deadline:
            logs = "".join(f"\n--- {w.log_path.name}:\n{w.output()[-3000:]}" for w in workers)
            wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
            raise AssertionError(f"stock not at the truth after {timeout:.0f} s: {len(wrong)} keys wrong, "
                                 f"e.g. {list(wrong.items())[:3]}{logs}")
        await asyncio.sleep(1)


def stock_truth(sales: list[Any], *, web: bool) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item, sale in sales:
        row = found.setdefault(item, {"sold": 0, "sales": 0, **({"web": 0} if web else {})})
        row["sold"] += sale["qty"]
        row["sales"] += 1
        if web and sale.get("channel") == "web":
            row["web"] += sale["qty"]
    return found


async def test_an_app_upgraded_to_v2_reads_old_and_new_records_and_v3_is_refused(kafka, schema_registry,
                                                                                  tmp_path):
    app_id = unique("evolve")
    await create_topics(kafka.bootstrap, [f"{app_id}-{t}" for t in ("sales", "payments", "orders")],
                        partitions=PARTITIONS)
    confluent = ConfluentSide(kafka.bootstrap, schema_registry, app_id)
    v1 = [(ITEMS[i % len(ITEMS)], {"item": ITEMS[i % len(ITEMS)], "qty": 1 + i % 3}) for i in range(400)]
    first = worker(kafka, schema_registry, app_id, tmp_path, "v1")
    try:
        await placed_over([first], PARTITIONS)
        await asyncio.to_thread(sales_only, confluent, v1, 1)
        await stock_at(kafka, confluent, stock_truth(v1, web=False), [first])
    finally:
        first.terminate(timeout=60)
    v2 = [(ITEMS[i % len(ITEMS)], {"item": ITEMS[i % len(ITEMS)], "qty": 1 + i % 4,
                                   "channel": "web" if i % 3 == 0 else "shop"}) for i in range(400)]
    late_v1 = v1[:100]  # producers not upgraded yet
    await asyncio.to_thread(sales_only, confluent, v2, 2)
    await asyncio.to_thread(sales_only, confluent, late_v1, 1)
    # A fresh data dir: the v2 app restores `stock` from a changelog of v1 records, then adds v2 ones.
    second = worker(kafka, schema_registry, app_id, tmp_path, "v2", ITEST_VERSION="2",
                    ENGINE_DATA_DIR=str(tmp_path / "v2-fresh"))
    try:
        await placed_over([second], PARTITIONS)
        await stock_at(kafka, confluent, stock_truth([*v1, *v2, *late_v1], web=True), [second])
        assert re.search(r"recovered \S+stock-changelog\[\d\]: replayed [1-9]", second.output())
        assert second.records("ERROR") == [], second.output()[-3000:]
    finally:
        second.terminate(timeout=60)
    third = worker(kafka, schema_registry, app_id, tmp_path, "v3", ITEST_VERSION="3")
    try:
        assert await asyncio.to_thread(third.process.wait, 120) != 0
    finally:
        third.terminate(timeout=10)
    refusal = third.output()
    assert f"subject '{app_id}-sales-value'" in refusal, refusal[-3000:]
    assert "refused" in refusal, refusal[-3000:]


@pytest.fixture(scope="module")
def own_registry() -> Iterator[SchemaRegistry]:
    """A registry of this module's own, since the fault test pauses it."""
    with SchemaRegistry() as registry:
        yield registry


async def test_the_registrys_faults_wait_or_dead_letter_with_the_reason(kafka, own_registry, tmp_path):
    app_id = unique("faults")
    await create_topics(kafka.bootstrap, [f"{app_id}-{t}" for t in ("sales", "payments", "orders")],
                        partitions=PARTITIONS)
    confluent = ConfluentSide(kafka.bootstrap, own_registry.url, app_id)
    unreachable = worker(kafka, "http://127.0.0.1:9/apis/ccompat/v7", app_id, tmp_path, "unreachable")
    assert await asyncio.to_thread(unreachable.process.wait, 120) != 0
    [line] = [line for line in unreachable.output().splitlines() if line.startswith("engine: ")]
    assert "http://127.0.0.1:9/apis/ccompat/v7 is unreachable" in line
    one = worker(kafka, own_registry.url, app_id, tmp_path, "one")
    try:
        await placed_over([one], PARTITIONS)
        good = [(ITEMS[i % len(ITEMS)], {"item": ITEMS[i % len(ITEMS)], "qty": 1 + i % 3})
                for i in range(200)]
        await asyncio.to_thread(sales_only, confluent, good[:100], 1)
        # Records of a version the worker has not met (registered under another subject), written while the
        # registry answers nothing: they wait, with a WARNING, and are read once it is back.
        other = AvroSerializer(confluent.client, sale_schema(2))
        newer = [(item, {**sale, "channel": "web"}) for item, sale in good[100:]]
        framed = [(confluent.avro_key(k, _context(f"{app_id}-sales", MessageField.KEY)),
                   other(v, _context("elsewhere", MessageField.VALUE))) for k, v in newer]
        own_registry.pause()
        try:
            for key, value in framed:
                confluent.producer.produce(f"{app_id}-sales", key=key, value=value)
            assert confluent.producer.flush(60) == 0
            await one.wait_for_output("waits for schema ids", 120)
        finally:
            own_registry.resume()
        unknown_id = b"\x00" + (987_654).to_bytes(4, "big") + b"\x06tea\x02"
        key = confluent.avro_key("tea", _context(f"{app_id}-sales", MessageField.KEY))
        for value in (unknown_id, b"hello"):
            confluent.producer.produce(f"{app_id}-sales", key=key, value=value)
        assert confluent.producer.flush(60) == 0
        await stock_at(kafka, confluent, stock_truth([*good[:100], *newer], web=False), [one])

        async def dead_letters() -> tuple[bool, int]:  # (committed with the transaction of their partition)
            found = await read_all(kafka.bootstrap, f"{app_id}-keep_stock-dlq")
            return len(found) >= 2, len(found)

        await until_done(dead_letters, "the two bad records dead-lettered", workers=[one])
        letters = await read_all(kafka.bootstrap, f"{app_id}-keep_stock-dlq")
        reasons = sorted(dict(r.headers).get("engine-error", b"").decode() for r in letters)
        assert len(reasons) == 2, reasons
        assert "schema id 987654 is not in the schema registry" in reasons[0] + reasons[1]
        assert "not in Confluent's wire format" in reasons[0] + reasons[1] or "too short" in "".join(reasons)
    finally:
        one.terminate(timeout=60)


async def test_engine_send_takes_json_text_for_a_registry_topic(kafka, schema_registry, tmp_path):
    """`engine send` of JSON text to an Avro topic: the schema registered (or found), the record framed,
    and read back by Confluent's deserializer; a value that does not fit is refused before anything is
    sent."""
    app_id = unique("send")
    env = {**os.environ, "ITEST_APP": app_id, "ENGINE_SCHEMA_REGISTRY_URL": schema_registry}

    def send(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cli.main", "send", "-A", "tests.integration.schema_apps:app",
                   "--broker", kafka.url, f"{app_id}-sales", *args]
        return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)

    sent = await asyncio.to_thread(send, '{"item": "tea", "qty": 3}', "--key", "tea", "--create")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    refused = await asyncio.to_thread(send, '{"item": "tea", "qty": "three"}', "--key", "tea")
    assert refused.returncode != 0
    assert "qty" in refused.stdout + refused.stderr
    [record] = await read_all(kafka.bootstrap, f"{app_id}-sales")
    client = SchemaRegistryClient({"url": schema_registry})
    topic = f"{app_id}-sales"
    value = AvroDeserializer(client)(record.value, _context(topic, MessageField.VALUE))
    assert value == {"item": "tea", "qty": 3}
    assert AvroDeserializer(client)(record.key, _context(topic, MessageField.KEY)) == "tea"
