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


@app.agent(orders_in)
async def take_orders(stream):
    async for key, value in stream.items():
        if value.get("delete"):
            if key in orders:
                del orders[key]
        else:
            orders[key] = value


@app.agent(customers_in)
async def take_customers(stream):
    async for key, value in stream.items():
        if value.get("delete"):
            if key in customers:
                del customers[key]
        else:
            customers[key] = value
