"""Fraud detection: a payment from a country its customer never paid from is suspicious.

Payments are keyed by customer; a table keeps, per customer, the countries seen so far. Each payment is
joined with it: a new country (for a customer with history) goes to `suspicious-payments`.

    engine worker -A examples.fraud:app
    engine send -A examples.fraud:app payments --key ada \\
        '{"id": "p1", "customer": "ada", "amount": 12.5, "country": "FR"}'
"""

from dataclasses import dataclass

import engine


@dataclass
class Payment:
    id: str
    customer: str
    amount: float
    country: str


app = engine.App("fraud", broker="kafka://localhost:9092")
payments = app.topic("payments", key_type=str, value_type=Payment)
suspicious = app.topic("suspicious-payments", key_type=str, value_type=Payment)
countries_seen = app.Table("countries-seen", key_type=str, value_type=list)


@app.agent(payments)
async def detect(stream):
    async for payment, seen in stream.left_join(countries_seen):
        seen = seen or []
        if payment.country not in seen:
            if seen:
                await suspicious.send(key=payment.customer, value=payment)
            countries_seen[payment.customer] = [*seen, payment.country]
