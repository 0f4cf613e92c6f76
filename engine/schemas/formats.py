"""The schema formats a topic's key or value can be declared in (`value_serializer=Avro()`): what the user
writes. Light on purpose: the codec (and the libraries it needs, the `schemas` extra) is imported only when
a topic declared with one is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.optional import needs

if TYPE_CHECKING:
    from engine.schemas.codecs import RegistryCodec, SubjectStrategy

FEATURE = "schema registry codecs"


@dataclass(frozen=True)
class Avro:
    """Avro in Confluent's wire format. `schema`: the Avro schema (JSON text or dict); without it, derived
    from the declared type (a dataclass or pydantic model). `subject`: the subject name strategy (`topic`,
    `record`, `topic_record`). `register`: register the schema when a worker starts (Confluent's
    auto.register.schemas); False writes with the subject's latest version instead (use.latest.version).
    `record_name`: the full name (`namespace.Name`) of a derived schema's record, where the type's module
    and name are not what the estate calls it (Avro resolves versions of a record by its name)."""

    schema: str | dict[str, Any] | None = None
    subject: SubjectStrategy = "topic"
    register: bool = True
    record_name: str | None = None
    name = "avro"

    def codec(self, type_: type | None, *, topic: str, is_key: bool) -> RegistryCodec:
        with needs("fastavro and confluent-kafka", FEATURE, extra="schemas"):
            from engine.schemas.avro import AvroCodec
        return AvroCodec(type_, self.schema, topic=topic, is_key=is_key, subject=self.subject,
                         register=self.register, record_name=self.record_name)


@dataclass(frozen=True)
class JsonSchema:
    """JSON Schema in Confluent's wire format (the payload is JSON, checked against the schema both ways).
    `schema`: the JSON schema (text or dict); without it, derived from the declared pydantic model or
    dataclass. `subject` and `register` as for Avro."""

    schema: str | dict[str, Any] | None = None
    subject: SubjectStrategy = "topic"
    register: bool = True
    name = "json_schema"

    def codec(self, type_: type | None, *, topic: str, is_key: bool) -> RegistryCodec:
        with needs("jsonschema and confluent-kafka", FEATURE, extra="schemas"):
            from engine.schemas.json_schema import JsonSchemaCodec
        return JsonSchemaCodec(type_, self.schema, topic=topic, is_key=is_key, subject=self.subject,
                               register=self.register)


@dataclass(frozen=True)
class Protobuf:
    """Protobuf in Confluent's wire format; the declared type is the generated message class. `subject` and
    `register` as for Avro (the `record` strategies name the message's full name)."""

    subject: SubjectStrategy = "topic"
    register: bool = True
    name = "protobuf"

    def codec(self, type_: type | None, *, topic: str, is_key: bool) -> RegistryCodec:
        with needs("protobuf and confluent-kafka", FEATURE, extra="schemas"):
            from engine.schemas.protobuf import ProtobufCodec
        return ProtobufCodec(type_, topic=topic, is_key=is_key, subject=self.subject, register=self.register)


SchemaFormat = Avro | JsonSchema | Protobuf
