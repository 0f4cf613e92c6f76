"""A foreign-key join app: orders keyed by order id (4 partitions), each naming its customer, left-joined with
customers keyed by customer id (3 partitions); what `engine worker -A tests.integration.fk_join_apps:app`
runs (ITEST_APP, ITEST_ORDERS, ITEST_CUSTOMERS)."""

import os

import engine
from tests.integration.table_join_apps import keep_rows

app = engine.App(os.environ.get("ITEST_APP", "ifkjoin"), commit_interval=0.2)
orders_in = app.topic(os.environ.get("ITEST_ORDERS", "orders-in"), key_type=str, value_type=dict,
                      partitions=4)
customers_in = app.topic(os.environ.get("ITEST_CUSTOMERS", "customers-in"), key_type=str, value_type=dict,
                         partitions=3)
orders = app.Table("orders", key_type=str, value_type=dict, partitions=4)
customers = app.Table("customers", key_type=str, value_type=dict, partitions=3)
enriched = orders.left_join(customers, foreign_key=lambda order: order["customer"], name="enriched")

app.agent(orders_in, name="take_orders")(keep_rows(orders))
app.agent(customers_in, name="take_customers")(keep_rows(customers))
