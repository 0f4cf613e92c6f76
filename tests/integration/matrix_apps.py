"""The app of the topology matrix: every documented operator the windowed group_by test does not cover, in one
app run by `engine worker`s. Configured by ITEST_APP and ITEST_PREFIX (prefix of its source topics).

- `load_customers` writes the table `customers` from `<prefix>customers` (key: customer id), through
  `events()`.
- `load_regions` writes the GlobalTable `regions` from `<prefix>regions` (key: region code).
- `limits` is a source table over the compacted topic `<prefix>limits` (key: customer id), written by the
  test.
- `enrich` reads `<prefix>orders` (key: customer id), forwards `through` the internal topic `<app>-passed`,
  joins `customers` (co-partitioned), left-joins `limits`, joins `regions` by the order's region (orders of an
  unknown region are skipped by the inner join), and yields one record per order to `<prefix>enriched`,
  keyed by the customer (a sink with keys).
- `batch_ids` also reads `<prefix>orders` (two agents on one topic): filter (not region r4), map (to the id),
  take (batches of at most 50 within 0.5 s), enumerate; each batch sent to `<prefix>batched`, keyed by the
  worker and the batch's number.
- `double` answers asks; the timer `probe` asks it on every worker and sends each answer, keyed by the worker,
  to `<prefix>asked`.
"""

import itertools
import os
import uuid

import engine

PREFIX = os.environ.get("ITEST_PREFIX", "m-")
app = engine.App(os.environ.get("ITEST_APP", "imatrix"), commit_interval=0.2)
customers_topic = app.topic(f"{PREFIX}customers", key_type=str, value_type=dict)
regions_topic = app.topic(f"{PREFIX}regions", key_type=str, value_type=str)
orders = app.topic(f"{PREFIX}orders", key_type=str, value_type=dict)
enriched = app.topic(f"{PREFIX}enriched", key_type=str, value_type=dict)
asked = app.topic(f"{PREFIX}asked", key_type=str, value_type=dict)
batched = app.topic(f"{PREFIX}batched", key_type=str, value_type=list)
customers = app.Table("customers", key_type=str, value_type=dict)
regions = app.GlobalTable("regions", key_type=str, value_type=str)
limits = app.Table("limits", source_topic=app.topic(f"{PREFIX}limits", key_type=str, value_type=int))
WORKER = uuid.uuid4().hex[:8]
_asks = itertools.count()


@app.agent(customers_topic)
async def load_customers(stream):
    async for event in stream.events():
        customers[event.key] = event.value


@app.agent(regions_topic)
async def load_regions(stream):
    async for code, name in stream.items():
        regions[code] = name


@app.agent(orders, sink=[enriched], concurrency=2)
async def enrich(stream):
    pipeline = (stream.through("passed").join(customers).left_join(limits)
                .join(regions, key=lambda joined: joined[0][0]["region"]))
    async for ((order, customer), limit), region in pipeline:
        yield {"id": order["id"], "tier": customer["tier"], "limit": limit, "region": region}


@app.agent(orders)
async def batch_ids(stream):
    pipeline = stream.filter(lambda order: order["region"] != "r4").map(lambda order: order["id"])
    async for index, ids in pipeline.take(50, within=0.5).enumerate():
        await batched.send(key=f"{WORKER}-{index}", value=ids)


@app.agent()
async def double(stream):
    async for n in stream:
        yield n * 2


@app.timer(0.3)
async def probe() -> None:
    n = next(_asks)
    answer = await double.ask(n, key=f"{WORKER}-{n}", timeout=20)
    await asked.send(key=WORKER, value={"n": n, "answer": answer})
