"""Joins of tables over source topics (`app.Table(name, source_topic=...)`, Kafka Streams' `builder.table`)
on the test driver: the topic is the table's changelog, a null value (a tombstone) deletes the key and
retracts its join results. Step by step by hand, then a seeded mix of updates and tombstones checked against
the join of both topics' final states, computed here; by key (inner, left, outer), by foreign key (source
tables of 3 and 2 partitions), a source table joined with a table that has its own changelog, and source
tables of other partition counts refused a join by key at start, as Kafka Streams refuses them."""

from __future__ import annotations

import random
from typing import Any

import pytest

import engine
from engine import testing
from engine.errors import TopologyError
from engine.testing import TestDriver
from tests.unit.engine.table_join_helpers import expected, keep_rows

COMPACTED = {"cleanup.policy": "compact"}


def by_key_app() -> tuple[engine.App, dict[str, Any]]:
    app = engine.App("srcjoin", broker="memory://unused")
    orders = app.Table("orders", source_topic=app.topic("orders", key_type=str, value_type=dict))
    customers = app.Table("customers", source_topic=app.topic("customers", key_type=str, value_type=dict))
    joins = {"inner": orders.join(customers), "left": orders.left_join(customers),
             "outer": orders.outer_join(customers)}
    return app, joins


def test_source_tables_join_by_key_and_a_tombstone_retracts() -> None:
    app, joins = by_key_app()
    with TestDriver(app) as driver:
        driver.send("orders", key="c1", value={"n": 1})
        assert driver.table(joins["inner"].name) == {}
        assert driver.table(joins["left"].name) == {"c1": ({"n": 1}, None)}
        driver.send("customers", key="c1", value={"name": "ann"})
        driver.send("customers", key="c2", value={"name": "bo"})
        assert driver.table(joins["inner"].name) == {"c1": ({"n": 1}, {"name": "ann"})}
        assert driver.table(joins["outer"].name) == {"c1": ({"n": 1}, {"name": "ann"}),
                                                      "c2": (None, {"name": "bo"})}
        driver.send("orders", key="c1", value={"n": 2})  # an update replaces the row
        assert driver.table(joins["inner"].name) == {"c1": ({"n": 2}, {"name": "ann"})}
        driver.send("customers", key="c1", value=None)  # a tombstone on the right
        assert driver.table(joins["inner"].name) == {}
        assert driver.table(joins["left"].name) == {"c1": ({"n": 2}, None)}
        driver.send("orders", key="c1", value=None)  # and on the left: nothing of c1 is left
        assert driver.table(joins["left"].name) == {}
        assert driver.table(joins["outer"].name) == {"c2": (None, {"name": "bo"})}
        assert driver.table("orders") == {}
        driver.send("customers", key="c2", value=None)
        assert driver.table(joins["outer"].name) == {}


def test_a_seeded_mix_with_tombstones_ends_as_the_join_of_the_final_states() -> None:
    rng = random.Random(5)
    app, joins = by_key_app()
    states: dict[str, dict[str, Any]] = {"orders": {}, "customers": {}}
    with TestDriver(app) as driver:
        for i in range(300):
            topic, key = rng.choice(["orders", "customers"]), f"c{rng.randrange(12)}"
            value = None if rng.random() < 0.25 else {"v": i}
            driver.send(topic, key=key, value=value)
            if value is None:
                states[topic].pop(key, None)
            else:
                states[topic][key] = value
        assert sum(1 for v in states["orders"].values() if v) > 3  # rows left on both sides
        for how, joined in joins.items():
            assert driver.table(joined.name) == expected(states["orders"], states["customers"], how)


def test_a_source_table_joins_a_table_with_its_own_changelog_either_way_round() -> None:
    app = engine.App("srcjoin-mixed", broker="memory://unused")
    customers_in = app.topic("customers-in", key_type=str, value_type=dict)
    orders = app.Table("orders", source_topic=app.topic("orders", key_type=str, value_type=dict))
    customers = app.Table("customers", key_type=str, value_type=dict)
    app.agent(customers_in, name="take_customers")(keep_rows(customers))
    left, right = orders.left_join(customers), customers.left_join(orders)
    with TestDriver(app) as driver:
        driver.send("orders", key="c1", value={"n": 1})
        driver.send(customers_in, key="c1", value={"name": "ann"})
        driver.send(customers_in, key="c2", value={"name": "bo"})
        assert driver.table(left.name) == {"c1": ({"n": 1}, {"name": "ann"})}
        assert driver.table(right.name) == {"c1": ({"name": "ann"}, {"n": 1}), "c2": ({"name": "bo"}, None)}
        driver.send("orders", key="c1", value=None)
        assert driver.table(left.name) == {}
        assert driver.table(right.name) == {"c1": ({"name": "ann"}, None), "c2": ({"name": "bo"}, None)}


def fk_app() -> tuple[engine.App, Any, Any]:
    app = engine.App("srcjoin-fk", broker="memory://unused")
    orders = app.Table("orders", source_topic=app.topic("orders", key_type=str, value_type=dict,
                                                        partitions=3))
    customers = app.Table("customers", source_topic=app.topic("customers", key_type=str, value_type=dict,
                                                              partitions=2))
    inner = orders.join(customers, foreign_key=lambda order: order.get("customer"))
    left = orders.left_join(customers, foreign_key=lambda order: order.get("customer"))
    return app, inner, left


def test_source_tables_join_by_foreign_key_and_tombstones_retract() -> None:
    app, inner, left = fk_app()
    with TestDriver(app) as driver:
        driver.send("orders", key="o1", value={"customer": "c1"})
        driver.send("customers", key="c1", value={"name": "ann"})
        assert driver.table(inner.name) == {"o1": ({"customer": "c1"}, {"name": "ann"})}
        driver.send("customers", key="c1", value=None)  # the other row's tombstone
        assert driver.table(inner.name) == {}
        assert driver.table(left.name) == {"o1": ({"customer": "c1"}, None)}
        driver.send("customers", key="c1", value={"name": "ann b."})
        assert driver.table(inner.name) == {"o1": ({"customer": "c1"}, {"name": "ann b."})}
        driver.send("orders", key="o1", value=None)  # the row's own tombstone
        assert driver.table(inner.name) == {}
        assert driver.table(left.name) == {}


def test_a_seeded_mix_by_foreign_key_with_tombstones_ends_as_the_join_of_the_final_states() -> None:
    rng = random.Random(8)
    app, inner, left = fk_app()
    orders: dict[str, Any] = {}
    customers: dict[str, Any] = {}
    with TestDriver(app) as driver:
        for i in range(300):
            if rng.random() < 0.5:
                key = f"o{rng.randrange(20)}"
                value = None if rng.random() < 0.2 else {"customer": f"c{rng.randrange(6)}", "v": i}
                topic, state = "orders", orders
            else:
                key, value = f"c{rng.randrange(6)}", None if rng.random() < 0.3 else {"v": i}
                topic, state = "customers", customers
            driver.send(topic, key=key, value=value)
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        assert driver.table(left.name) == {key: (row, customers.get(row["customer"]))
                                           for key, row in orders.items()}
        assert driver.table(inner.name) == {key: (row, customers[row["customer"]])
                                            for key, row in orders.items() if row["customer"] in customers}


async def test_source_tables_of_other_partition_counts_are_refused_at_start_naming_both() -> None:
    """As Kafka Streams: tables joined by key must be co-partitioned (by foreign key they need not be)."""
    url = testing.memory_url()
    broker = testing.broker_for(url)
    broker.create_topic("orders", 4, COMPACTED)
    broker.create_topic("customers", 3, COMPACTED)
    app = engine.App("srcjoin-counts", broker=url)
    orders = app.Table("orders", source_topic=app.topic("orders", key_type=str, value_type=dict))
    customers = app.Table("customers", source_topic=app.topic("customers", key_type=str, value_type=dict))
    orders.left_join(customers, name="enriched")
    worker = engine.Worker(app, app.settings())
    with pytest.raises(TopologyError) as raised:
        await worker.start()
    await worker.stop()
    assert str(raised.value) == (
        "the topology does not fit the broker: tables 'orders' and 'customers' are joined by key (into table "
        "'enriched'), so their topics must have the same number of partitions, but 'orders' has 4, "
        "'customers' has 3; declare the same partitions= on both, or recreate the smaller one (and re-key "
        "with group_by if the source cannot change)")


def test_a_global_table_over_a_topic_joins_tables_by_key_and_by_foreign_key_as_a_table_over_it_does() -> None:
    """Seeded updates and tombstones: each join of a table with a global table over a topic (by key, every
    way; by foreign key, the global's topic partitioned otherwise) ends as the join of the final states; the
    global table itself still holds every key on every worker."""
    rng = random.Random(8)
    app = engine.App("globaljoin", broker="memory://unused")
    orders = app.Table("orders", source_topic=app.topic("orders", key_type=str, value_type=dict,
                                                        partitions=3))
    customers = app.GlobalTable("customers", source_topic=app.topic("customers", key_type=str,
                                                                     value_type=dict, partitions=3))
    countries = app.GlobalTable("countries", source_topic=app.topic("countries", key_type=str,
                                                                     value_type=dict, partitions=2))
    by_key = {"inner": orders.join(customers), "left": orders.left_join(customers),
              "outer": orders.outer_join(customers)}
    by_country = {"inner": orders.join(countries, foreign_key=lambda order: order.get("country")),
                  "left": orders.left_join(countries, foreign_key=lambda order: order.get("country"))}
    states: dict[str, dict[str, Any]] = {"orders": {}, "customers": {}, "countries": {}}
    with TestDriver(app) as driver:
        for i in range(400):
            topic = rng.choice(["orders", "customers", "countries"])
            key = f"c{rng.randrange(5)}" if topic == "countries" else f"k{rng.randrange(12)}"
            value: dict[str, Any] | None = {"v": i}
            if topic == "orders":
                value = {"v": i, "country": f"c{rng.randrange(6)}"}
            if rng.random() < 0.2:
                value = None
            driver.send(topic, key=key, value=value)
            if value is None:
                states[topic].pop(key, None)
            else:
                states[topic][key] = value
        for how, joined in by_key.items():
            assert driver.table(joined.name) == expected(states["orders"], states["customers"], how)
        for how, joined in by_country.items():
            countries = states["countries"]
            want = {key: (row, countries.get(row["country"])) for key, row in states["orders"].items()
                    if how == "left" or row["country"] in countries}
            assert driver.table(joined.name) == want
        assert driver.table("customers") == states["customers"]
        assert driver.table("customers-partitioned") == states["customers"]
        assert sum(1 for pair in driver.table(by_key["inner"].name).values() if pair[1]) > 3

