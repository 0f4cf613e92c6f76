"""Foreign-key table joins (`orders.join(customers, foreign_key=fn)`, `left_join`) on the test driver, the two
tables partitioned differently (3 and 2 partitions): a row joined with the row its foreign key names, the old
pairing retracted when the foreign key changes, either row deleted, and a seeded mix of updates checked
against the join of the two tables' final states, computed here."""

from __future__ import annotations

import random
from typing import Any

import engine
from engine.testing import TestDriver
from tests.unit.engine.table_join_helpers import keep_rows


def fk_app() -> tuple[engine.App, Any, Any, Any, Any]:
    app = engine.App("fk", broker="memory://unused")
    orders_in = app.topic("orders-in", key_type=str, value_type=dict, partitions=3)
    customers_in = app.topic("customers-in", key_type=str, value_type=dict, partitions=2)
    orders = app.Table("orders", key_type=str, value_type=dict, partitions=3)
    customers = app.Table("customers", key_type=str, value_type=dict, partitions=2)
    app.agent(orders_in, name="take_orders")(keep_rows(orders))
    app.agent(customers_in, name="take_customers")(keep_rows(customers))
    inner = orders.join(customers, foreign_key=lambda order: order.get("customer"))
    left = orders.left_join(customers, foreign_key=lambda order: order.get("customer"))
    return app, orders_in, customers_in, inner, left


def test_a_row_joins_the_row_its_foreign_key_names_and_follows_both_sides() -> None:
    app, orders_in, customers_in, inner, left = fk_app()
    with TestDriver(app) as driver:
        driver.send(orders_in, key="o1", value={"customer": "c1", "n": 1})
        assert driver.table(inner.name) == {}
        assert driver.table(left.name) == {"o1": ({"customer": "c1", "n": 1}, None)}
        driver.send(customers_in, key="c1", value={"name": "ann"})
        driver.send(customers_in, key="c2", value={"name": "bob"})
        both = {"o1": ({"customer": "c1", "n": 1}, {"name": "ann"})}
        assert driver.table(inner.name) == both
        assert driver.table(left.name) == both
        driver.send(customers_in, key="c1", value={"name": "ann b."})  # the other row changes
        assert driver.table(inner.name) == {"o1": ({"customer": "c1", "n": 1}, {"name": "ann b."})}
        driver.send(orders_in, key="o1", value={"customer": "c2", "n": 1})  # the foreign key changes
        moved = {"o1": ({"customer": "c2", "n": 1}, {"name": "bob"})}
        assert driver.table(inner.name) == moved
        driver.send(customers_in, key="c1", value={"name": "ann c."})  # the old pairing is gone for good
        assert driver.table(inner.name) == moved
        driver.send(customers_in, key="c2", value={"delete": True})  # the other row is deleted
        assert driver.table(inner.name) == {}
        assert driver.table(left.name) == {"o1": ({"customer": "c2", "n": 1}, None)}
        driver.send(orders_in, key="o2", value={"n": 2})  # no foreign key
        assert driver.table(left.name) == {"o1": ({"customer": "c2", "n": 1}, None), "o2": ({"n": 2}, None)}
        driver.send(orders_in, key="o1", value={"delete": True})  # the row itself is deleted
        assert driver.table(left.name) == {"o2": ({"n": 2}, None)}
        driver.send(customers_in, key="c2", value={"name": "bob again"})
        assert driver.table(inner.name) == {}


def test_a_seeded_mix_of_updates_ends_as_the_join_of_the_final_states() -> None:
    rng = random.Random(3)
    app, orders_in, customers_in, inner, left = fk_app()
    orders: dict[str, dict[str, Any]] = {}
    customers: dict[str, dict[str, Any]] = {}
    with TestDriver(app) as driver:
        for n in range(300):
            if rng.random() < 0.6:
                key = f"o{rng.randrange(30)}"
                if rng.random() < 0.15:
                    orders.pop(key, None)
                    driver.send(orders_in, key=key, value={"delete": True})
                else:
                    orders[key] = {"customer": f"c{rng.randrange(8)}", "n": n}
                    driver.send(orders_in, key=key, value=orders[key])
            else:
                key = f"c{rng.randrange(8)}"
                if rng.random() < 0.2:
                    customers.pop(key, None)
                    driver.send(customers_in, key=key, value={"delete": True})
                else:
                    customers[key] = {"name": f"name-{n}"}
                    driver.send(customers_in, key=key, value=customers[key])
        assert driver.table(inner.name) == {key: (row, customers[row["customer"]])
                                            for key, row in orders.items() if row["customer"] in customers}
        assert driver.table(left.name) == {
            key: (row, customers.get(row["customer"])) for key, row in orders.items()}
