"""The registry codecs held to Confluent's own serializers and deserializers (confluent-kafka's, the wire
format's reference), through an in-memory registry both sides share: records Confluent writes read into the
declared types, records engine writes read back by Confluent, for Avro, JSON Schema and Protobuf; schema
evolution by Avro's resolution; unknown ids and unframed bytes as DecodeErrors; an id met for the first time
fetched once, off the per-record path."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import orjson
import pydantic
import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry._async.avro import AsyncAvroDeserializer, AsyncAvroSerializer
from confluent_kafka.schema_registry._async.json_schema import AsyncJSONDeserializer, AsyncJSONSerializer
from confluent_kafka.schema_registry._async.protobuf import AsyncProtobufDeserializer, AsyncProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from engine.codecs import decode_text, dumps
from engine.errors import ConfigError, DecodeError, EncodeError, SchemasNotCached
from engine.schemas import Avro, JsonSchema, Protobuf
from engine.schemas.avro import avro_schema
from engine.schemas.codecs import fetch_schemas
from engine.schemas.registry import Registry, memory_client
from engine.schemas.wire import frame, message_indexes, read_message_indexes, schema_id
from tests.schema_registry.protos import Line, Money, Order, Refund


@dataclass
class Sale:
    item: str
    qty: int
    note: str | None = None


@dataclass
class SaleV2:
    item: str
    qty: int
    note: str | None = None
    channel: str = "shop"  # added with a default: BACKWARD compatible


class Payment(pydantic.BaseModel):
    who: str
    cents: int
    tags: list[str] = []


def fresh() -> tuple[Registry, object, str]:
    name = uuid.uuid4().hex[:8]
    return Registry(f"memory://{name}"), memory_client(name), f"topic-{name}"


def ctx(topic: str, key: bool = False) -> SerializationContext:
    return SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)


async def decoded(codec, data: bytes):
    """What `codec` reads `data` as, its schema fetched first as the conductor does."""
    try:
        return codec.decode(data)
    except SchemasNotCached as missing:
        await fetch_schemas(missing, "test")
        return codec.decode(data)


def test_the_wire_format():
    assert frame(7, b"x") == b"\x00\x00\x00\x00\x07x"
    assert schema_id(frame(2**31 - 1, b"")) == 2**31 - 1
    assert message_indexes([0]) == b"\x00"
    for path in ([0], [1], [0, 0], [3, 1, 2], [200]):
        encoded = message_indexes(path)
        assert read_message_indexes(b"\x00\x00\x00\x00\x01" + encoded + b"rest") == (path, 5 + len(encoded))
    with pytest.raises(ValueError, match="magic byte 1"):
        schema_id(b"\x01\x00\x00\x00\x01")
    with pytest.raises(ValueError, match="too short"):
        schema_id(b"\x00\x01")


async def test_avro_both_ways_with_confluent():
    registry, client, topic = fresh()
    codec = Avro().codec(Sale, topic=topic, is_key=False)
    await codec.prepare(registry)
    assert codec.subject == f"{topic}-value"
    theirs = await AsyncAvroSerializer(client, orjson.dumps(avro_schema(Sale)).decode())
    data = await theirs({"item": "tea", "qty": 3, "note": None}, ctx(topic))
    assert schema_id(data) == codec.write_id  # the same schema: one id
    assert await decoded(codec, data) == Sale("tea", 3)
    ours = codec.encode(Sale("cake", 2, "birthday"))
    reader = await AsyncAvroDeserializer(client)
    assert await reader(ours, ctx(topic)) == {"item": "cake", "qty": 2, "note": "birthday"}


async def test_avro_reads_an_older_version_with_the_new_fields_defaults():
    registry, _, topic = fresh()
    old = Avro(record_name="shop.Sale").codec(Sale, topic=topic, is_key=False)
    await old.prepare(registry)
    v1 = old.encode(Sale("tea", 1))
    new = Avro(record_name="shop.Sale").codec(SaleV2, topic=topic, is_key=False)
    await new.prepare(registry)
    assert new.write_id != old.write_id
    assert await decoded(new, v1) == SaleV2("tea", 1, None, "shop")
    assert await decoded(new, new.encode(SaleV2("tea", 2, channel="app"))) == SaleV2("tea", 2, None, "app")
    assert await decoded(old, new.encode(SaleV2("pie", 5, channel="app"))) == Sale("pie", 5)


async def test_avro_with_a_given_schema_reads_dicts():
    registry, _, topic = fresh()
    schema = {"type": "record", "name": "Click", "namespace": "web",
              "fields": [{"name": "page", "type": "string"}, {"name": "ms", "type": "long"}]}
    codec = Avro(schema=schema, subject="record").codec(None, topic=topic, is_key=False)
    await codec.prepare(registry)
    assert codec.subject == "web.Click"
    assert await decoded(codec, codec.encode({"page": "/", "ms": 5})) == {"page": "/", "ms": 5}
    with pytest.raises(EncodeError, match="does not fit the Avro schema"):
        codec.encode({"page": "/"})


async def test_an_id_is_fetched_once_and_unknown_ids_and_unframed_bytes_are_decode_errors():
    registry, client, topic = fresh()
    codec = Avro().codec(Sale, topic=topic, is_key=False)
    await codec.prepare(registry)
    own = codec.encode(Sale("tea", 1))
    assert codec.decode(own) == Sale("tea", 1)  # its subject's versions are known from the start
    elsewhere = {"type": "record", "name": "Sale", "namespace": "schemas.test_registry_codecs",
                 "fields": [{"name": "item", "type": "string"}, {"name": "qty", "type": "long"},
                            {"name": "note", "type": ["null", "string"], "default": None},
                            {"name": "extra", "type": "int", "default": 0}]}
    theirs = await AsyncAvroSerializer(client, orjson.dumps(elsewhere).decode())
    data = await theirs({"item": "tea", "qty": 1, "note": None, "extra": 9}, ctx(f"{topic}-other"))
    with pytest.raises(SchemasNotCached) as missing:
        codec.decode_many([data, own, data, None])
    assert missing.value.ids == {schema_id(data)}  # once, however many records name it
    await fetch_schemas(missing.value, "test")
    assert codec.decode_many([data, own, None]) == [Sale("tea", 1), Sale("tea", 1), None]
    unknown = frame(987_654, b"\x06tea\x02\x00")
    with pytest.raises(SchemasNotCached):
        codec.decode(unknown)
    await fetch_schemas(SchemasNotCached(codec, {987_654}), "test")
    with pytest.raises(DecodeError, match="schema id 987654 is not in the schema registry"):
        codec.decode(unknown)
    with pytest.raises(DecodeError, match="not in Confluent's wire format"):
        codec.decode(b'{"item": "tea"}')
    with pytest.raises(DecodeError, match="not Avro of its schema"):
        codec.decode(frame(codec.write_id, b"\xff\xff"))


async def test_json_schema_both_ways_with_confluent_into_a_pydantic_model():
    registry, client, topic = fresh()
    codec = JsonSchema().codec(Payment, topic=topic, is_key=False)
    await codec.prepare(registry)
    text = orjson.dumps(Payment.model_json_schema()).decode()
    theirs = await AsyncJSONSerializer(text, client)
    data = await theirs({"who": "ada", "cents": 120, "tags": ["a"]}, ctx(topic))
    assert await decoded(codec, data) == Payment(who="ada", cents=120, tags=["a"])
    reader = await AsyncJSONDeserializer(text, schema_registry_client=client)
    assert await reader(codec.encode(Payment(who="bob", cents=5)), ctx(topic)) == {
        "who": "bob", "cents": 5, "tags": []}
    with pytest.raises(EncodeError, match="cents"):
        codec.encode({"who": "eve", "cents": "lots"})
    bad = await AsyncJSONSerializer(orjson.dumps({"type": "object"}).decode(), client,
                                    conf={"auto.register.schemas": True})
    loose = await bad({"who": "eve", "cents": "lots"}, ctx(f"{topic}-loose"))
    with pytest.raises(DecodeError, match="cents"):  # it fits its own schema, not the model
        await decoded(codec, loose)


async def test_protobuf_both_ways_with_confluent_its_import_registered_as_a_reference():
    registry, client, topic = fresh()
    codec = Protobuf().codec(Order, topic=topic, is_key=False)
    await codec.prepare(registry)
    registered = await client.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject) for r in registered.schema.references] == [("money.proto", "money.proto")]
    message = Order(item="tea", qty=2, price=Money(currency="EUR", cents=250), lines=[Line(sku="t1")])
    theirs = await AsyncProtobufSerializer(Order, client, conf={"use.deprecated.format": False})
    data = await theirs(message, ctx(topic))
    assert data == codec.encode(message)  # byte for byte: header, id, indexes, payload
    assert await decoded(codec, data) == message
    reader = await AsyncProtobufDeserializer(Order, conf={"use.deprecated.format": False})
    assert await reader(codec.encode(message), ctx(topic)) == message
    second = Protobuf().codec(Refund, topic=f"{topic}-refunds", is_key=False)
    await second.prepare(registry)
    assert read_message_indexes(second.encode(Refund(order_item="x")))[0] == [1]
    with pytest.raises(EncodeError, match="takes Refund messages"):
        second.encode(message)


async def test_keys_have_their_own_subject_and_a_codec_needs_a_schema_or_a_record_type():
    registry, _, topic = fresh()
    key = Avro(schema='"string"').codec(str, topic=topic, is_key=True)
    await key.prepare(registry)
    assert key.subject == f"{topic}-key"
    assert await decoded(key, key.encode("ada")) == "ada"
    with pytest.raises(ConfigError, match="needs a schema"):
        Avro().codec(dict, topic=topic, is_key=False)
    with pytest.raises(ConfigError, match="generated message class"):
        Protobuf().codec(Sale, topic=topic, is_key=False)


async def test_register_false_writes_with_the_subjects_latest_version():
    registry, client, topic = fresh()
    v2 = avro_schema(SaleV2, "shop.Sale")
    await client.register_schema(f"{topic}-value", Schema(orjson.dumps(v2).decode(), "AVRO"))
    codec = Avro(register=False, record_name="shop.Sale").codec(Sale, topic=topic, is_key=False)
    await codec.prepare(registry)
    data = codec.encode(Sale("tea", 1))  # written with v2's schema: its default filled in
    reader = await AsyncAvroDeserializer(client)
    assert await reader(data, ctx(topic)) == {"item": "tea", "qty": 1, "note": None, "channel": "shop"}
    none = Avro(register=False).codec(Sale, topic=f"{topic}-none", is_key=False)
    with pytest.raises(ConfigError, match="has no schema in the registry"):
        await none.prepare(registry)


def test_text_as_a_person_types_it_is_json_built_into_the_declared_type():
    """What `engine send` and a URL's key give a registry codec: JSON into the declared type, a bare word
    for a str, and the field that does not fit named."""
    _, _, topic = fresh()
    sale = Avro().codec(Sale, topic=topic, is_key=False)
    assert decode_text(sale, '{"item": "tea", "qty": 2}', Sale) == Sale("tea", 2)
    with pytest.raises(DecodeError, match="qty"):
        decode_text(sale, '{"item": "tea", "qty": "two"}', Sale)
    assert decode_text(Avro(schema='"string"').codec(str, topic=topic, is_key=True), "ada", str) == "ada"
    payment = JsonSchema().codec(Payment, topic=topic, is_key=False)
    assert decode_text(payment, '{"who": "ada", "cents": 5}', Payment) == Payment(who="ada", cents=5)
    order = Protobuf().codec(Order, topic=topic, is_key=False)
    assert decode_text(order, '{"item": "tea", "qty": 2, "price": {"cents": 5}}', Order) == Order(
        item="tea", qty=2, price=Money(cents=5))
    with pytest.raises(DecodeError, match="Protobuf's JSON"):
        decode_text(order, '{"nope": 1}', Order)


def test_engines_own_json_writes_models_and_messages():
    """What a query answers and the CLI prints (engine's own JSON) writes a pydantic model as its JSON data
    and a Protobuf message in Protobuf's JSON mapping, where orjson alone refused both."""
    assert orjson.loads(dumps({"payment": Payment(who="ada", cents=5)})) == {
        "payment": {"who": "ada", "cents": 5, "tags": []}}
    order = Order(item="tea", qty=2, price=Money(currency="EUR", cents=150), lines=[Line(sku="t1")])
    assert orjson.loads(dumps(order)) == {  # (an int64 is a string in Protobuf's JSON mapping)
        "item": "tea", "qty": 2, "price": {"currency": "EUR", "cents": "150"}, "lines": [{"sku": "t1"}]}
