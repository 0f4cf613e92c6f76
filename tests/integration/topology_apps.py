"""The app of the topology tests: orders keyed by order id, re-keyed by customer with group_by, counted per
customer in 1-second tumbling windows (5 s of grace) on the order's own time (closed windows on
`<app>-per-customer-closed`), in 2-second windows hopping by 1 s (closed on `<app>-per-customer-hop-closed`,
late orders on `<app>-per-customer-hop-late`), and summed per customer (`<app>-spent-changelog`).
Configured by ITEST_APP, ITEST_TOPIC and ITEST_GUARANTEE."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "itopology"), commit_interval=0.2,
                 processing_guarantee=os.environ.get("ITEST_GUARANTEE", "at_least_once"))
orders = app.topic(os.environ.get("ITEST_TOPIC", "orders"), key_type=str, value_type=dict,
                   timestamp=lambda order: order["at"])
per_customer = app.Table("per-customer", default=int, key_type=str, value_type=int).tumbling(
    1, grace=5, expires=3600)
per_customer.closed()
per_customer_hop = app.Table("per-customer-hop", default=int, key_type=str, value_type=int).hopping(
    2, 1, grace=5, expires=3600, late_topic=True)
per_customer_hop.closed()
spent = app.Table("spent", default=int, key_type=str, value_type=int)


@app.agent(orders, concurrency=2)
async def by_customer(stream):
    async for customer, order in stream.group_by(lambda order: order["customer"], name="by-customer").items():
        per_customer[customer] += 1
        per_customer_hop[customer] += 1
        spent[customer] += order["amount"]
