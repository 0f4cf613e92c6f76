"""Table-table joins on the in-memory broker: after updates and deletes on both sides, in any order, each
join's table equals the join of the two sides' final states, computed here; a deleted row retracts."""

from __future__ import annotations

import random
from typing import Any

import pytest

import engine
from engine import testing
from engine.errors import ConfigError


def keep_rows(table: Any) -> Any:
    """An agent keeping `table` as its topic says: a value sets the key's row, {"delete": true} deletes it."""

    async def keep(stream: Any) -> None:
        async for key, value in stream.items():
            if value.get("delete"):
                del table[key]
            else:
                table[key] = value

    return keep


def make_app() -> tuple[engine.App, Any, Any, dict[str, Any]]:
    app = engine.App("tjoin", broker=testing.memory_url(), store="memory://", commit_interval=0.05)
    orders_in = app.topic("orders-in", key_type=str, value_type=dict)
    customers_in = app.topic("customers-in", key_type=str, value_type=dict)
    orders = app.Table("orders", key_type=str, value_type=dict)
    customers = app.Table("customers", key_type=str, value_type=dict)

    app.agent(orders_in, name="take_orders")(keep_rows(orders))
    app.agent(customers_in, name="take_customers")(keep_rows(customers))
    joins = {"inner": orders.join(customers), "left": orders.left_join(customers),
             "outer": orders.outer_join(customers, name="both")}
    return app, orders_in, customers_in, joins


def expected(left: dict[str, Any], right: dict[str, Any], how: str) -> dict[str, tuple[Any, Any]]:
    keys = {"inner": left.keys() & right.keys(), "left": left.keys(),
            "outer": left.keys() | right.keys()}[how]
    return {k: (left.get(k), right.get(k)) for k in keys}


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
    with pytest.raises(ConfigError, match="neither windowed nor global"):
        plain.join(windowed.table)
    with pytest.raises(ConfigError, match="other key types"):
        plain.join(ints)
