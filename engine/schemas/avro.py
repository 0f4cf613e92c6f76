"""Avro in Confluent's wire format, by fastavro: the schema given, or derived from a dataclass or a pydantic
model; records written with any registered version of it read into the declared type.

fastavro lives here and only here. It is the Avro implementation Confluent's own Python serializers use,
compiled (Cython), and it resolves a writer's schema to a reader's as the Avro spec says: a field the
writer did not have takes the reader's default, one the reader does not have is skipped. Each writer schema
(by id) is parsed and paired with the declared one once, when its id is first met.

Derived schemas (`avro_schema`): int -> long, float -> double, str -> string, bool -> boolean, bytes ->
bytes, datetime -> long timestamp-millis, X | None -> ["null", X], list[X] -> array, dict[str, X] -> map,
an Enum -> enum, a nested record type -> a named record; a field's default becomes the schema's default
(what lets a field be added compatibly, as Confluent's BACKWARD rule asks).
"""

from __future__ import annotations

import enum
import io
import types
import typing
from datetime import datetime
from typing import TYPE_CHECKING, Any

import fastavro

from engine.codecs import _right_sized, dumps, loads
from engine.errors import ConfigError, DecodeError, EncodeError
from engine.schemas.codecs import RegistryCodec, SubjectStrategy
from engine.schemas.models import MISSING, as_dict, builder, fields, is_flat_dataclass, is_record
from engine.schemas.registry import SchemaText
from engine.schemas.wire import HEADER

if TYPE_CHECKING:
    from engine.schemas.codecs import Reader


class AvroCodec(RegistryCodec):
    name = "avro"

    def __init__(self, type_: type | None, schema: str | dict[str, Any] | None, *, topic: str, is_key: bool,
                 subject: SubjectStrategy, register: bool, record_name: str | None = None) -> None:
        super().__init__(topic=topic, is_key=is_key, subject=subject, register=register)
        derived = schema is None
        if schema is None:
            if type_ is None or not is_record(type_):
                raise ConfigError(f"topic {topic!r}: an Avro codec needs a schema, or a dataclass or "
                                  f"pydantic model type to derive it from (got {type_!r})")
            schema = avro_schema(type_, record_name)
        elif isinstance(schema, str):
            schema = loads(schema)
        self.type = type_
        self.schema: Any = schema
        try:
            self._parsed = fastavro.parse_schema(schema)
        except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"topic {topic!r}: not a valid Avro schema: {exc}") from exc
        self._writer = self._parsed  # the schema records are written with (the subject's latest, if adopted)
        self._text = dumps(schema).decode()
        # What fastavro reads with a schema derived from a dataclass of scalars has the fields' types
        # already (the writer's version resolved to it): built as it is, without checking them again.
        self._checked = builder(type_)
        self._build = _splat(type_) if derived and is_flat_dataclass(type_) else self._checked

    def schema_text(self) -> SchemaText:
        return SchemaText(self._text, "AVRO")

    def record_name(self) -> str:
        name = self._parsed.get("name") if isinstance(self._parsed, dict) else None
        if not name:
            raise ConfigError(f"topic {self.topic!r}: a record subject strategy needs a named Avro record")
        return str(name)

    def adopt(self, written: SchemaText) -> None:
        self._writer = fastavro.parse_schema(loads(written.text))

    def payload(self, value: Any) -> bytes:
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self._writer, as_dict(value))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise EncodeError(f"does not fit the Avro schema of topic {self.topic!r}: {exc}") from exc
        return _right_sized(out.getvalue())

    def reader(self, written: SchemaText) -> Reader:
        if written.kind != "AVRO":
            raise ValueError(f"it is a {written.kind} schema")
        schema = loads(written.text)
        writer = fastavro.parse_schema(schema)
        reader_schema = None if schema == self.schema else self._parsed
        read = fastavro.schemaless_reader
        build: typing.Callable[[Any], Any] | None = self._build

        def decode(data: bytes) -> Any:
            stream = io.BytesIO(data)  # (over the bytes themselves: no copy)
            stream.seek(HEADER)
            try:
                record = read(stream, writer, reader_schema)
            except (ValueError, TypeError, KeyError, EOFError, IndexError, UnicodeDecodeError,
                    fastavro.read.SchemaResolutionError) as exc:
                raise DecodeError(f"not Avro of its schema: {type(exc).__name__}: {exc}") from exc
            return record if build is None else build(record)

        return decode


def _splat(type_: Any) -> typing.Callable[[dict[str, Any]], Any]:
    def build(data: dict[str, Any]) -> Any:
        return type_(**data)

    return build


# -- schemas derived from types ------------------------------------------------------------------------

_PRIMITIVES: dict[Any, str] = {int: "long", float: "double", str: "string", bool: "boolean", bytes: "bytes"}


def avro_schema(type_: type, full_name: str | None = None) -> dict[str, Any]:
    """The Avro record schema of a dataclass or pydantic model, named `full_name` (by default its module and
    name)."""
    schema: dict[str, Any] = _record(type_, set(), full_name)
    return schema


def _record(type_: type, named: set[str], full_name: str | None = None) -> Any:
    full = full_name or f"{type_.__module__}.{type_.__qualname__}".replace("<", "_").replace(">", "_")
    if full in named:
        return full  # a type met before: referred to by its name, as Avro wants
    named.add(full)
    namespace, _, name = full.rpartition(".")
    out = []
    for field in fields(type_):
        entry: dict[str, Any] = {"name": field.name, "type": _type(field.annotation, named, field.name)}
        if field.default is not MISSING:
            entry["default"] = _default(field.default)
            if field.default is None and isinstance(entry["type"], list) and entry["type"][0] != "null":
                entry["type"] = ["null", *[t for t in entry["type"] if t != "null"]]
        out.append(entry)
    return {"type": "record", "name": name, "namespace": namespace, "fields": out}


def _type(annotation: Any, named: set[str], where: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0], named, where)
    if origin in (typing.Union, types.UnionType):
        members = [_type(arg, named, where) for arg in args if arg is not type(None)]
        return ["null", *members] if type(None) in args else members
    if annotation in _PRIMITIVES:
        return _PRIMITIVES[annotation]
    if annotation is datetime:
        return {"type": "long", "logicalType": "timestamp-millis"}
    if origin is list:
        return {"type": "array", "items": _type(args[0], named, where) if args else "string"}
    if origin is dict:
        if args and args[0] is not str:
            raise ConfigError(f"field {where!r}: an Avro map's keys are strings, not {args[0]!r}")
        return {"type": "map", "values": _type(args[1], named, where) if args else "string"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"type": "enum", "name": annotation.__name__, "symbols": [m.name for m in annotation]}
    if isinstance(annotation, type) and is_record(annotation):
        return _record(annotation, named)
    raise ConfigError(f"field {where!r}: no Avro type for {annotation!r}; give the schema itself "
                      "(Avro(schema=...))")


def _default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    return as_dict(value)
