"""A stream-table join over a table that reads a source topic, for test_join_backlog.py: each payment
(key: customer) is enriched with the customer's profile version the table has when the payment is processed,
and sent to `<prefix>enriched`. ITEST_DELAY slows each payment down (seconds), so that partitions move while
a backlog is still being processed."""

import asyncio
import os

import engine

PREFIX = os.environ.get("ITEST_PREFIX", "j-")
DELAY = float(os.environ.get("ITEST_DELAY", "0"))
app = engine.App(os.environ.get("ITEST_APP", "ijoin"), commit_interval=0.2,
                 processing_guarantee=os.environ.get("ITEST_GUARANTEE", "at_least_once"))
payments = app.topic(f"{PREFIX}payments", key_type=str, value_type=int)
profiles = app.Table("profiles", source_topic=app.topic(f"{PREFIX}profiles", key_type=str, value_type=int))
enriched = app.topic(f"{PREFIX}enriched", key_type=str, value_type=dict)


@app.agent(payments)
async def enrich(stream):
    async for customer, (payment, version) in stream.left_join(profiles).items():
        if DELAY:
            await asyncio.sleep(DELAY)
        await enriched.send(key=customer, value={"id": payment, "version": version})
