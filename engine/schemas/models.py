"""The record types a topic can declare beside plain ones: dataclasses and pydantic v2 models, seen the same
way by the codecs (their fields, a value as a dict, a value built from a dict). pydantic lives here and only
here, and is optional: without it a pydantic model simply is not one.

Why one place: the JSON codec, the registry codecs (Avro's and JSON Schema's schemas are derived from the
fields) and the dead letters' messages must agree on what a record is and on the field path a bad record
names.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from engine.errors import ConfigError, DecodeError, EncodeError

try:
    import pydantic
except ImportError:  # the `pydantic` extra not installed: no type is a model
    pydantic = None  # type: ignore[assignment]

MISSING: Any = dataclasses.MISSING  # a field without a default


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    annotation: Any
    default: Any = MISSING  # a plain default (a default factory's value is taken once)


def is_model(type_: Any) -> bool:
    """Whether `type_` is a pydantic model class."""
    return pydantic is not None and isinstance(type_, type) and issubclass(type_, pydantic.BaseModel)


def is_record(type_: Any) -> bool:
    """Whether `type_` is a record type: a dataclass or a pydantic model."""
    return (isinstance(type_, type) and dataclasses.is_dataclass(type_)) or is_model(type_)


def fields(type_: type) -> list[Field]:
    """A record type's fields, with their annotations resolved and their defaults."""
    hints = typing.get_type_hints(type_, include_extras=False)
    if is_model(type_):
        found = []
        for name, info in type_.model_fields.items():  # type: ignore[attr-defined]
            default = MISSING
            if not info.is_required():
                default = info.get_default(call_default_factory=True)
            found.append(Field(name, hints.get(name, info.annotation), default))
        return found
    found = []
    for f in dataclasses.fields(type_):
        default = f.default
        factory: Any = f.default_factory
        if default is MISSING and factory is not MISSING:
            default = factory()
        found.append(Field(f.name, hints[f.name], default))
    return found


def as_dict(value: Any) -> Any:
    """A record as plain data (nested records too); anything else as it is."""
    if is_model(type(value)):
        return value.model_dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [as_dict(item) for item in value]
    if isinstance(value, dict):
        return {key: as_dict(item) for key, item in value.items()}
    return value


def model_builder(type_: type) -> typing.Callable[[Any], Any]:
    """How a pydantic model is built from plain data: validated, a field that does not fit a DecodeError
    naming its path (`items.0.price`) and what was wrong."""
    validate = type_.model_validate  # type: ignore[attr-defined]

    def build(data: Any) -> Any:
        try:
            return validate(data)
        except pydantic.ValidationError as exc:
            raise DecodeError(f"not a valid {type_.__name__}: {_errors(exc)}") from None

    return build


_SCALARS: frozenset[Any] = frozenset({int, float, str, bool, bytes, type(None)})


def is_flat_dataclass(type_: Any) -> bool:
    """Whether `type_` is a dataclass whose fields are all scalars (or unions of them): data typed by a
    schema derived from it builds it as it is, without the field checks (a nested record would stay a
    dict)."""
    if not (isinstance(type_, type) and dataclasses.is_dataclass(type_)):
        return False
    for field in fields(type_):
        kinds = typing.get_args(field.annotation) or (field.annotation,)
        if not all(kind in _SCALARS for kind in kinds):
            return False
    return True


def builder(type_: type | None) -> typing.Callable[[Any], Any] | None:
    """How decoded plain data becomes the declared record type (None: not a record type, the data as it
    is): a model validated, a dataclass's fields checked (engine.typecheck)."""
    if type_ is None or not is_record(type_):
        return None
    if is_model(type_):
        return model_builder(type_)
    from engine.typecheck import record_decoder

    decoder = record_decoder(type_)

    def build(data: Any) -> Any:
        if not isinstance(data, dict):
            raise DecodeError(f"expected an object for {type_.__name__}, got {data!r:.80}")
        try:
            return decoder(data)
        except TypeError as exc:
            raise DecodeError(f"cannot build {type_.__name__}: {exc}") from exc

    return build


def model_json(value: Any) -> bytes:
    """A pydantic model as JSON, by pydantic (its own serializers: datetimes, decimals, enums)."""
    return value.model_dump_json().encode()  # type: ignore[no-any-return]


def check_model(type_: type, value: Any) -> Any:
    """`value` (a model, or plain data for one) as a model of `type_`, validated: an EncodeError naming the
    field that does not fit."""
    if type(value) is type_:
        return value
    try:
        return type_.model_validate(as_dict(value))  # type: ignore[attr-defined]
    except pydantic.ValidationError as exc:
        raise EncodeError(f"not a valid {type_.__name__}: {_errors(exc)}") from None


def json_schema_of(type_: type) -> dict[str, Any]:
    """The JSON schema of a pydantic model or a dataclass (pydantic derives both)."""
    if pydantic is None:
        raise ConfigError(f"deriving the JSON schema of {type_.__name__} needs pydantic (the `pydantic` "
                          "extra), or give the schema itself (JsonSchema(schema=...))")
    if is_model(type_):
        return type_.model_json_schema()  # type: ignore[attr-defined, no-any-return]
    return pydantic.TypeAdapter(type_).json_schema()


def _errors(exc: Any) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in error['loc']) or '(the record)'}: {error['msg']}"
                     for error in exc.errors())
