"""Codecs turn keys and values into bytes and back. orjson lives here and only here.

- "json" (the default): orjson; a dataclass type is encoded from and decoded into that dataclass, its
  fields checked against their declared types (`engine.typecheck`); a pydantic model is validated by
  pydantic both ways (engine.schemas.models); a plain type (int, str, dict...) is checked after decoding,
  so a wrong-typed record is a DecodeError at the edge, not a TypeError deep in an agent.
- "str": UTF-8 text, the usual choice for keys.
- "raw": bytes as they are.
- a schema format (engine.schemas: Avro, Protobuf, JsonSchema): Confluent's wire format through a schema
  registry, its codec made for the topic and role.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from engine.errors import ConfigError, DecodeError, EncodeError
from engine.schemas.models import check_model, is_model, model_builder, model_json
from engine.typecheck import RecordDecoder, plain_decoder, record_decoder

if TYPE_CHECKING:
    from collections.abc import Callable

# What a key codec that `skips` decodes engine's own records to (a windowed table's stream time on its
# changelog): not events; the conductor acks them without handing them to agents.
SKIP: Any = object()


log = logging.getLogger(__name__)


class Codec(Protocol):
    name: str

    def encode(self, value: Any) -> bytes | None: ...

    def decode(self, data: bytes | None) -> Any: ...

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        """`decode` of each, in one call (a fetched batch: no Python call per record); DecodeError if any
        fails (the caller then decodes one at a time to find which)."""


class RawCodec:
    name = "raw"

    def encode(self, value: Any) -> bytes | None:
        if value is None or isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise EncodeError(f"the raw codec takes bytes, not {type(value).__name__}")

    def decode(self, data: bytes | None) -> Any:
        return data

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        return datas


class StrCodec:
    name = "str"

    def encode(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise EncodeError(f"the str codec takes str, not {type(value).__name__}")
        return value.encode()

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not valid UTF-8: {exc}") from exc

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        try:
            return [None if data is None else data.decode() for data in datas]
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not valid UTF-8: {exc}") from exc


def _right_sized(encoded: bytes) -> bytes:
    """A copy of `encoded` that owns exactly its length. orjson (since 3.12) returns bytes that keep the whole
    buffer it serialized into, many times the size of a small document. Wherever encoded bytes are kept (a
    memory store's values, a checkpoint's pending changelog, the tables' key caches) that multiplied memory
    by as much, and the copy is cheap beside the encode (both measured: benchmarks/README.md). `bytes.join`
    of two parts always copies; `bytes(b)` and `b[:]` return `b` itself."""
    return b"".join((encoded, b""))


# Types a JSON value decodes to as it is: a batch of them is checked in one pass, not decoded one call each.
_JSON_TYPES: frozenset[type] = frozenset({int, float, str, list, bool})


class JsonCodec:
    """JSON through orjson, optionally into a declared type."""

    name = "json"

    def __init__(self, type_: type | None = None) -> None:
        self.type = type_
        self._build: RecordDecoder | None = None
        self._model = type_ if is_model(type_) else None
        self._build_model = model_builder(type_) if type_ is not None and self._model is not None else None
        if type_ is not None and dataclasses.is_dataclass(type_):
            self._build = record_decoder(type_)  # once per codec: per record, one pass over the object
        self._from_plain = next((convert for kind, convert in FROM_PLAIN.items()
                                 if isinstance(type_, type) and issubclass(type_, kind)), None)
        # A plain type, by the rule of a field of that type (an int where a float is declared: that float).
        self._plain = plain_decoder(type_) if type_ is not None else None

    def encode(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if self._model is not None:  # validated on the way out too: a bad field names its path here
            return _right_sized(model_json(check_model(self._model, value)))
        build = self._build
        if build is not None and type(value) is not self.type:
            value = self._checked_record(value, build)
        try:
            return _right_sized(orjson.dumps(value, default=_plain))
        except TypeError as exc:
            raise EncodeError(f"cannot encode {type(value).__name__} as JSON: {exc}") from exc

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"not valid JSON ({exc}): {bytes(data[:80])!r}") from exc
        return self.from_json(obj)

    def from_json(self, obj: Any) -> Any:
        """A parsed JSON value built into the declared type (what `decode` does after parsing)."""
        type_ = self.type
        if type_ is None:
            return obj
        if self._build is not None:
            return self._record(obj, self._build)
        if self._build_model is not None:
            return self._build_model(obj)
        if self._from_plain is not None:
            return self._from_plain(type_, obj)
        if type(obj) is type_:  # (the usual case)
            return obj
        if self._plain is not None:
            return self._plain(obj)
        if type_ is tuple and isinstance(obj, list):  # JSON has no tuples: a pair comes back as one
            return tuple(obj)
        if not isinstance(obj, type_) or (type_ is int and isinstance(obj, bool)):
            raise DecodeError(f"expected {type_.__name__}, got {type(obj).__name__}: {obj!r:.80}")
        return obj

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        type_ = self.type
        if type_ is not None and type_ is not dict and type_ not in _JSON_TYPES:
            return [self.decode(data) for data in datas]  # (dataclasses...: one at a time)
        loads_ = orjson.loads
        try:
            objs = [None if data is None else loads_(data) for data in datas]
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"not valid JSON ({exc})") from exc
        if type_ in _JSON_TYPES:  # as they came (the usual case), or one at a time: conversions, errors
            if all(type(obj) is type_ or obj is None for obj in objs):
                return objs
            return [self.decode(data) for data in datas]
        if type_ is dict:
            for obj in objs:
                if type(obj) is not dict and obj is not None:
                    raise DecodeError(f"expected dict, got {type(obj).__name__}: {obj!r:.80}")
        return objs

    def _checked_record(self, value: Any, build: RecordDecoder) -> Any:
        """What is sent to a dataclass topic that is not that dataclass (its data as a dict, say), checked
        as a record read from the topic would be: an EncodeError names the field, before anything is sent,
        rather than a decode error at every reader. (An instance is sent as it is: it was built.)"""
        is_instance = dataclasses.is_dataclass(value) and not isinstance(value, type)
        data = dataclasses.asdict(value) if is_instance else value
        if not isinstance(data, dict):
            raise EncodeError(f"expected {build.type.__name__} (or its fields as a dict), got "
                              f"{type(value).__name__}: {value!r:.80}")
        try:
            return build(data)
        except (TypeError, DecodeError) as exc:
            raise EncodeError(f"not a valid {build.type.__name__}: {exc}") from exc

    def _record(self, obj: Any, build: RecordDecoder) -> Any:
        if not isinstance(obj, dict):
            raise DecodeError(f"expected a JSON object for {build.type.__name__}, got {obj!r:.80}")
        try:
            return build(obj)
        except TypeError as exc:
            raise DecodeError(f"cannot build {build.type.__name__}: {exc}") from exc


SERIALIZERS = ("json", "str", "raw")


class PairCodec:
    """A table join's value, (left row, right row): one JSON array, each side built into its own table's
    value type (a dataclass, a pydantic model... whatever format each side's topic is in; a side that is a
    join's result, its own pair), a missing side None. So the rows of a join's result are of the types its
    tables hold, not plain dicts. A side that no longer fits its type (a row written before the type lost
    a field) is read as the plain data it is, with a WARNING once: a join's rows are rewritten as its sides
    change, and a restore must not stop on the older ones."""

    name = "json"

    def __init__(self, left: JsonSide, right: JsonSide) -> None:
        self._sides = (left, right)
        self._json = JsonCodec()
        self._warned = False

    def encode(self, value: Any) -> bytes | None:
        return self._json.encode(value)

    def decode(self, data: bytes | None) -> Any:
        return self.from_json(self._json.decode(data))

    def from_json(self, obj: Any) -> Any:
        if obj is None:
            return None
        if not isinstance(obj, list) or len(obj) != 2:
            raise DecodeError(f"expected a pair of rows, got {obj!r:.80}")
        return tuple(None if row is None else self._side(side, row)
                     for side, row in zip(self._sides, obj, strict=True))

    def _side(self, side: JsonSide, row: Any) -> Any:
        try:
            return side.from_json(row)
        except DecodeError as exc:
            if not self._warned:
                self._warned = True
                log.warning("a table join's row does not fit its table's type any more (%s); such rows are "
                            "read as plain data until the join rewrites them", exc)
            return row

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        return [self.decode(data) for data in datas]


JsonSide = JsonCodec | PairCodec  # how one side of a join's pair is read back


@dataclasses.dataclass(frozen=True)
class JoinPair:
    """The value format of a table join's result (a CodecFormat): `PairCodec` of its two sides."""

    left: JsonSide
    right: JsonSide
    name: str = "json"

    def codec(self, type_: type | None, *, topic: str, is_key: bool) -> Codec:
        return PairCodec(self.left, self.right)

    @staticmethod
    def side(value_codec: Codec, value_type: type | None) -> JsonSide:
        """How a joined table's rows are read back in the pair: its own pair if it is a join's result,
        else JSON built into its value type."""
        return value_codec if isinstance(value_codec, PairCodec) else JsonCodec(value_type)


class CodecFormat(Protocol):
    """A serializer declared as a format rather than by name (engine.schemas: Avro(), Protobuf()...): it makes
    the codec of one topic's key or value."""

    name: str

    def codec(self, type_: type | None, *, topic: str, is_key: bool) -> Codec: ...


def codec_for(type_: type | None, serializer: str | CodecFormat | None = None, *, topic: str = "",
              is_key: bool = False) -> Codec:
    """The codec for a declared type: bytes → raw, str → str, anything else → JSON, unless told (a name, or
    a format that makes the codec of `topic`'s key or value)."""
    if serializer is not None and not isinstance(serializer, str):
        return serializer.codec(type_, topic=topic, is_key=is_key)
    if serializer is None:
        serializer = "raw" if type_ is bytes else "str" if type_ is str else "json"
    if serializer == "json":
        return JsonCodec(type_)
    if serializer == "str":
        return StrCodec()
    if serializer == "raw":
        return RawCodec()
    raise ConfigError(f"unknown serializer {serializer!r}; expected one of {', '.join(SERIALIZERS)}")


def decode_text(codec: Codec, text: str, declared: type | None) -> Any:
    """A key or value as a person types it (on a command line, in a URL), decoded with `codec`, so its type
    is checked the same way as a record's. The JSON codec of an undeclared or str type takes a bare word
    that is not JSON as the string itself: typing `ada` means "ada", without the quotes a shell would eat.
    A registry format's codec (engine.schemas) reads the text as JSON into its declared type, by the same
    rule."""
    from_text = getattr(codec, "from_text", None)  # (a registry codec's: its bytes are not what one types)
    try:
        return from_text(text) if from_text is not None else codec.decode(text.encode())
    except DecodeError:
        if (codec.name == "json" or from_text is not None) and declared in (None, str):
            return text
        raise


# How values orjson cannot write itself become plain data in engine's JSON (a record of a JSON topic, a
# query's answer, the CLI's output), and how plain data becomes such a value again (a JSON topic declared
# with that type: an internal topic a pipeline re-keys them through), by type: the codec module of a format
# registers its records' (engine.schemas.protobuf: messages in Protobuf's JSON mapping).
PLAIN: dict[type, Callable[[Any], Any]] = {}
FROM_PLAIN: dict[type, Callable[[type, Any], Any]] = {}


def _plain(value: Any) -> Any:
    """orjson's `default`: a pydantic model as its JSON data, a registered type as its converter says."""
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    for kind, convert in PLAIN.items():
        if isinstance(value, kind):
            return convert(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """JSON for engine's own metadata (headers, replies, CLI output, query answers)."""
    return _right_sized(orjson.dumps(value, default=_plain))


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def loads_many(documents: list[bytes]) -> list[Any]:
    """Decode many JSON documents in one call, as one array: one call into orjson instead of one per
    document, which matters when a table export decodes millions of stored values. Values come back as plain
    JSON types."""
    try:
        decoded: list[Any] = orjson.loads(b"[" + b",".join(documents) + b"]")
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"a stored value is not valid JSON: {exc}") from exc
    return decoded
