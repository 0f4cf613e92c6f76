"""The app of the reset test: a stream-table join (payments enriched with the customer's profile version,
sent to `<prefix>enriched`), a count per customer and a one-minute tumbling count with final results on
`<app>-per-minute-closed`; event time is the record's timestamp. ITEST_APP and ITEST_PREFIX configure it."""

import os

import engine

PREFIX = os.environ.get("ITEST_PREFIX", "r-")
app = engine.App(os.environ.get("ITEST_APP", "ireset"), commit_interval=0.2,
                 processing_guarantee="exactly_once")
payments = app.topic(f"{PREFIX}payments", key_type=str, value_type=int)
profiles = app.Table("profiles", source_topic=app.topic(f"{PREFIX}profiles", key_type=str, value_type=int))
enriched = app.topic(f"{PREFIX}enriched", key_type=str, value_type=dict)
totals = app.Table("totals", default=int, key_type=str, value_type=int)
per_minute = app.Table("per-minute", default=int, key_type=str, value_type=int).tumbling(60, expires=86_400)
per_minute.closed()


@app.agent(payments)
async def enrich(stream):
    async for customer, (payment, version) in stream.left_join(profiles).items():
        totals[customer] += 1
        per_minute[customer] += 1
        await enriched.send(key=customer, value={"id": payment, "version": version})
