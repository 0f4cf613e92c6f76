"""The app of the schema registry tests (`engine worker -A tests.integration.schema_apps:app`): three input
topics in the registry's three formats, each kept in a table whose values are records in a registry format
too, and each update sent on in a format Confluent's deserializers read back.

- `<app>-sales` (Avro key and value, a `Sale`) -> table `stock` (Avro `Stock`: units sold, sales) -> topic
  `<app>-stock` (Avro `Stock`); in version 2 both records have a field more, with a default (`Sale.channel`,
  `Stock.web`: units sold on the web); in version 3 `Sale.qty` is a string, which BACKWARD refuses.
- `<app>-payments` (JSON Schema, a pydantic `Payment`) -> table `balances` (JSON Schema `Balance`).
- `<app>-orders` (Protobuf `Order`) -> table `ordered` (Protobuf `Money`: cents per item) -> topic
  `<app>-refunds` (Protobuf `Refund`, one per order with qty 0).

Configured by ITEST_APP, ITEST_GUARANTEE and ITEST_VERSION.
"""

import os
from dataclasses import dataclass

import pydantic

import engine
from engine.schemas import Avro, JsonSchema, Protobuf
from tests.schema_registry.protos import Money, Order, Refund

VERSION = int(os.environ.get("ITEST_VERSION", "1"))
APP = os.environ.get("ITEST_APP", "ischemas")

if VERSION == 1:
    @dataclass
    class Sale:
        item: str
        qty: int

    @dataclass
    class Stock:
        sold: int = 0
        sales: int = 0
else:
    @dataclass
    class Stock:  # type: ignore[no-redef]
        sold: int = 0
        sales: int = 0
        web: int = 0  # units sold on the web channel

    if VERSION == 2:
        @dataclass
        class Sale:  # type: ignore[no-redef]
            item: str
            qty: int
            channel: str = "shop"
    else:
        @dataclass
        class Sale:  # type: ignore[no-redef]
            item: str
            qty: str  # a long in versions 1 and 2: BACKWARD refuses it


class Payment(pydantic.BaseModel):
    who: str
    cents: int


class Balance(pydantic.BaseModel):
    cents: int = 0
    payments: int = 0


app = engine.App(APP, commit_interval=0.3,
                 processing_guarantee=os.environ.get("ITEST_GUARANTEE", "exactly_once"))
sales = app.topic(f"{APP}-sales", key_type=str, value_type=Sale,
                  key_serializer=Avro(schema='"string"'), value_serializer=Avro(record_name="shop.Sale"))
stock_out = app.topic(f"{APP}-stock", key_type=str, value_type=Stock, key_serializer="str",
                      value_serializer=Avro(record_name="shop.Stock"))
stock = app.Table("stock", key_type=str, value_type=Stock, value_serializer=Avro(record_name="shop.Stock"))
payments = app.topic(f"{APP}-payments", key_type=str, value_type=Payment, value_serializer=JsonSchema())
balances = app.Table("balances", key_type=str, value_type=Balance, value_serializer=JsonSchema())
orders = app.topic(f"{APP}-orders", key_type=str, value_type=Order, value_serializer=Protobuf())
ordered = app.Table("ordered", key_type=str, value_type=Money, value_serializer=Protobuf())
refunds = app.topic(f"{APP}-refunds", key_type=str, value_type=Refund, value_serializer=Protobuf())


@app.agent(sales)
async def keep_stock(stream):
    async for event in stream.events():
        sale = event.value
        old = stock.get(event.key) or Stock()
        new = Stock(old.sold + sale.qty, old.sales + 1)
        if VERSION == 2:
            new.web = old.web + (sale.qty if sale.channel == "web" else 0)
        stock[event.key] = new
        await stock_out.send(key=event.key, value=new)


@app.agent(payments)
async def keep_balances(stream):
    async for event in stream.events():
        old = balances.get(event.key) or Balance()
        balances[event.key] = Balance(cents=old.cents + event.value.cents, payments=old.payments + 1)


@app.agent(orders)
async def keep_orders(stream):
    async for event in stream.events():
        order = event.value
        old = ordered.get(event.key) or Money(currency="EUR", cents=0)
        ordered[event.key] = Money(currency="EUR", cents=old.cents + order.qty * order.price.cents)
        if order.qty == 0:
            await refunds.send(key=event.key, value=Refund(order_item=order.item))
