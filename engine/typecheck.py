"""A dataclass's declared field types, compiled once into a decoder of the JSON object that holds it.

The JSON codec of a dataclass builds it from a decoded object; this module checks the object's fields
against their annotations first, so a record with a wrong-typed field is a `DecodeError` naming the field
(at the edge, dead-lettered as a decode error) rather than a `TypeError` deep in an agent. The decoder is
made once per dataclass, when its codec is created; per record it is one dict pass.

JSON decodes to exactly `dict`, `list`, `str`, `int`, `float`, `bool` and `None`, never to subclasses, so a
plain annotation is checked by the exact type of the value (`type(value) in kinds`): `bool` is not taken
for `int`, and an `int` where a `float` is declared becomes that float (many encoders write 2.0 as 2; the
value is then what it was declared, in the record and on re-encoding). The same rule checks a whole value
of a plain type (`plain_decoder`: a topic's `value_type=float`). Checked:
`int`, `float`, `str`, `bool`, `bytes` (which JSON never yields), `list`, `dict`, `None`, unions of these
(`X | None`, `Optional[X]`), `list[X]`, `dict[K, X]` (the values; JSON's keys are always strings), a nested
dataclass (built, as the outer one is) and `Annotated[X, ...]` (as X). Any other annotation (`Any`, a
`Literal`, a `tuple`, a `datetime`, an `Enum`, a `TypedDict`, a class that is not a dataclass, an annotation
that does not resolve) is accepted as it comes, as it was before the check: those would need a conversion
or a per-value cost this decoder does not take on.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from engine.errors import DecodeError

# A value's conversion for an annotation that its exact type does not settle: the value as the field gets it
# (a nested dataclass built, a list's items checked), or _Mismatch.
Convert = Callable[[Any], Any]

_PLAIN: frozenset[type] = frozenset({int, float, str, bool, bytes, list, dict, type(None)})


class _Mismatch(Exception):
    """A value that does not fit its annotation: what was expected, what came, and where (innermost
    first; the record decoder turns it into one message)."""

    def __init__(self, expected: str, value: Any) -> None:
        super().__init__(expected)
        self.expected = expected
        self.value = value
        self.where: list[str] = []


class _Check:
    """One annotation: the exact types that pass as they are, else a conversion (or none: a mismatch)."""

    __slots__ = ("convert", "expected", "kinds")

    def __init__(self, kinds: frozenset[type], convert: Convert | None, expected: str) -> None:
        self.kinds = kinds
        self.convert = convert
        self.expected = expected

    def take(self, value: Any, where: str | tuple[Any]) -> Any:
        """A value whose exact type is not in `kinds` (the caller looked), as the field gets it; a mismatch
        says where it is (a field's `.name`, or `(index or key,)`) and all this check takes."""
        try:
            if self.convert is None:
                raise _Mismatch(self.expected, value)
            return self.convert(value)
        except _Mismatch as exc:
            if not exc.where:  # the value itself, not something inside it
                exc.expected = self.expected
            exc.where.append(where if isinstance(where, str) else f"[{where[0]!r}]")
            raise


def _int_as_float(value: Any) -> float:
    if type(value) is int:  # (exactly: a bool is no number here)
        return float(value)
    raise _Mismatch("float", value)


_FLOAT = _Check(frozenset({float}), _int_as_float, "float")


def plain_decoder(type_: type) -> Callable[[Any], Any] | None:
    """A whole decoded value declared a plain type (`int`, `float`, `str`, `bool`, `list`, `dict`), checked
    and converted by the rule of a field of that type: the value, or DecodeError. None for other types."""
    if type_ not in _PLAIN:
        return None
    check = _Compiler().check(type_)
    assert check is not None
    kinds = check.kinds

    def decode(value: Any) -> Any:
        if type(value) in kinds:
            return value
        try:
            return check.take(value, type_.__name__)
        except _Mismatch as exc:
            raise DecodeError(f"expected {exc.expected}, got {type(exc.value).__name__}: {exc.value!r:.80}"
                              ) from None

    return decode


# Every type a decoded JSON value can have: an unchecked field passes them as they are (no call per value).
_ANY_JSON: frozenset[type] = frozenset({dict, list, str, int, float, bool, type(None)})


class RecordDecoder:
    """Builds `type_` from a decoded JSON object whose fields are all known and fit their annotations."""

    __slots__ = ("checks", "kinds", "type")

    def __init__(self, type_: type) -> None:
        self.type = type_
        # Per init field: the exact types that pass as they are (one lookup per field of a record), and the
        # check that takes any other value (None: the annotation is not checked, any value passes).
        self.kinds: dict[str, frozenset[type]] = {}
        self.checks: dict[str, _Check | None] = {}

    def __call__(self, obj: dict[str, Any]) -> Any:
        """The dataclass, or DecodeError naming an unknown field or the first wrong one (a missing field
        is the constructor's TypeError)."""
        try:
            return self.type(**self.fields(obj))
        except _Mismatch as exc:
            where = "".join(reversed(exc.where))
            raise DecodeError(f"{self.type.__name__}{where}: expected {exc.expected}, "
                              f"got {type(exc.value).__name__}: {exc.value!r:.80}") from None

    def fields(self, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` with each field checked (converted where its annotation builds something)."""
        kinds = self.kinds
        try:
            for name, value in obj.items():
                if type(value) not in kinds[name]:
                    obj[name] = self._other(name, value)  # a value replaced, no key added: iterating holds
        except KeyError:
            unknown = sorted(obj.keys() - kinds.keys())
            if not unknown:  # a KeyError of a nested dataclass's own making (its __post_init__)
                raise
            raise DecodeError(f"{self.type.__name__} has no field(s) {unknown}") from None
        return obj

    def _other(self, name: str, value: Any) -> Any:
        check = self.checks[name]
        return value if check is None else check.take(value, f".{name}")

    def nested(self, value: Any) -> Any:
        """This dataclass as the field of another: built from its object, or a mismatch."""
        if type(value) is not dict:
            raise _Mismatch(self.type.__name__, value)
        return self.type(**self.fields(value))


def record_decoder(type_: type) -> RecordDecoder:
    """The decoder of dataclass `type_` (its nested dataclasses' too, each once: recursion allowed)."""
    return _Compiler().record(type_)


class _Compiler:
    def __init__(self) -> None:
        self.records: dict[type, RecordDecoder] = {}

    def record(self, type_: type) -> RecordDecoder:
        found = self.records.get(type_)
        if found is not None:
            return found
        decoder = self.records[type_] = RecordDecoder(type_)  # before its fields: a field may name it
        try:
            hints = typing.get_type_hints(type_, include_extras=True)
        except Exception:  # an annotation that does not resolve (a name local to a function): accepted
            hints = {}
        for field in dataclasses.fields(type_):
            if field.init:
                check = decoder.checks[field.name] = self.check(hints.get(field.name, Any))
                decoder.kinds[field.name] = _ANY_JSON if check is None else check.kinds
        return decoder

    def check(self, annotation: Any) -> _Check | None:
        """The check of `annotation`, or None where it is not checked (see the module's docstring)."""
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            return self.check(typing.get_args(annotation)[0])
        if origin is typing.Union or origin is types.UnionType:
            return self.union([self.check(arg) for arg in typing.get_args(annotation)])
        if annotation is None or annotation is type(None):
            return _Check(frozenset({type(None)}), None, "None")
        if annotation is float:
            return _FLOAT
        if annotation in _PLAIN:
            return _Check(frozenset({annotation}), None, annotation.__name__)
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            return _Check(frozenset(), self.record(annotation).nested, annotation.__name__)
        if origin is list:
            return self.items(annotation)
        if origin is dict:
            return self.values(annotation)
        return None

    def items(self, annotation: Any) -> _Check | None:
        (arg,) = typing.get_args(annotation)
        item = self.check(arg)
        if item is None:
            return _Check(frozenset({list}), None, "list")
        kinds = item.kinds

        def convert(value: Any) -> Any:
            if type(value) is not list:
                raise _Mismatch(expected, value)
            if kinds.issuperset(map(type, value)):  # plain items, all fitting: one pass in C
                return value
            for index, element in enumerate(value):
                if type(element) not in kinds:
                    value[index] = item.take(element, (index,))
            return value

        expected = f"list[{item.expected}]"
        return _Check(frozenset(), convert, expected)

    def values(self, annotation: Any) -> _Check | None:
        _, arg = typing.get_args(annotation)
        item = self.check(arg)
        if item is None:
            return _Check(frozenset({dict}), None, "dict")
        kinds = item.kinds

        def convert(value: Any) -> Any:
            if type(value) is not dict:
                raise _Mismatch(expected, value)
            if kinds.issuperset(map(type, value.values())):  # plain values, all fitting: one pass in C
                return value
            for key, element in value.items():
                if type(element) not in kinds:
                    value[key] = item.take(element, (key,))
            return value

        expected = f"dict[str, {item.expected}]"
        return _Check(frozenset(), convert, expected)

    @staticmethod
    def union(members: list[_Check | None]) -> _Check | None:
        """A union: its plain members' types pass as they are; the others' conversions are tried in turn."""
        if any(member is None for member in members):
            return None  # one member accepts anything: so does the union
        checks = [member for member in members if member is not None]
        kinds = frozenset().union(*(check.kinds for check in checks))
        converts = [check.convert for check in checks if check.convert is not None]
        expected = " or ".join(check.expected for check in checks)
        if not converts:
            return _Check(kinds, None, expected)
        if len(converts) == 1:  # (`X | None`, the usual case): the member's own conversion
            return _Check(kinds, converts[0], expected)

        def convert_any(value: Any) -> Any:
            for each in converts:
                try:
                    return each(value)
                except _Mismatch:
                    continue
            raise _Mismatch(expected, value)
        return _Check(kinds, convert_any, expected)
