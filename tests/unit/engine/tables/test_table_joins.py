"""Table-table joins on the in-memory broker: after updates and deletes on both sides, in any order, each
join's table equals the join of the two sides' final states, computed here; a deleted row retracts."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

import engine
from engine import testing
from engine.errors import ConfigError
from engine.testing import TestDriver
from tests.unit.engine.table_join_helpers import expected, make_app


async def test_joins_follow_both_sides_and_retract_deleted_rows():
    app, orders_in, customers_in, joins = make_app()
    left: dict[str, Any] = {}
    right: dict[str, Any] = {}
    updates = [("o", "c1", {"n": 1}), ("c", "c1", {"name": "ann"}), ("o", "c2", {"n": 2}),
               ("c", "c3", {"name": "cy"}), ("o", "c1", {"n": 3}), ("c", "c2", {"name": "bo"}),
               ("c", "c1", {"delete": True}), ("o", "c3", {"n": 4}), ("o", "c2", {"delete": True}),
               ("c", "c4", {"name": "di"})]
    async with testing.running(app):
        for side, key, value in updates:
            topic, state = (orders_in, left) if side == "o" else (customers_in, right)
            await topic.send(key=key, value=value)
            if value.get("delete"):
                state.pop(key, None)
            else:
                state[key] = value
            await testing.eventually(lambda: all(  # each step lands before the next: deletes find a row
                dict(joins[how].items()) == expected(left, right, how) for how in joins), 10)
        assert dict(joins["inner"].items()) == {"c3": ({"n": 4}, {"name": "cy"})}
        # A burst on both sides at once, deletes included: the joins converge to the final states' join.
        rng = random.Random(7)
        for i in range(60):
            side, key = rng.choice("oc"), f"c{rng.randrange(6)}"
            topic, state = (orders_in, left) if side == "o" else (customers_in, right)
            value = {"delete": True} if key in state and rng.random() < 0.3 else {"v": i}
            await topic.send(key=key, value=value)
            if value.get("delete"):
                del state[key]
            else:
                state[key] = value
        await testing.eventually(lambda: all(
            dict(joins[how].items()) == expected(left, right, how) for how in joins), 10)
    assert joins["outer"].name == "both"
    assert joins["left"].name == "orders-left-join-customers"


def test_only_plain_tables_with_the_same_key_type_join():
    app = engine.App("tjoin-bad", broker=testing.memory_url())
    plain = app.Table("plain", key_type=str)
    windowed = app.Table("windowed", key_type=str).tumbling(10)
    ints = app.Table("ints", key_type=int)
    with pytest.raises(ConfigError, match="'windowed' cannot be joined with another table: it is windowed"):
        plain.join(windowed.table)
    written = app.GlobalTable("written", key_type=str)
    with pytest.raises(ConfigError, match="it is global and written by agents"):
        plain.join(written)
    with pytest.raises(ConfigError, match="other key types"):
        plain.join(ints)


@dataclass
class Item:
    name: str
    price: int


@dataclass
class Stock:
    count: int


@dataclass
class Place:
    shelf: str


def test_a_joins_rows_read_back_keep_their_tables_types_a_join_of_a_join_too(
        caplog: pytest.LogCaptureFixture) -> None:
    """A join's rows are stored as JSON; read back (from the store, after a restore) each side is built into
    its table's value type, a side that is itself a join's result into its own pair. A side that no longer
    fits its type is read as plain data, with one WARNING, never a failed restore."""
    app = engine.App("typed-joins", topic_partitions=1)
    items, stock, places = (app.Table(name, source_topic=app.topic(name, key_type=str, value_type=kind))
                            for name, kind in (("items", Item), ("stock", Stock), ("places", Place)))
    first = items.left_join(stock)
    second = first.left_join(places)
    with TestDriver(app) as driver:
        for topic, key, value in [("items", "tea", Item("Tea", 3)), ("stock", "tea", Stock(40)),
                                  ("places", "tea", Place("B2")), ("items", "pie", Item("Pie", 5))]:
            driver.send(topic, key=key, value=value)
        driver.advance(1)
        assert driver.table(first.name) == {"tea": (Item("Tea", 3), Stock(40)), "pie": (Item("Pie", 5), None)}
        assert driver.table(second.name) == {"tea": ((Item("Tea", 3), Stock(40)), Place("B2")),
                                             "pie": ((Item("Pie", 5), None), None)}
    codec = first.value_codec
    old_row = b'[{"name": "Tea", "cost": 3}, {"count": 1}]'  # (Item had "cost" before "price")
    assert codec.decode(old_row) == ({"name": "Tea", "cost": 3}, Stock(1))
    codec.decode(b'[{"name": "Tea", "cost": 3}, null]')
    assert sum("does not fit its table's type" in r.getMessage() for r in caplog.records) == 1
