"""Protobuf in Confluent's wire format: generated message classes as keys and values.

The protobuf runtime lives here and only here. A message class says all there is: its file's descriptor is
what is registered (as Confluent's serializers register it: the serialized FileDescriptorProto, base64),
each file it imports registered first under its own name and referenced (the well-known google/ and
confluent/ files excepted, which every registry knows); the message indexes say where the message is in its
file. Reading needs no writer's schema (Protobuf's fields are numbered: one written by another version of
the message reads into this one, unknown fields kept), but every id is still asked of the registry once, so
that a record naming an id the registry does not have is dead-lettered saying so.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from google.protobuf.json_format import MessageToDict, Parse, ParseDict, ParseError
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import EncodeError as ProtobufEncodeError
from google.protobuf.message import Message

from engine.codecs import FROM_PLAIN, PLAIN
from engine.errors import ConfigError, DecodeError, EncodeError
from engine.schemas.codecs import RegistryCodec, SubjectStrategy
from engine.schemas.registry import Reference, SchemaText
from engine.schemas.wire import WireError, message_indexes, read_message_indexes

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FileDescriptor

    from engine.schemas.codecs import Reader
    from engine.schemas.registry import Registry

KNOWN = ("google/protobuf/", "google/type/", "confluent/")  # files every registry knows: never registered

def _from_plain(cls: type[Message], data: Any) -> Message:
    try:
        return ParseDict(data, cls())
    except ParseError as exc:
        raise DecodeError(f"not a {cls.__name__} in Protobuf's JSON: {exc}") from exc


# A message in engine's JSON (a JSON topic's record, a query's answer, the CLI's output): its fields by their
# .proto names, Protobuf's JSON mapping; and back, into the declared message class.
PLAIN[Message] = lambda message: MessageToDict(message, preserving_proto_field_name=True)
FROM_PLAIN[Message] = _from_plain


class ProtobufCodec(RegistryCodec):
    name = "protobuf"

    def __init__(self, type_: type | None, *, topic: str, is_key: bool, subject: SubjectStrategy,
                 register: bool) -> None:
        super().__init__(topic=topic, is_key=is_key, subject=subject, register=register)
        if not (isinstance(type_, type) and issubclass(type_, Message)):
            raise ConfigError(f"topic {topic!r}: a Protobuf codec needs a generated message class as the "
                              f"type (got {type_!r})")
        self.type: type[Message] = type_
        self._descriptor: Descriptor = self.type.DESCRIPTOR
        self._indexes = message_indexes(index_path(self._descriptor))
        self._references: tuple[Reference, ...] = ()

    def schema_text(self) -> SchemaText:
        return SchemaText(file_text(self._descriptor.file), "PROTOBUF", self._references)

    def record_name(self) -> str:
        return str(self._descriptor.full_name)

    def indexes(self) -> bytes:
        return self._indexes

    async def references(self, registry: Registry) -> None:
        self._references = await _register_imports(registry, self._descriptor.file)

    def payload(self, value: Any) -> bytes:
        if type(value) is not self.type:
            raise EncodeError(f"topic {self.topic!r} takes {self.type.__name__} messages, not "
                              f"{type(value).__name__}")
        try:
            return bytes(value.SerializeToString())
        except ProtobufEncodeError as exc:
            raise EncodeError(f"cannot serialize {self.type.__name__}: {exc}") from exc

    def from_text(self, text: str) -> Any:
        """The message in Protobuf's JSON mapping (its fields by their .proto or JSON names)."""
        try:
            return Parse(text, self.type())
        except ParseError as exc:
            raise DecodeError(f"not a {self.type.__name__} in Protobuf's JSON: {exc}") from exc

    def reader(self, written: SchemaText) -> Reader:
        if written.kind != "PROTOBUF":
            raise ValueError(f"it is a {written.kind} schema")
        parse = self.type.FromString

        def decode(data: bytes) -> Any:
            try:
                _, start = read_message_indexes(data)
                return parse(data[start:])
            except (WireError, ProtobufDecodeError) as exc:
                raise DecodeError(f"not a Protobuf {self.type.__name__}: {exc}") from exc

        return decode


def file_text(file: FileDescriptor) -> str:
    """A .proto file as registered: its serialized FileDescriptorProto, base64 (Confluent's form)."""
    return base64.standard_b64encode(file.serialized_pb).decode("ascii")


def index_path(descriptor: Descriptor) -> list[int]:
    """Where a message is in its file: its index among the file's messages, then down the nested ones."""
    path = []
    current = descriptor
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(list(parent.nested_types).index(current))
        current = parent
    path.append(list(current.file.message_types_by_name.values()).index(current))
    return path[::-1]


async def _register_imports(registry: Registry, file: FileDescriptor) -> tuple[Reference, ...]:
    """Register each file `file` imports (theirs first), under its own name; their references."""
    found = []
    for imported in file.dependencies:
        if imported.name.startswith(KNOWN):
            continue
        inner = await _register_imports(registry, imported)
        text = SchemaText(file_text(imported), "PROTOBUF", inner)
        registered = await registry.register(imported.name, text)
        found.append(Reference(imported.name, imported.name, registered.version))
    return tuple(found)
