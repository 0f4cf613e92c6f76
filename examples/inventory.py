"""Retail inventory: sales and shipments maintain the stock on hand per product; when a sale takes the stock
below the reorder threshold, a reorder is sent.

Both topics are keyed by SKU, so both agents write the partition of the product they handle.

    engine worker -A examples.inventory:app
    engine send -A examples.inventory:app shipments --key sku-1 '{"sku": "sku-1", "quantity": 40}'
    engine send -A examples.inventory:app sales --key sku-1 '{"sku": "sku-1", "quantity": 35}'
"""

from dataclasses import dataclass

import engine

REORDER_BELOW = 10
REORDER_QUANTITY = 50


@dataclass
class Sale:
    sku: str
    quantity: int


@dataclass
class Shipment:
    sku: str
    quantity: int


@dataclass
class Reorder:
    sku: str
    quantity: int
    stock: int


app = engine.App("inventory", broker="kafka://localhost:9092")
sales = app.topic("sales", key_type=str, value_type=Sale)
shipments = app.topic("shipments", key_type=str, value_type=Shipment)
reorders = app.topic("reorders", key_type=str, value_type=Reorder)
stock = app.Table("stock", default=int, key_type=str, value_type=int)


@app.agent(shipments)
async def receive(stream):
    async for shipment in stream:
        stock[shipment.sku] += shipment.quantity


@app.agent(sales)
async def sell(stream):
    async for sale in stream:
        before = stock[sale.sku]
        after = stock[sale.sku] = before - sale.quantity
        if after < REORDER_BELOW <= before:
            await reorders.send(key=sale.sku, value=Reorder(sale.sku, REORDER_QUANTITY, after))
