"""JSON Schema in Confluent's wire format: the payload is JSON, checked against the schema on the way out
and on the way in, into the declared type.

jsonschema lives here and only here: the reference validator for Python (the one Confluent's own JSON
serializer uses), every draft, its errors naming the path of what does not fit. A validator is compiled once
per schema (the codec's own, and each writer's by id). The payload itself is engine's JSON (engine.codecs).
The schema is given, or derived from a pydantic model (its own `model_json_schema`) or a dataclass
(through pydantic, when installed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jsonschema

from engine.codecs import dumps, loads
from engine.errors import ConfigError, DecodeError, EncodeError
from engine.schemas.codecs import RegistryCodec, SubjectStrategy
from engine.schemas.models import as_dict, builder, is_record, json_schema_of
from engine.schemas.registry import SchemaText
from engine.schemas.wire import HEADER

if TYPE_CHECKING:
    from engine.schemas.codecs import Reader


class JsonSchemaCodec(RegistryCodec):
    name = "json_schema"

    def __init__(self, type_: type | None, schema: str | dict[str, Any] | None, *, topic: str, is_key: bool,
                 subject: SubjectStrategy, register: bool) -> None:
        super().__init__(topic=topic, is_key=is_key, subject=subject, register=register)
        if schema is None:
            if type_ is None or not is_record(type_):
                raise ConfigError(f"topic {topic!r}: a JSON Schema codec needs a schema, or a pydantic model "
                                  f"or dataclass type to derive it from (got {type_!r})")
            schema = json_schema_of(type_)
        self.type = type_
        self.schema: dict[str, Any] = loads(schema) if isinstance(schema, str) else schema
        self._validator = _validator(self.schema, topic)
        self._text = dumps(self.schema).decode()
        self._build = self._checked = builder(type_)

    def schema_text(self) -> SchemaText:
        return SchemaText(self._text, "JSON")

    def record_name(self) -> str:
        title = self.schema.get("title")
        if not title:
            raise ConfigError(f"topic {self.topic!r}: a record subject strategy needs the schema's title")
        return str(title)

    def adopt(self, written: SchemaText) -> None:
        self._validator = _validator(loads(written.text), self.topic)

    def payload(self, value: Any) -> bytes:
        data = as_dict(value)
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(data))
        if error is not None:
            raise EncodeError(f"does not fit the JSON schema of topic {self.topic!r}: {_where(error)}")
        try:
            return dumps(data)
        except TypeError as exc:
            raise EncodeError(f"cannot encode {type(value).__name__} as JSON: {exc}") from exc

    def reader(self, written: SchemaText) -> Reader:
        if written.kind != "JSON":
            raise ValueError(f"it is a {written.kind} schema")
        validator = _validator(loads(written.text), self.topic)
        build = self._build

        def decode(data: bytes) -> Any:
            try:
                obj = loads(data[HEADER:])
            except ValueError as exc:  # (orjson's JSONDecodeError)
                raise DecodeError(f"not valid JSON ({exc})") from exc
            error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
            if error is not None:
                raise DecodeError(f"does not fit its JSON schema: {_where(error)}")
            return obj if build is None else build(obj)

        return decode


def _validator(schema: dict[str, Any], topic: str) -> Any:
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise ConfigError(f"topic {topic!r}: not a valid JSON schema: {exc.message}") from exc
    return cls(schema)


def _where(error: Any) -> str:
    path = ".".join(str(p) for p in error.absolute_path) or "(the record)"
    return f"{path}: {error.message}"
