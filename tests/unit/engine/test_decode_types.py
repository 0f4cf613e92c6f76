"""A dataclass value's declared field types are checked when a record is decoded: a record with a field of
the wrong type is dead-lettered as a decode error naming the field, and its agent never sees it. Through the
test driver, as a user meets it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime  # noqa: TC003  # resolved at run time by the decoder (get_type_hints)
from typing import Any, Literal

import pytest

import engine
from engine import DecodeError
from engine.codecs import JsonCodec, codec_for
from engine.testing import TestDriver


@dataclass
class Card:
    number: str
    expires: int


@dataclass
class Payment:
    customer: str
    amount: float
    card: Card | None = None
    tags: list[str] | None = None
    extra: dict[str, int] | None = None


def payments_app() -> tuple[engine.App, Any, Any, list[Payment]]:
    app = engine.App("decode-types", broker="memory://unused", topic_partitions=1)
    source = app.topic("payments", key_type=str, value_type=Payment)
    seen: list[Payment] = []

    @app.agent(source)
    async def charge(stream: Any) -> None:
        async for payment in stream:
            seen.append(payment)
            if payment.amount < 0:
                raise ValueError("negative amount")

    return app, source, charge, seen


def test_a_field_of_the_wrong_type_is_dead_lettered_as_a_decode_error_naming_it() -> None:
    app, source, charge, seen = payments_app()
    with TestDriver(app) as driver:
        driver.send_raw(source, b"a", b'{"customer": "ada", "amount": "x"}')
        driver.send(source, key="b", value=Payment("bob", 2))  # an int where a float is declared: as JSON
        assert seen == [Payment("bob", 2)], "the agent never sees the wrong-typed record"
        [letter] = driver.dlq(charge)
        assert letter.error_type == "DecodeError"
        assert "Payment.amount: expected float, got str" in letter.error
        assert (letter.key, letter.value) == (b"a", b'{"customer": "ada", "amount": "x"}')


def test_an_int_where_a_float_is_declared_becomes_that_float_in_a_field_and_as_a_whole_value() -> None:
    """One rule for both: JSON's 2 (as many encoders write 2.0) for a float field and for a topic whose
    value_type is float; a bool is a number in neither."""
    payment = JsonCodec(Payment)
    amount = JsonCodec(float)
    for decoded in (payment.decode(b'{"customer": "ada", "amount": 2}').amount, amount.decode(b"2"),
                    amount.decode_many([b"2", b"2.5"])[0]):
        assert type(decoded) is float
        assert decoded == 2.0
    assert payment.decode(b'{"customer": "ada", "amount": 2.5}').amount == 2.5
    for codec, data in ((payment, b'{"customer": "ada", "amount": true}'), (amount, b"true")):
        with pytest.raises(DecodeError, match="expected float, got bool"):
            codec.decode(data)


def test_a_nested_dataclass_is_checked_and_built() -> None:
    app, source, charge, seen = payments_app()
    with TestDriver(app) as driver:
        driver.send(source, key="a", value=Payment("ada", 1.5, Card("4242", 2030), ["vip"], {"n": 1}))
        driver.send_raw(source, b"b",
                        b'{"customer": "bob", "amount": 1, "card": {"number": 4242, "expires": 1}}')
        driver.send_raw(source, b"c", b'{"customer": "cy", "amount": 1, "tags": ["ok", 3]}')
        driver.send_raw(source, b"d", b'{"customer": "di", "amount": 1, "extra": {"n": true}}')
        assert seen == [Payment("ada", 1.5, Card("4242", 2030), ["vip"], {"n": 1})]
        assert isinstance(seen[0].card, Card)
        errors = [letter.error for letter in driver.dlq(charge)]
        assert "Payment.card.number: expected str, got int" in errors[0]
        assert "Payment.tags[1]: expected str, got int" in errors[1]
        assert "Payment.extra['n']: expected int, got bool" in errors[2]


def test_a_dead_letter_carries_the_record_as_bytes_whatever_the_error() -> None:
    app, source, charge, _ = payments_app()
    with TestDriver(app) as driver:
        driver.send(source, key="a", value=Payment("ada", -1.0))  # the agent fails on it
        driver.send_raw(source, b"b", b'{"customer": "bob", "amount": null}')  # it does not decode
        failed, undecoded = driver.dlq(charge)
        assert (failed.error_type, failed.key, failed.value) == (
            "ValueError", b"a", b'{"customer":"ada","amount":-1.0,"card":null,"tags":null,"extra":null}')
        assert (undecoded.error_type, undecoded.key) == ("DecodeError", b"b")


@pytest.mark.parametrize(("document", "message"), [
    (b'{"customer": "ada", "amount": true}', "Payment.amount: expected float, got bool"),
    (b'{"customer": 1, "amount": 1}', "Payment.customer: expected str, got int"),
    (b'{"customer": "ada", "amount": 1, "card": []}', "Payment.card: expected Card or None, got list"),
    (b'{"customer": "ada", "amount": 1, "tags": "vip"}', "Payment.tags: expected list[str] or None, got str"),
])
def test_the_codec_names_the_field_and_the_types(document: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        codec_for(Payment).decode(document)


@dataclass
class Loose:
    anything: Any
    when: datetime
    kind: Literal["a", "b"]
    pair: tuple[int, int]


@dataclass
class Tree:
    label: str
    children: list[Tree]


def test_annotations_that_are_not_checked_take_what_json_gives() -> None:
    loose = codec_for(Loose).decode(b'{"anything": [1], "when": "2026-01-01", "kind": "c", "pair": [1, 2]}')
    assert loose == Loose([1], "2026-01-01", "c", [1, 2])  # type: ignore[arg-type]  # unchecked, as it came


def test_a_dataclass_that_contains_itself_is_checked_all_the_way_down() -> None:
    codec = codec_for(Tree)
    assert codec.decode(b'{"label": "a", "children": [{"label": "b", "children": []}]}') == Tree(
        "a", [Tree("b", [])])
    with pytest.raises(DecodeError, match=r"Tree.children\[0\].label: expected str, got int"):
        codec.decode(b'{"label": "a", "children": [{"label": 1, "children": []}]}')


@dataclass
class Checked:
    code: str

    def __post_init__(self) -> None:
        if self.code not in ("a", "b"):
            raise KeyError(self.code)  # a validation of the user's own: not the decoder's to rename


@dataclass
class Holder:
    inner: Checked


def test_an_error_of_a_nested_dataclass_s_own_is_not_taken_for_an_unknown_field() -> None:
    with pytest.raises(KeyError, match="'c'"):
        codec_for(Holder).decode(b'{"inner": {"code": "c"}}')


def test_what_is_sent_to_a_dataclass_topic_is_checked_when_sent():
    """Sent as a dict (or another shape) to a dataclass topic, a value was written as it was and failed at
    every reader; it is checked as a read record would be, and refused naming the field, before it is
    sent. An instance goes as it is."""
    app = engine.App("checked-send")
    payments = app.topic("payments", key_type=str, value_type=Payment)
    seen: list[Payment] = []

    @app.agent(payments)
    async def keep(stream):
        async for payment in stream:
            seen.append(payment)

    with TestDriver(app) as driver:
        driver.send(payments, key="a", value=Payment("ada", 2.5))
        driver.send(payments, key="a", value={"customer": "bob", "amount": 3})
        with pytest.raises(engine.errors.EncodeError, match=r"Payment.amount: expected float, got str"):
            driver.send(payments, key="a", value={"customer": "eve", "amount": "lots"})
        with pytest.raises(engine.errors.EncodeError, match="expected Payment"):
            driver.send(payments, key="a", value=["eve", 1.0])
    assert seen == [Payment("ada", 2.5), Payment("bob", 3.0)]
