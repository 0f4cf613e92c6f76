"""Table joins on the driver: an app that keeps two tables from topics and joins them every way, and the
join of two final states computed here."""

from __future__ import annotations

from typing import Any

import engine
from engine import testing


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
