"""Retail sales per product in 10-minute tumbling windows, on event time (when the till rang, not when the
record arrived): a till that was offline for a few seconds still lands its sales in the right window.

    engine worker -A examples.retail:app
    engine send -A examples.retail:app till-sales --key sku-1 \
        '{"sku": "sku-1", "quantity": 2, "price": 3.5, "at": 1767225600}'
    engine export -A examples.retail:app units-sold --to exports/units-sold --spark
"""

from dataclasses import dataclass
from datetime import timedelta

import engine


@dataclass
class Sale:
    sku: str
    quantity: int
    price: float
    at: float  # when the till rang, in seconds since the epoch


app = engine.App("retail", broker="kafka://localhost:9092")
sales = app.topic("till-sales", key_type=str, value_type=Sale, timestamp=lambda sale: sale.at)
units_sold = app.Table("units-sold", default=int, key_type=str, value_type=int).tumbling(
    timedelta(minutes=10), grace=timedelta(minutes=1), expires=timedelta(days=1))
revenue = app.Table("revenue", default=float, key_type=str, value_type=float).tumbling(
    timedelta(minutes=10), grace=timedelta(minutes=1), expires=timedelta(days=1))


@app.agent(sales)
async def tally(stream):
    async for sale in stream:
        units_sold[sale.sku] += sale.quantity
        revenue[sale.sku] += sale.quantity * sale.price
