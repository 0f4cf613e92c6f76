"""A table-table join app: orders and customers (both keyed by customer id) and their left join; what
`engine worker -A tests.integration.table_join_apps:app` runs (ITEST_APP, ITEST_ORDERS, ITEST_CUSTOMERS)."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "itablejoin"), commit_interval=0.2)
orders_in = app.topic(os.environ.get("ITEST_ORDERS", "orders-in"), key_type=str, value_type=dict)
customers_in = app.topic(os.environ.get("ITEST_CUSTOMERS", "customers-in"), key_type=str, value_type=dict)
orders = app.Table("orders", key_type=str, value_type=dict)
customers = app.Table("customers", key_type=str, value_type=dict)
enriched = orders.left_join(customers, name="enriched")


def keep_rows(table):
    """An agent keeping `table` as its topic says: a value sets the key's row, {"delete": true} deletes it."""

    async def keep(stream):
        async for key, value in stream.items():
            if not value.get("delete"):
                table[key] = value
            elif key in table:
                del table[key]

    return keep


app.agent(orders_in, name="take_orders")(keep_rows(orders))
app.agent(customers_in, name="take_customers")(keep_rows(customers))
